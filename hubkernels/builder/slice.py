"""Per-arch slices of a CUDA variant: the same files, with each module's device code cut down to one SM arch.

A CUDA module's `.nv_fatbin` section holds one fat binary per translation unit, each a list of entries: SASS
(an ELF cubin for one `sm_XY`) and PTX. The slice for `sm_XY` keeps, in each fat binary, that arch's SASS and the
PTX of the highest arch (which the driver JIT-compiles on a newer GPU), moves them to the front of the fat binary,
fixes its size, and zeroes the rest in place. Nothing else in the module moves, so every address the host code
and the CUDA runtime use stays valid, and the zeroed bytes cost next to nothing once the slice is compressed (in
its wheel, and in Xet's transfer). A fat binary without SASS for the arch is left whole.

The slice is a variant directory like any other: its metadata.json says `archs = [the arch]` and carries the
digest of the sliced files. `hubkernels upload` packs it as the wheel `<dist>-<version>-<tag>-cuMMm_smXY.whl`
beside the fat variant's (docs/wheels.md); HF `kernels` never sees it and loads the fat `build/<variant>/`.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from ..digest import hash_variant
from ..errors import HubkernelsError
from ..layout import shipped_files
from ..metadata import Metadata

_FATBIN_MAGIC = 0xBA55ED50
_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
_ENTRY = struct.Struct("<HHII")  # kind (1 PTX, 2 SASS), version, header size, padded payload size
_ENTRY_SM_OFFSET = 28  # the entry's SM arch (e.g. 90), a u32 at this offset of its header
_PTX, _SASS = 1, 2


class SliceError(HubkernelsError):
    """A module's device code cannot be sliced (the message says which and why)."""


def sm_of(arch: str) -> int:
    """`9.0` / `9.0a` / `10.0f` / `9.0+PTX` / `sm_90` -> 90 (an arch-specific or family target runs on that SM)."""
    text = arch.removesuffix("+PTX").removeprefix("sm_").rstrip("af")
    major, _, minor = text.partition(".")
    return int(major) * 10 + int(minor or 0) if minor or "." in text else int(text)


def _section(data: bytes | bytearray, name: bytes) -> tuple[int, int] | None:
    """(file offset, size) of the ELF64 section called `name`, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return None
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    (str_off,) = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)
    for i in range(shnum):
        base = shoff + i * shentsize
        (name_off,) = struct.unpack_from("<I", data, base)
        end = data.index(b"\0", str_off + name_off)
        if bytes(data[str_off + name_off : end]) == name:
            offset, size = struct.unpack_from("<QQ", data, base + 0x18)
            return offset, size
    return None


def fatbin_entries(data: bytes | bytearray) -> list[list[tuple[int, int]]]:
    """(kind, sm) of the entries of each fat binary of a module's `.nv_fatbin` section ([] if it has none)."""
    found = _section(data, b".nv_fatbin")
    if found is None:
        return []
    out = []
    for start, size in _fatbins(data, *found):
        entries = []
        for pos, header, padded in _entries(data, start, size):
            (kind,) = struct.unpack_from("<H", data, pos)
            entries.append((kind, struct.unpack_from("<I", data, pos + _ENTRY_SM_OFFSET)[0]))
        out.append(entries)
    return out


def _fatbins(data: bytes | bytearray, offset: int, size: int) -> list[tuple[int, int]]:
    """(start, size of its entries) of each fat binary in the section."""
    out, pos, end = [], offset, offset + size
    while pos + _HEADER.size <= end:
        magic, _, header, body = _HEADER.unpack_from(data, pos)
        if magic != _FATBIN_MAGIC:
            pos += 8  # fat binaries are 8-byte aligned; what lies between them is padding
            continue
        out.append((pos, body))
        pos += header + body
    return out


def _entries(data: bytes | bytearray, start: int, body: int) -> list[tuple[int, int, int]]:
    (header,) = struct.unpack_from("<H", data, start + 6)
    pos, end, out = start + header, start + header + body, []
    while pos + _ENTRY.size <= end:
        _, _, entry_header, padded = _ENTRY.unpack_from(data, pos)
        if entry_header == 0 or pos + entry_header + padded > end:
            raise SliceError("a fat binary entry runs past its fat binary: not a fat binary this slicer knows")
        out.append((pos, entry_header, padded))
        pos += entry_header + padded
    return out


def slice_module(data: bytes, sm: int) -> bytes:
    """The module with each fat binary cut to SASS for `sm` and the highest PTX (see the module doc)."""
    out = bytearray(data)
    found = _section(out, b".nv_fatbin")
    if found is None:
        return data
    for start, body in _fatbins(data, *found):
        entries = _entries(data, start, body)
        kinds = [
            (struct.unpack_from("<H", data, p)[0], struct.unpack_from("<I", data, p + _ENTRY_SM_OFFSET)[0])
            for p, _, _ in entries
        ]
        if not any(k == _SASS and s == sm for k, s in kinds):
            continue  # no SASS for this arch here: keep all of it
        ptx = max((s for k, s in kinds if k == _PTX), default=None)
        keep = [e for e, (k, s) in zip(entries, kinds) if (k == _SASS and s == sm) or (k == _PTX and s == ptx)]
        (header,) = struct.unpack_from("<H", data, start + 6)
        pos = start + header
        for p, h, padded in keep:
            out[pos : pos + h + padded] = data[p : p + h + padded]
            pos += h + padded
        end = start + header + body
        out[pos:end] = bytes(end - pos)
        struct.pack_into("<Q", out, start + 8, pos - start - header)
    return bytes(out)


def slice_variant(variant_dir: str | Path, arch: str, out_dir: str | Path) -> Path:
    """Write the `arch` slice of a built CUDA variant to `out_dir/<variant name>` (metadata: that arch, and the
    digest of the sliced files); returns it."""
    src = Path(variant_dir)
    meta = Metadata.read(src)
    if meta.backend_type != "cuda" or not any(sm_of(a) == sm_of(arch) for a in meta.archs):
        raise SliceError(f"{src.name}: no {arch} in its archs ({', '.join(meta.archs) or 'none'}): nothing to slice")
    sm = sm_of(arch)
    dest = Path(out_dir) / src.name
    if dest.exists():
        shutil.rmtree(dest)
    for rel, path in shipped_files(src):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        data = path.read_bytes()
        target.write_bytes(slice_module(data, sm) if rel.endswith(".so") else data)
    arch_name = next(a for a in meta.archs if sm_of(a) == sm).removesuffix("+PTX")
    meta.backend = {**meta.backend, "archs": [arch_name]}
    meta.digest = {**(meta.digest or {}), "algorithm": "sha256", "files": hash_variant(dest)}
    meta.write(dest)
    return dest
