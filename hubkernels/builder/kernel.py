"""Compile a kernel package into Hub-layout variants: `build/<variant>/` with `metadata.json` and digest.

No Nix: sources go through `torch.utils.cpp_extension` (setuptools + ninja) into one Python-limited-API
module `<id>.abi3.so` per variant, with ops registered by `TORCH_LIBRARY` (or `STABLE_TORCH_LIBRARY`) under
the unique namespace `_<python_name>_<backend>_<id>`; kernel-builder's generated `registration.h` and
`_ops.py` come with it, so kernel-builder kernels build unchanged. `[torch] stable-abi` builds
`torch-stable-abi<M><m>-...` variants that load on every later torch. A noarch kernel gets every listed
backend in one run. Incremental: a rebuild with nothing changed only checks a stamp.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .._version import __version__
from ..config import BuildConfig, load_config
from ..digest import hash_variant
from ..errors import BuildError
from ..layout import build_dir, ships
from ..metadata import Metadata
from ..system import System, Variant
from .abi import check_abi, check_torch_stable_abi
from .checks import check_buildable
from .compile import compile_native
from .generated import noarch_ops_py, ops_py
from .ids import git_state, ops_name, unique_id
from .loadcheck import admitted_tables, check_module
from .machine import check_torch_bounds, choose_backend, stable_abi, variant_for

logger = logging.getLogger("hubkernels.builder")
Say = Callable[[str], None]

__all__ = ["BuildResult", "Say", "build"]


@dataclass(frozen=True)
class BuildResult:
    """What a build produced; `also` holds the other backends' variants of a noarch kernel built in the same run."""

    variant: Variant
    path: Path
    id: str
    up_to_date: bool
    also: tuple[BuildResult, ...] = ()


def build(
    path: str | Path = ".",
    *,
    backend: str | None = None,
    jobs: int | None = None,
    verbose: bool = False,
    out_dir: str | Path | None = None,
    quiet: bool = False,
    say: Say | None = None,
) -> BuildResult:
    """Build the kernel at `path` for this machine into `<path>/build/<variant>/` and return where it went.

    A noarch kernel built without `backend` gets a `torch-<backend>` variant for each backend it lists.
    Concurrent builds of one checkout (parallel test sessions, say) take turns on a lock file. Progress lines go
    to `say` (default: the `hubkernels.builder` logger, at INFO), none with `quiet`.
    """
    from filelock import FileLock

    if jobs is not None and jobs < 1:
        raise BuildError(f"jobs must be at least 1, not {jobs}")
    config = load_config(path)
    try:
        (config.root / "_build").mkdir(exist_ok=True)
        with FileLock(str(config.root / "_build" / ".lock")):
            return _build_locked(config, backend, jobs, verbose, out_dir, _silent if quiet else say or logger.info)
    except OSError as e:  # a build or output directory that cannot be written: say which, no traceback
        where = f" ({e.filename})" if e.filename else ""
        raise BuildError(
            f"cannot write the build output{where}: {e.strerror or e}; "
            "check that the kernel directory and its build/ and _build/ are writable directories"
        ) from None


def _build_locked(
    config: BuildConfig, backend: str | None, jobs: int | None, verbose: bool, out_dir: str | Path | None, say: Say
) -> BuildResult:
    system = System.current()
    chosen = choose_backend(config, system, backend)
    check_buildable(config, chosen)
    check_torch_bounds(config, system)
    out_root = Path(out_dir) if out_dir else build_dir(config.root)
    uid = unique_id(config.root)
    if config.is_noarch(chosen):
        backends = (
            [chosen]
            if backend is not None
            else [chosen] + [b for b in config.general.backends if b != chosen and config.is_noarch(b)]
        )
        results = [
            _build_variant(config, b, Variant("noarch", b), None, uid, out_root, jobs, verbose, say) for b in backends
        ]
        return BuildResult(
            results[0].variant, results[0].path, results[0].id, results[0].up_to_date, tuple(results[1:])
        )
    target = stable_abi(config, chosen, system)
    variant = variant_for(system, chosen, target)
    return _build_variant(config, chosen, variant, target, uid, out_root, jobs, verbose, say)


