"""Import a build variant under its unique id, so relative imports work and builds coexist.

The module name is the variant's `metadata.id` (e.g. `_ltx_kernels_cpu_1a2b3c4`), the same string that
names its torch op namespace. Two builds of one kernel therefore load side by side in one process,
and one build loaded twice (say from the Hub cache and from a local path) is imported once.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from . import digest as _digest
from .errors import KernelLoadError
from .layout import variant_dirs  # noqa: F401  (re-exported: where a local kernel's variants live)
from .metadata import Metadata
from .platform import System
from .variants import Resolution, require, resolve

logger = logging.getLogger(__name__)

#: Python dependencies a kernel may declare (kernel-builder's curated list) -> the module to import.
_PYTHON_DEPENDS = {"einops": "einops", "helion": "helion", "tvm-ffi": "tvm_ffi", "nvidia-cutlass-dsl": "cutlass",
                   "nki": "nki", "onednn": None}


@dataclass(frozen=True)
class LoadedKernel:
    """One imported variant: where it came from and its module."""

    path: Path
    metadata: Metadata
    module: ModuleType


_loaded: dict[str, LoadedKernel] = {}
_lock = threading.Lock()


def loaded_kernels() -> list[LoadedKernel]:
    """The variants imported in this process, in import order."""
    with _lock:
        return list(_loaded.values())


def resolve_local(path: str | Path, backend: str | None = None, system: System | None = None) -> tuple[Path, Resolution]:
    """Resolve the best variant of a local kernel directory; returns (its directory, the full trace)."""
    base, found = variant_dirs(path)
    resolution = resolve(found, system, backend)
    chosen = require(resolution, str(base))
    return found[str(chosen)], resolution


def get_local_kernel(repo_path: str | Path, backend: str | None = None, *, verify: bool = False) -> ModuleType:
    """Import the best variant of a locally built kernel (`hubkernels build` output or a variant dir).

    `verify=True` checks every file against the digest in metadata.json before importing.
    """
    variant_dir, resolution = resolve_local(repo_path, backend)
    logger.info("loading %s from %s", resolution.chosen, variant_dir)
    return import_variant(variant_dir, verify=verify)


def check_capability(metadata: Metadata, system: System) -> None:
    """Refuse a CUDA variant none of whose archs runs on the visible GPUs, saying which archs it has."""
    if metadata.backend_type != "cuda" or not metadata.archs or not system.capabilities:
        return
    for cap in system.capabilities:
        if any(_arch_runs_on(arch, cap) for arch in metadata.archs):
            return
    have = ", ".join(f"{a}.{b}" for a, b in system.capabilities)
    raise KernelLoadError(
        f"{metadata.name} ({metadata.id}) was built for CUDA capabilities {', '.join(metadata.archs)}, "
        f"but the GPUs here are {have}. Ask for a build that includes your GPU's capability, or build it "
        "yourself with `hubkernels build` on this machine."
    )


def _arch_runs_on(arch: str, cap: tuple[int, int]) -> bool:
    ptx = arch.endswith("+PTX")
    base = arch.removesuffix("+PTX")
    specific = base[-1] in "af"
    major, minor = (int(x) for x in base.rstrip("af").split("."))
    if specific:
        return (major, minor) == cap
    if ptx:
        return (major, minor) <= cap
    return major == cap[0] and minor <= cap[1]  # SASS runs on the same major, equal or newer minor


def _check_python_depends(metadata: Metadata) -> None:
    for dep in metadata.python_depends:
        if dep not in _PYTHON_DEPENDS:
            raise KernelLoadError(f"{metadata.name} declares unsupported Python dependency {dep!r}")
        module = _PYTHON_DEPENDS[dep]
        if module and importlib.util.find_spec(module) is None:
            raise KernelLoadError(f"{metadata.name} requires the Python package {dep!r}: pip install {dep}")


def import_variant(variant_dir: str | Path, *, verify: bool = False, system: System | None = None) -> ModuleType:
    """Import one variant directory under its unique id (idempotent per id)."""
    variant_dir = Path(variant_dir).resolve()
    metadata = Metadata.read(variant_dir)
    with _lock:
        existing = _loaded.get(metadata.id)
        if existing is not None:
            if existing.path != variant_dir and _digest.hash_variant(existing.path) != _digest.hash_variant(variant_dir):
                raise KernelLoadError(
                    f"{variant_dir} and {existing.path} are different builds with the same id {metadata.id}; "
                    "their torch ops would collide. Rebuild one of them (a new id comes with each commit)."
                )
            return existing.module
        if verify:
            _digest.verify_variant(variant_dir, metadata.digest)
        check_capability(metadata, system or System.current())
        _check_python_depends(metadata)
        if metadata.dirty:
            warnings.warn(f"{metadata.name} ({metadata.id}) was built from a dirty git tree", UserWarning, stacklevel=3)
        init = variant_dir / "__init__.py"
        if not init.is_file():
            init = variant_dir / metadata.python_name / "__init__.py"
        if not init.is_file():
            raise KernelLoadError(f"{variant_dir} has no __init__.py: not a kernel variant")
        spec = importlib.util.spec_from_file_location(metadata.id, init, submodule_search_locations=[str(init.parent)])
        if spec is None or spec.loader is None:
            raise KernelLoadError(f"cannot import {init}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[metadata.id] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            sys.modules.pop(metadata.id, None)
            raise KernelLoadError(f"importing {metadata.name} from {variant_dir} failed: {e}") from e
        _loaded[metadata.id] = LoadedKernel(variant_dir, metadata, module)
        return module
