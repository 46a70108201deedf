"""What kernel-builder refuses before it compiles, refused here in one line each, and the headers `depends` names.

- A `[torch]` backend with no `[kernel.*]` has nothing to compile (kernel-builder would ship the binding alone,
  whose ops do not exist): refused; pure-Python kernels use `[torch-noarch]`.
- `[tvm-ffi]` kernels: not built by hubkernels yet.
- Torch library registrations in the kernel's Python package that do not pass `add_op_namespace_prefix(...)` as
  the first argument (kernel-builder's torch-ops-check; it scans the whole source tree, we scan what ships).
- `depends = ["cutlass_X_Y"]`: the CUTLASS X.Y headers of the `nvidia-cutlass` wheel (pip, pinned to X.Y.*),
  cached under the toolchain directory; a version the package index lacks is refused.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

from ..config import BuildConfig
from ..errors import BuildError
from ..settings import toolchain_dir

#: kernel-builder's torch-ops-check: decorators whose first argument must be `add_op_namespace_prefix(...)`.
TORCH_LIBRARY_DECORATORS = frozenset(
    {"custom_op", "triton_op", "register_kernel", "register_fake", "register_vmap", "register_torch_dispatch"}
)
#: Dependencies that need nothing beyond torch's own headers.
_HEADERLESS = frozenset({"torch"})
#: Header directories inside the nvidia-cutlass wheel (the C++ library and its tools/util helpers).
_CUTLASS_INCLUDES = ("cutlass_library/source/include", "cutlass_library/source/tools/util/include")


def check_buildable(config: BuildConfig, backend: str) -> None:
    """Refuse, in one line, what hubkernels cannot build for `backend` (before any compiler runs)."""
    if config.tvm_ffi is not None:
        raise BuildError(
            f"{config.file}: [tvm-ffi] kernels are not built by hubkernels yet; only [torch] and "
            "[torch-noarch] kernels are"
        )
    if config.torch is not None and not config.kernels_for(backend):
        raise BuildError(
            f"{config.file}: backend {backend!r} has no [kernel.*] with backend = {backend!r}, so its "
            f"variant would hold the binding without its ops: add one, or remove {backend!r} from "
            "[general] backends (pure-Python kernels use [torch-noarch])"
        )
    check_op_registrations(config)


def check_op_registrations(config: BuildConfig) -> None:
    """Refuse torch.library registrations in the package that bypass `add_op_namespace_prefix`."""
    found = op_registration_violations(config.package_dir)
    if found:
        raise BuildError(
            f"Torch library registrations that do not use `add_op_namespace_prefix`: {'; '.join(found)} "
            '(register as custom_op(add_op_namespace_prefix("name")), with the helper from ._ops)'
        )


def op_registration_violations(package: Path) -> list[str]:
    """`file:line kind name` for each top-level def or class whose torch.library decorator lacks the prefix."""
    found: list[str] = []
    kinds = {ast.FunctionDef: "function", ast.AsyncFunctionDef: "async function", ast.ClassDef: "class"}
    for path in sorted(package.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError) as e:
            raise BuildError(f"{path}: cannot be parsed ({e}); fix the Python source") from None
        for node in ast.iter_child_nodes(tree):
            if type(node) not in kinds:
                continue
            for deco in node.decorator_list:  # type: ignore[attr-defined]
                if (
                    isinstance(deco, ast.Call)
                    and deco.args
                    and _called(deco) in TORCH_LIBRARY_DECORATORS
                    and not (isinstance(deco.args[0], ast.Call) and _called(deco.args[0]) == "add_op_namespace_prefix")
                ):
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno} {kinds[type(node)]} {node.name}")  # type: ignore[attr-defined]
    return found


def _called(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def dependency_includes(config: BuildConfig, backend: str) -> list[Path]:
    """Header directories for the `depends` of `backend`'s kernels (CUTLASS from its pip wheel); refuses others."""
    dirs: list[Path] = []
    for kernel in config.kernels_for(backend):
        for dep in kernel.depends:
            if dep in _HEADERLESS:
                continue
            if not dep.startswith("cutlass_"):
                raise BuildError(
                    f"{config.file}: [kernel.{kernel.name}] depends on {dep!r}, which hubkernels "
                    "cannot supply yet; only torch and cutlass_* dependencies build here"
                )
            dirs += [d for d in cutlass_headers(dep.removeprefix("cutlass_").replace("_", ".")) if d not in dirs]
    return dirs


def cutlass_headers(version: str) -> list[Path]:
    """CUTLASS `version` (e.g. "3.6") headers from the nvidia-cutlass wheel, downloaded once into the cache."""
    home = toolchain_dir() / f"cutlass-{version}"
    dirs = [home / d for d in _CUTLASS_INCLUDES]
    if (home / ".complete").is_file():
        return [d for d in dirs if d.is_dir()]
    home.mkdir(parents=True, exist_ok=True)
    spec = f"nvidia-cutlass=={version}.*"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-q",
            "-d",
            str(home / "wheel"),
            spec,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    wheels = sorted((home / "wheel").glob("nvidia_cutlass-*.whl"))
    if proc.returncode != 0 or not wheels:
        reason = (proc.stderr.strip().splitlines() or ["no wheel"])[-1]
        raise BuildError(
            f"depends cutlass_{version.replace('.', '_')} needs the CUTLASS {version} headers, but "
            f"`pip download {spec}` failed ({reason}): use a CUTLASS version the package index has"
        )
    with zipfile.ZipFile(wheels[-1]) as whl:
        whl.extractall(home, [n for n in whl.namelist() if n.startswith(_CUTLASS_INCLUDES)])
    (home / ".complete").write_text(wheels[-1].name + "\n")
    return [d for d in dirs if d.is_dir()]
