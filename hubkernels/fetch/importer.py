"""Import a build variant under its unique id, so relative imports work and builds coexist.

The module name is the variant's `metadata.id` (e.g. `_ltx_kernels_cpu_1a2b3c4`), the same string that
names its torch op namespace. Two builds of one kernel therefore load side by side in one process,
and one build loaded twice (say from the Hub cache and from a local path) is imported once.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

from .. import digest as _digest
from ..errors import KernelLoadError, VariantImportError
from ..metadata import Metadata
from ..system import System
from ..variants import archs_support, minver_reason
from .cache import Verified
from .kernel_deps import check_python_depends, providing
from .native import OpNamespaceError, check_library, load_failure, release

__all__ = [
    "LoadedKernel",
    "OpNamespaceError",
    "check_capability",
    "import_variant",
    "loaded_kernels",
]


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


def check_capability(metadata: Metadata, system: System) -> None:
    """Refuse a GPU variant none of whose archs runs on the visible GPUs, or one that needs a newer `kernels`."""
    minver = minver_reason(metadata.extra.get("kernels-minver"))
    if minver is not None:
        raise KernelLoadError(f"{metadata.name} ({metadata.id}) cannot load: {minver}.")
    if not metadata.archs:
        return
    if metadata.backend_type == "cuda" and system.capabilities:
        if any(archs_support(metadata.archs, cap) for cap in system.capabilities):
            return
        have = ", ".join(f"{a}.{b}" for a, b in system.capabilities)
        kind = "CUDA capabilities"
    elif metadata.backend_type == "rocm" and system.rocm_archs:
        if any(gfx in metadata.archs for gfx in system.rocm_archs):
            return
        have, kind = ", ".join(system.rocm_archs), "ROCm archs"
    else:
        return
    raise KernelLoadError(
        f"{metadata.name} ({metadata.id}) was built for {kind} {', '.join(metadata.archs)}, "
        f"but the GPUs here are {have}. Ask for a build that includes your GPU's capability, or build it "
        "yourself with `hubkernels build` on this machine."
    )


def import_variant(
    variant_dir: str | Path,
    *,
    verify: bool = False,
    system: System | None = None,
    verified: Verified | None = None,
    deps: Mapping[str, ModuleType] | None = None,
) -> ModuleType:
    """Import one variant directory under its unique id (idempotent per id).

    `verify=True` checks every file against the digest first; a verified variant (that, or `verified=` from the
    Hub loader) runs only what was verified: its Python files are compiled from sources whose hash is checked
    as they are read, never from a `__pycache__` (which no digest covers), and no bytecode is written.
    `deps` ({repo_id: module}) is what the kernel's `get_kernel_dep` calls return while it is imported.
    """
    variant_dir = Path(variant_dir).resolve()
    metadata = Metadata.read(variant_dir)
    with _lock:
        existing = _loaded.get(metadata.id)
        if existing is not None:
            if existing.path != variant_dir and not _same_build(existing.path, variant_dir):
                raise KernelLoadError(
                    f"{variant_dir} and {existing.path} are different builds with the same id {metadata.id}; "
                    "their torch ops would collide. Rebuild one of them (a new id comes with each commit)."
                )
            return existing.module
        if verify:
            hashes = _digest.verify_variant(variant_dir, metadata.digest)
            verified = Verified((metadata.digest or {}).get("algorithm", "sha256"), hashes)
        check_capability(metadata, system or System.current())
        check_python_depends(metadata)
        init = _entry_file(variant_dir, metadata)
        adopted = _already_imported(metadata, init)
        if adopted is not None:
            _loaded[metadata.id] = LoadedKernel(variant_dir, metadata, adopted)
            return adopted
        check_library(variant_dir, metadata)
        if metadata.dirty:
            warnings.warn(f"{metadata.name} ({metadata.id}) was built from a dirty git tree", UserWarning, stacklevel=3)
        with providing(deps or {}):
            module = _exec_package(metadata, variant_dir, init, verified)
        _loaded[metadata.id] = LoadedKernel(variant_dir, metadata, module)
        return module


def _same_build(first: Path, again: Path) -> bool:
    """Whether the variant at `again` is the build first imported from `first`, by their files. Where `first` is
    gone (a cleaned cache), the imported module stands: nothing is left to compare it with."""
    try:
        imported = _digest.hash_variant(first, memo=True)
    except OSError:
        return True
    return imported == _digest.hash_variant(again, memo=True)


def _entry_file(variant_dir: Path, metadata: Metadata) -> Path:
    init = variant_dir / "__init__.py"
    if not init.is_file():
        init = variant_dir / metadata.python_name / "__init__.py"
    if not init.is_file():
        raise KernelLoadError(f"{variant_dir} has no __init__.py: not a kernel variant")
    return init


def _already_imported(metadata: Metadata, init: Path) -> ModuleType | None:
    """The module of this very file if something else (HF `kernels`) imported it; refuse any other holder."""
    module = sys.modules.get(metadata.id)
    if module is None:
        return None
    origin = getattr(module, "__file__", None)
    if origin and Path(origin).resolve() == init.resolve():
        return module
    raise KernelLoadError(
        f"{metadata.name}: a module named {metadata.id!r} is already imported in this process (from "
        f"{origin or 'an unknown place'}), so this variant cannot take that name; its torch ops would collide. "
        "Load only one build per id in a process (a new id comes with each commit)."
    )


def _exec_package(metadata: Metadata, variant_dir: Path, init: Path, verified: Verified | None) -> ModuleType:
    """Execute the package; on failure remove only what this import added to sys.modules."""
    if verified is not None:
        loader = _VerifiedSourceLoader(metadata.id, str(init), variant_dir, verified)
        _finder.packages[metadata.id] = (variant_dir, verified)
        _finder.install()
    else:
        loader = None
    spec = importlib.util.spec_from_file_location(
        metadata.id, init, loader=loader, submodule_search_locations=[str(init.parent)]
    )
    if spec is None or spec.loader is None:
        raise KernelLoadError(f"cannot import {init}")
    module = importlib.util.module_from_spec(spec)
    before = set(sys.modules)
    sys.modules[metadata.id] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        for name in set(sys.modules) - before:
            if name == metadata.id or name.startswith(metadata.id + "."):
                sys.modules.pop(name, None)
        _finder.packages.pop(metadata.id, None)
        release(variant_dir)  # a library that did not load holds no op namespace
        if not isinstance(e, Exception):
            raise
        reason = load_failure(e)
        if reason is not None:
            raise VariantImportError(
                f"{metadata.name} variant {variant_dir.name} does not load on this machine: {reason}",
                variant=variant_dir.name,
                reason=reason,
            ) from e
        raise KernelLoadError(f"importing {metadata.name} from {variant_dir} failed: {e}") from e
    return module


class _VerifiedSourceLoader(importlib.machinery.SourceFileLoader):
    """Runs a verified source file: hashes the bytes it reads against the verified digest, never uses bytecode."""

    def __init__(self, fullname: str, path: str, root: Path, verified: Verified) -> None:
        super().__init__(fullname, path)
        self.root = root
        self.verified = verified

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        data = self.get_data(path)
        rel = Path(path).relative_to(self.root).as_posix()
        actual = _digest.hash_bytes(data, self.verified.algorithm)
        if self.verified.files.get(rel) != actual:
            raise ImportError(f"{path} changed after it was verified (or was never part of the verified variant)")
        code = self.verified.code.get(actual)
        if code is None or code.co_filename != path:
            code = compile(data, path, "exec", dont_inherit=True)
        return code

    def set_data(self, path: str, data: Any, *, _mode: int = 0o666) -> None:
        return None  # never write bytecode next to verified files


class _VerifiedFinder(importlib.abc.MetaPathFinder):
    """Gives submodules of verified variants the verified loader (extension modules keep Python's own)."""

    def __init__(self) -> None:
        self.packages: dict[str, tuple[Path, Verified]] = {}

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        entry = self.packages.get(fullname.partition(".")[0])
        if entry is None or "." not in fullname:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)  # type: ignore[arg-type]
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader) and spec.origin:
            spec.loader = _VerifiedSourceLoader(fullname, spec.origin, entry[0], entry[1])
        return spec


_finder = _VerifiedFinder()