def _build_variant(
    config: BuildConfig,
    backend: str,
    variant: Variant,
    target: tuple[int, int] | None,
    uid: str,
    out_root: Path,
    jobs: int | None,
    verbose: bool,
    say: Say,
) -> BuildResult:
    root = config.root
    name = ops_name(config, backend, uid)
    noarch = variant.kind == "noarch"
    dest = out_root / str(variant)
    work = root / "_build" / str(variant)
    pkg_files = _package_files(config)
    sources = [root / s for k in config.kernels_for(backend) for s in k.src]
    sources += [root / s for s in (config.torch.src if config.torch else ())]
    sources = [s for s in sources if s.is_file()]  # a missing one is reported by the compile step
    builder = sorted(Path(__file__).parent.glob("*.py"))
    stamp = _stamp(
        [__version__, name, str(variant), config.file.read_text(), sys.version_info[:2]], pkg_files + sources + builder
    )
    stamp_file = work / "stamp"
    if dest.is_dir() and stamp_file.is_file() and stamp_file.read_text() == stamp:
        try:
            from ..digest import violations

            if not violations(dest, Metadata.read(dest).digest):
                say(f"{variant}: up to date ({dest})")
                return BuildResult(variant, dest, name, True)
        except (OSError, ValueError):
            pass
    say(f"Building {config.general.name} v{config.general.version} -> {variant} (ops namespace {name})")
    work.mkdir(parents=True, exist_ok=True)
    staging = out_root / f".{variant}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    archs: list[str] = []
    for f in pkg_files:
        dest_file = staging / f.relative_to(config.package_dir)
        dest_file.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest_file)
    if noarch:
        (staging / "_ops.py").write_text(noarch_ops_py(config.python_name, uid))
    else:
        so, archs = compile_native(config, backend, name, work, jobs=jobs, verbose=verbose, stable_abi=target)
        shutil.copy2(so, staging / f"{name}.abi3.so")
        _check_module(staging / f"{name}.abi3.so", target, variant, say)
        (staging / "_ops.py").write_text(ops_py(name))
    _write_metadata(config, backend, name, archs, staging)
    if dest.exists():
        shutil.rmtree(dest)
    staging.rename(dest)
    stamp_file.parent.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(stamp)
    say(f"{variant}: built {dest}")
    return BuildResult(variant, dest, name, False)


def _check_module(so: Path, target: tuple[int, int] | None, variant: Variant, say: Say) -> None:
    """Fail unless the module loads where the variant's name says: Python ABI3, the torch stable ABI, and every
    symbol resolved against the real libraries of each torch it admits (`loadcheck`)."""
    problems = check_abi(so)
    fatal = [p for p in problems if p.startswith("Python ABI3")]
    if target is not None:
        fatal += check_torch_stable_abi(so, target)
    loads = check_module(so, variant, admitted_tables(variant))
    fatal += loads.problems
    if fatal:
        raise BuildError(
            f"{so.name} would not load where {variant} says it does (fix the source or the link; "
            "reasons below):\n  " + "\n  ".join(fatal)
        )
    for p in loads.platform:
        say(f"warning: load check: {p}")


def _write_metadata(config: BuildConfig, backend: str, name: str, archs: list[str], staging: Path) -> None:
    commit, _, dirty = git_state(config.root)
    backend_meta: dict[str, object] = {"type": backend}
    if backend == "cuda":
        noarch_caps = config.torch_noarch.cuda_capabilities if config.torch_noarch else ()
        backend_meta["archs"] = archs or list(noarch_caps)
    # "kernel-builder" names the builder that made the variant (HF kernels requires the key); we are that builder.
    provenance: dict[str, object] = {"kernel-builder": {"name": "hubkernels", "version": __version__}}
    if commit:
        provenance["kernel"] = {"commit": commit, "dirty": dirty}
    meta = Metadata(
        name=config.general.name,
        id=name,
        version=config.general.version,
        license=config.general.license,
        backend=backend_meta,
        python_depends=config.python_depends(backend),
        kernel_depends=[_dependency(d) for d in config.kernel_depends(backend)],
        upstream=config.general.upstream,
        source=config.general.source,
        digest={"algorithm": "sha256", "files": hash_variant(staging)},
        provenance=provenance,
    )
    meta.write(staging)


def _package_files(config: BuildConfig) -> list[Path]:
    """The Python package files shipped in every variant (.py plus the [torch] pyext extensions)."""
    pkg = config.package_dir
    if not (pkg / "__init__.py").is_file():
        raise BuildError(f"{pkg}/__init__.py is missing: the kernel's Python package must live there")
    exts = {"py", *config.data_extensions}  # arch builds drop .pyi stubs, as kernel-builder does
    files = []
    for p in sorted(pkg.rglob("*")):
        rel = p.relative_to(pkg)
        if p.is_file() and ships(rel.as_posix()) and p.suffix.lstrip(".") in exts and rel.as_posix() != "_ops.py":
            files.append(p)
    return files


def _stamp(parts: list[object], files: list[Path]) -> str:
    h = hashlib.sha256(json.dumps([str(p) for p in parts]).encode())
    for f in sorted(files):
        h.update(str(f).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _dependency(dep: object) -> dict[str, object]:
    out: dict[str, object] = {"repo-id": dep.repo_id}  # type: ignore[attr-defined]
    for key in ("version", "revision"):
        if getattr(dep, key) is not None:
            out[key] = getattr(dep, key)
    return out


def _silent(msg: str) -> None:
    pass
