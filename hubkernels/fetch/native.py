"""What a variant's native library is, read without loading it: its `PyInit_<id>`, the torch op namespaces it
registers, and, when the dynamic linker refuses it, why. Two builds must never register one op namespace in a
process (the second would crash it), so each library's namespaces are held here from its load on.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

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
    dynamic and static symbol tables without loading it (bytes appended to the file or outside those tables
    count for nothing). The namespaces are empty for a stripped library; exports are None for a non-ELF file."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    exports: set[str] = set()
    namespaces: set[str] = set()
    try:
        with open(library, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return None, namespaces
            f.seek(0)
            elf = ELFFile(f)
            dynsym = elf.get_section_by_name(".dynsym")
            if dynsym is not None:
                exports = _exported_functions(elf, dynsym)
            symtab = elf.get_section_by_name(".symtab")
            strtab = elf.get_section(symtab["sh_link"]) if symtab is not None else None
            if strtab is not None:
                for name in strtab.data().split(b"\0"):
                    match = _LIBRARY_INIT_RE.search(name)
                    if match:
                        namespaces.add(match.group(1).decode())
    except (ELFError, OSError, ValueError, KeyError, AttributeError) as e:
        raise KernelLoadError(f"{library} is not a readable ELF library ({e}): download or build it again.") from e
    return exports, namespaces


def _exported_functions(elf: Any, dynsym: Any) -> set[str]:
    """Names of the defined global or weak functions of a dynamic symbol table (raw records on 64-bit
    little-endian ELF, the common case, which is ~20x faster than pyelftools' symbol objects)."""
    if not (elf.elfclass == 64 and elf.little_endian):
        return {
            sym.name
            for sym in dynsym.iter_symbols()
            if sym["st_shndx"] != "SHN_UNDEF"
            and sym["st_info"]["type"] == "STT_FUNC"
            and sym["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
        }
    names = elf.get_section(dynsym["sh_link"]).data()
    out = set()
    for st_name, st_info, _other, st_shndx, _value, _size in struct.iter_unpack("<IBBHQQ", dynsym.data()):
        if st_shndx != 0 and st_info & 0xF == 2 and st_info >> 4 in (1, 2):  # defined, STT_FUNC, GLOBAL/WEAK
            out.add(names[st_name : names.index(b"\0", st_name)].decode("utf-8", "replace"))
    return out


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
