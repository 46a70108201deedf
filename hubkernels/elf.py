"""The one ELF reader: what a shared object links and exports, read with pyelftools without loading it.

`read_elf` gives the dynamic-linking facts the build's load check resolves (SONAME, DT_NEEDED, undefined and
exported symbols with their versions); `symbol_names` gives what the loader checks before it loads a library
(the functions it exports, and the names in its static symbol table), fast enough for every load.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import HubkernelsError

__all__ = ["ElfError", "ElfModule", "SymbolNames", "Undefined", "read_elf", "symbol_names"]


class ElfError(HubkernelsError, ValueError):
    """A file that should be an ELF shared object cannot be read as one."""


@dataclass(frozen=True)
class Undefined:
    """A symbol a module needs: its name, the version it asks for (and from which file), and whether weak."""

    name: str
    version: str | None = None
    file: str | None = None
    weak: bool = False


@dataclass(frozen=True)
class ElfModule:
    """The dynamic-linking facts of one ELF shared object."""

    soname: str | None
    needed: tuple[str, ...]
    undefined: tuple[Undefined, ...]
    exports: frozenset[str]
    version_needs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # file -> versions it asks of it
    version_defs: dict[str, str] = field(default_factory=dict)  # exported symbol -> version it is defined at


@dataclass(frozen=True)
class SymbolNames:
    """The defined global or weak functions of a library's dynamic symbol table, and every name in its static
    symbol table's strings (none for a stripped library)."""

    functions: frozenset[str]
    static: tuple[bytes, ...]  # raw, as the string table holds them (a load reads thousands)


def read_elf(path: str | Path) -> ElfModule:
    """Read SONAME, DT_NEEDED, undefined and exported dynamic symbols (with their versions) of a shared object."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            dyn: Any = elf.get_section_by_name(".dynamic")
            tags = list(dyn.iter_tags()) if dyn is not None else []
            soname = next((t.soname for t in tags if t.entry.d_tag == "DT_SONAME"), None)
            needed = tuple(t.needed for t in tags if t.entry.d_tag == "DT_NEEDED")
            versions = _version_names(elf)
            symtab: Any = elf.get_section_by_name(".dynsym")
            versym: Any = elf.get_section_by_name(".gnu.version")
            undefined: list[Undefined] = []
            exports: set[str] = set()
            defs: dict[str, str] = {}
            for i, sym in enumerate(symtab.iter_symbols() if symtab is not None else ()):
                bind = sym["st_info"]["bind"]
                if not sym.name or bind not in ("STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE"):
                    continue
                ndx = versym.get_symbol(i)["ndx"] if versym is not None else 0
                ver, vfile = versions.get(ndx & 0x7FFF if isinstance(ndx, int) else -1, (None, None))
                if sym["st_shndx"] == "SHN_UNDEF":
                    undefined.append(Undefined(sym.name, ver, vfile, bind == "STB_WEAK"))
                elif sym["st_other"]["visibility"] in ("STV_DEFAULT", "STV_PROTECTED"):
                    exports.add(sym.name)
                    if ver and vfile is None:
                        defs[sym.name] = ver
            needs: dict[str, list[str]] = {}
            for ver, vfile in versions.values():
                if vfile is not None:
                    needs.setdefault(vfile, []).append(ver)
    except (OSError, ELFError) as e:
        raise ElfError(f"cannot read {Path(path).name} as an ELF shared object ({e})") from None
    return ElfModule(
        soname, needed, tuple(undefined), frozenset(exports), {k: tuple(v) for k, v in needs.items()}, defs
    )


def symbol_names(path: str | Path) -> SymbolNames | None:
    """The library's exported functions and static symbol names (see `SymbolNames`); None when the file is not
    ELF (Mach-O, PE). Only the symbol tables count: bytes appended to the file or outside them are never read."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return None
            f.seek(0)
            elf = ELFFile(f)
            dynsym = elf.get_section_by_name(".dynsym")
            functions = _defined_functions(elf, dynsym) if dynsym is not None else set()
            symtab = elf.get_section_by_name(".symtab")
            strtab = elf.get_section(symtab["sh_link"]) if symtab is not None else None
            static = tuple(n for n in strtab.data().split(b"\0") if n) if strtab is not None else ()
    except (ELFError, OSError, ValueError, KeyError, AttributeError) as e:
        raise ElfError(f"{path} is not a readable ELF library ({e})") from e
    return SymbolNames(frozenset(functions), static)


def _defined_functions(elf: Any, dynsym: Any) -> set[str]:
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


def _version_names(elf: Any) -> dict[int, tuple[str, str | None]]:
    """Version index -> (name, file it is needed from, or None for a version this object defines)."""
    out: dict[int, tuple[str, str | None]] = {}
    need = elf.get_section_by_name(".gnu.version_r")
    if need is not None:
        for verneed, auxes in need.iter_versions():
            for aux in auxes:
                out[aux["vna_other"]] = (aux.name, verneed.name)
    vdef = elf.get_section_by_name(".gnu.version_d")
    if vdef is not None:
        for verdef, auxes in vdef.iter_versions():
            names = [a.name for a in auxes]
            if names and not verdef["vd_flags"] & 1:  # VER_FLG_BASE names the file, not a version
                out[verdef["vd_ndx"]] = (names[0], None)
    return out
