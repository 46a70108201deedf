"""Import a build variant under its unique id, so relative imports work and builds coexist.

The module name is the variant's `metadata.id` (e.g. `_ltx_kernels_cpu_1a2b3c4`), the same string that
names its torch op namespace. Two builds of one kernel therefore load side by side in one process,
and one build loaded twice (say from the Hub cache and from a local path) is imported once.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import re
import sys
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import CodeType, ModuleType

from . import digest as _digest
from .elf import ElfError, symbol_names
from .errors import KernelLoadError, VariantImportError
from .kernel_deps import providing
from .layout import variant_dirs  # noqa: F401  (re-exported: where a local kernel's variants live)
from .metadata import Metadata
from .system import System
from .variants import Resolution, archs_support, minver_reason, require, resolve

logger = logging.getLogger(__name__)

#: Python dependencies a kernel may declare (kernel-builder's curated list) -> the module to import.
_PYTHON_DEPENDS = {
    "einops": "einops",
    "helion": "helion",
    "tvm-ffi": "tvm_ffi",
    "nvidia-cutlass-dsl": "cutlass",
    "nki": "nki",
    "onednn": None,
}


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


def resolve_local(
    path: str | Path, backend: str | None = None, system: System | None = None
) -> tuple[Path, Resolution]:
    """Resolve the best variant of a local kernel directory; returns (its directory, the full trace)."""
    base, found = variant_dirs(path)
    resolution = resolve(found, system, backend)
    chosen = require(resolution, str(base))
    return found[str(chosen)], resolution


def get_local_kernel(
    repo_path: str | Path,
    backend: str | None = None,
    *,
    verify: bool = False,
    trust_remote_code: bool | list[str] = False,
) -> ModuleType:
    """Import the best variant of a locally built kernel (`hubkernels build` output or a variant dir).

    `verify=True` checks every file against the digest in metadata.json before importing. Its `kernel-depends`
    come from the Hub (or LOCAL_KERNELS), under `trust_remote_code` as in `get_kernel`.
    """
    variant_dir, resolution = resolve_local(repo_path, backend)
    logger.info("loading %s from %s", resolution.chosen, variant_dir)
    deps = None
    if Metadata.read(variant_dir).kernel_depends:
        from .fetch.deps import local_dependencies

        deps = local_dependencies(variant_dir, backend=backend, trust_remote_code=trust_remote_code)
    return import_variant(variant_dir, verify=verify, deps=deps)


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


def _check_python_depends(metadata: Metadata) -> None:
    for dep in metadata.python_depends:
        if dep not in _PYTHON_DEPENDS:
            raise KernelLoadError(f"{metadata.name} declares unsupported Python dependency {dep!r}")
        module = _PYTHON_DEPENDS[dep]
        if module and importlib.util.find_spec(module) is None:
            raise KernelLoadError(f"{metadata.name} requires the Python package {dep!r}: pip install {dep}")


@dataclass(frozen=True)
class Verified:
    """What a variant's files were verified to be: `{relative path: b64 hash}` in `algorithm` (the digest's), and
    optionally code objects compiled from exactly those sources (`{b64 hash of the source: code}`)."""

    algorithm: str
    files: Mapping[str, str]
    code: Mapping[str, CodeType] = field(default_factory=dict)


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
            if existing.path != variant_dir and _digest.hash_variant(existing.path, memo=True) != _digest.hash_variant(
                variant_dir, memo=True
            ):
                raise KernelLoadError(
                    f"{variant_dir} and {existing.path} are different builds with the same id {metadata.id}; "
                    "their torch ops would collide. Rebuild one of them (a new id comes with each commit)."
                )
            return existing.module
        if verify:
            hashes = _digest.verify_variant(variant_dir, metadata.digest)
            verified = Verified((metadata.digest or {}).get("algorithm", "sha256"), hashes)
        check_capability(metadata, system or System.current())
        _check_python_depends(metadata)
        init = _entry_file(variant_dir, metadata)
        adopted = _already_imported(metadata, init)
        if adopted is not None:
            _loaded[metadata.id] = LoadedKernel(variant_dir, metadata, adopted)
            return adopted
        _check_library(variant_dir, metadata)
        if metadata.dirty:
            warnings.warn(f"{metadata.name} ({metadata.id}) was built from a dirty git tree", UserWarning, stacklevel=3)
        with providing(deps or {}):
            module = _exec_package(metadata, variant_dir, init, verified)
        _loaded[metadata.id] = LoadedKernel(variant_dir, metadata, module)
        return module


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


def _check_library(variant_dir: Path, metadata: Metadata) -> None:
    """An arch variant's native module must be `<id>.abi3.so` and define `PyInit_<id>`: the id is its op namespace."""
    natives = sorted(p.name for p in variant_dir.iterdir() if p.suffix in (".so", ".pyd") and p.is_file())
    if not natives:
        return  # noarch: Python only
    own = [n for n in natives if n.split(".", 1)[0] == metadata.id]
    if not own:
        raise KernelLoadError(
            f"{variant_dir}: metadata.json's id {metadata.id!r} names no native module here (found "
            f"{', '.join(natives)}); the id must be the library's own op namespace. The variant was altered after "
            "it was built: download or build it again."
        )
    library = variant_dir / own[0]
    exports, namespaces = _native_facts(library)
    # TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) names its init symbol after the macro, unexpanded, while the namespace
    # it registers is the macro's value: the build's id (kernel-builder's rule)
    namespaces = {metadata.id if ns == "TORCH_EXTENSION_NAME" else ns for ns in namespaces}
    if exports is None:  # not ELF (Mach-O, PE): the bytes are all there is to go on
        exports = {f"PyInit_{metadata.id}"} if f"PyInit_{metadata.id}\0".encode() in library.read_bytes() else set()
    if f"PyInit_{metadata.id}" not in exports:
        raise KernelLoadError(
            f"{library} does not define PyInit_{metadata.id}: it was built under another id and "
            "renamed, and loading it would register another build's torch ops twice. Download or build it again."
        )
    for namespace in sorted(namespaces or {metadata.id}):  # kernel-builder's rule: the namespace is the id
        holder = _namespace_holders.get(namespace)
        if holder is not None and holder == library.resolve():
            continue  # this very library is loaded already: dlopen hands back the same copy
        if holder is not None or namespace in _registered_namespaces():
            raise OpNamespaceError(
                f"{library} registers the torch op namespace {namespace!r}, which "
                f"{holder or 'another library'} already registered in this process (as module "
                f"{metadata.id!r}); two builds cannot share one op namespace, and loading this one would crash the "
                "process. Load one build per op namespace per process (restart to switch builds)."
            )
    for namespace in namespaces or {metadata.id}:
        _namespace_holders[namespace] = library.resolve()


