"""ABI checks of a built module: Python ABI3 and manylinux (kernel-abi-check), and the torch stable ABI.

The torch stable-ABI check follows kernel-abi-check's `--torch-stable-abi` rules: no undefined C++ symbol of
`c10::`, `at::` or `torch::` outside `torch::stable::`, and no C shim function newer than the target torch.
When the installed kernel-abi-check has no Python entry point for it, the same rules run here, with each shim
function's first torch version read from the `TORCH_FEATURE_VERSION` guards of the building torch's headers.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from ..errors import BuildError

_GUARD = re.compile(r"#\s*if\s+TORCH_FEATURE_VERSION\s*>=\s*TORCH_VERSION_(\d+)_(\d+)_\d+")
_EXPORT = re.compile(r"AOTI_TORCH_EXPORT\s+(?:[\w:]+[\s\*]+)*?\**(\w+)\s*\(")
_SHIM_HEADERS = (
    "torch/csrc/stable/c/shim.h",
    "torch/csrc/inductor/aoti_torch/c/shim*.h",
    "torch/csrc/inductor/aoti_torch/generated/c_shim_*.h",
)


def check_abi(so: Path, python_abi: str = "3.9", manylinux: str = "manylinux_2_28") -> list[str]:
    """kernel-abi-check's Python ABI3 and manylinux checks of one module; returns the violations (readable)."""
    try:
        import kernel_abi_check
    except ImportError:
        return []
    obj = kernel_abi_check.ObjectFile(str(so))
    problems = [f"Python ABI3 {python_abi}: {v}" for v in obj.check_python_abi(python_abi)]
    problems += [f"{manylinux}: {v}" for v in obj.check_manylinux(manylinux)]
    return problems


def check_torch_stable_abi(so: Path, target: tuple[int, int]) -> list[str]:
    """Violations of the torch `target` stable ABI in one module (empty when it loads on every later torch)."""
    version = f"{target[0]}.{target[1]}"
    try:
        import kernel_abi_check

        native = getattr(kernel_abi_check.ObjectFile(str(so)), "check_torch_stable_abi", None)
    except ImportError:
        native = None
    if native is not None:
        return [f"torch stable ABI {version}: {v}" for v in native(version)]
    problems = []
    shims = shim_versions()
    for name in undefined_symbols(so):
        if name in shims:
            if shims[name] > target:
                added = shims[name]
                problems.append(f"torch stable ABI {version}: {name} needs torch {added[0]}.{added[1]}")
        elif re.match(r"(c10|at|torch)::", name) and not name.startswith("torch::stable::"):
            problems.append(f"torch stable ABI {version}: {name} is not part of the stable ABI")
    return problems


def undefined_symbols(so: Path) -> list[str]:
    """The undefined dynamic symbols of a shared library, C++ names demangled, version suffixes dropped."""
    nm = shutil.which("nm")
    if nm is None:
        raise BuildError("the torch stable-ABI check needs `nm` (binutils): install binutils")
    out = subprocess.run([nm, "-D", "-C", "--undefined-only", str(so)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise BuildError(f"nm could not read {so.name}: {out.stderr.strip()}")
    names = []
    for line in out.stdout.splitlines():
        parts = line.strip().split(maxsplit=1)
        if len(parts) == 2 and parts[0] in ("U", "w", "v"):
            names.append(re.sub(r"@.*$", "", parts[1]))
    return names


@lru_cache(maxsize=1)
def shim_versions() -> dict[str, tuple[int, int]]:
    """Torch's C shim functions that are newer than torch 2.9, with the torch (major, minor) that added each."""
    from torch.utils.cpp_extension import include_paths

    found: dict[str, tuple[int, int]] = {}
    for inc in include_paths():
        for pattern in _SHIM_HEADERS:
            for header in Path(inc).glob(pattern):
                for name, version in _guarded_exports(header.read_text(errors="replace")):
                    found[name] = min(version, found.get(name, version))
    return found


def _guarded_exports(text: str) -> list[tuple[str, tuple[int, int]]]:
    """(function, version) for each AOTI_TORCH_EXPORT inside `#if TORCH_FEATURE_VERSION >= ...` guards."""
    stack: list[tuple[int, int] | None] = []
    chunks: list[tuple[str, tuple[int, int]]] = []
    current: list[str] = []

    def flush() -> None:
        versions = [v for v in stack if v is not None]
        if current and versions:
            chunks.append(("\n".join(current), max(versions)))
        current.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            flush()
            m = _GUARD.match(stripped)
            if m:
                stack.append((int(m.group(1)), int(m.group(2))))
            elif re.match(r"#\s*if", stripped):
                stack.append(None)
            elif re.match(r"#\s*(else|elif)", stripped) and stack:
                stack[-1] = None
            elif re.match(r"#\s*endif", stripped) and stack:
                stack.pop()
            continue
        current.append(line)
    flush()
    return [(name, version) for chunk, version in chunks for name in _EXPORT.findall(chunk)]
