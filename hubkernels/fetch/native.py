"""What a variant's native library is, read without loading it: its `PyInit_<id>`, the torch op namespaces it
registers, and, when the dynamic linker refuses it, why. Two builds must never register one op namespace in a
process (the second would crash it), so each library's namespaces are held here from its load on.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..elf import ElfError, symbol_names
from ..errors import KernelLoadError
from ..metadata import Metadata


def check_library(variant_dir: Path, metadata: Metadata) -> None:
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


_DLOPEN_FAILURES = (
    (re.compile(r"([^\s:]+\.so[^\s:]*): undefined symbol: (\S+)"), "{1} calls {2}, which nothing loaded exports"),
    (re.compile(r"([^\s:]+\.so[^\s:]*): cannot open shared object file"), "{1} is not installed"),
    (re.compile(r"version `([^']+)' not found \(required by ([^)]+)\)"), "{2} needs {1}, which this system lacks"),
)


def load_failure(error: BaseException) -> str | None:
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


def release(variant_dir: Path) -> None:
    """Forget the op namespaces of `variant_dir`'s libraries that did not get registered (their import failed)."""
    mine = {p.resolve() for p in variant_dir.iterdir() if p.suffix in (".so", ".pyd")}
    for namespace, holder in list(_namespace_holders.items()):
        if holder in mine and namespace not in _registered_namespaces():
            del _namespace_holders[namespace]