class OpNamespaceError(KernelLoadError):
    """A native library registers a torch op namespace that another library already registered in this process."""


#: Op namespaces the native libraries this process loaded register -> the library (its resolved path).
_namespace_holders: dict[str, Path] = {}
_LIBRARY_INIT_RE = re.compile(rb"(?:^|_ZL\d+)(?:STABLE_)?TORCH_LIBRARY_static_init_([A-Za-z0-9_]{1,256})$")


def _native_facts(library: Path) -> tuple[set[str] | None, set[str]]:
    """(functions the ELF library exports, torch op namespaces its TORCH_LIBRARY blocks define), read from its
    dynamic and static symbol tables without loading it (`hubkernels.elf`). The namespaces are empty for a
    stripped library; exports are None for a non-ELF file."""
    try:
        names = symbol_names(library)
    except ElfError as e:
        raise KernelLoadError(f"{e}: download or build it again.") from e
    if names is None:
        return None, set()
    namespaces = {m.group(1).decode() for name in names.static if (m := _LIBRARY_INIT_RE.search(name))}
    return set(names.functions), namespaces


def _registered_namespaces() -> set[str]:
    """The torch op namespaces registered in this process now (by anyone: torch itself, HF `kernels` ...)."""
    import torch

    return {schema.name.split("::", 1)[0] for schema in torch._C._jit_get_all_schemas()}


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
        mine = {p.resolve() for p in variant_dir.iterdir() if p.suffix in (".so", ".pyd")}
        for namespace, holder in list(_namespace_holders.items()):  # a library that did not load holds nothing
            if holder in mine and namespace not in _registered_namespaces():
                del _namespace_holders[namespace]
        if not isinstance(e, Exception):
            raise
        reason = _native_load_failure(e)
        if reason is not None:
            raise VariantImportError(
                f"{metadata.name} variant {variant_dir.name} does not load on this machine: {reason}",
                variant=variant_dir.name,
                reason=reason,
            ) from e
        raise KernelLoadError(f"importing {metadata.name} from {variant_dir} failed: {e}") from e
    return module


_DLOPEN_FAILURES = (
    (re.compile(r"([^\s:]+\.so[^\s:]*): undefined symbol: (\S+)"), "{1} calls {2}, which nothing loaded exports"),
    (re.compile(r"([^\s:]+\.so[^\s:]*): cannot open shared object file"), "{1} is not installed"),
    (re.compile(r"version `([^']+)' not found \(required by ([^)]+)\)"), "{2} needs {1}, which this system lacks"),
)


def _native_load_failure(error: BaseException) -> str | None:
    """One line on why the dynamic linker refused a variant's module, or None for any other import failure."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, (ImportError, OSError)):
            for pattern, text in _DLOPEN_FAILURES:
                m = pattern.search(str(seen))
                if m:
                    return text.format(m.group(0), *(Path(g).name for g in m.groups()))
        seen = seen.__cause__ or seen.__context__
    return None


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

    def set_data(self, path: str, data: bytes, *, _mode: int = 0o666) -> None:
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
