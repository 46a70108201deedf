"""What real torch binaries export, read from their ELF files: the facts the load check resolves against.

A `TorchTable` records, for one torch release, each of its libraries' SONAME, DT_NEEDED list and exported
dynamic symbols: C symbols and C++ standard-library symbols (the ones a torch library can hand a module in place
of libstdc++), never torch's own C++ API. Tables for every torch the package index serves from the first
stable-ABI release on ship in `torch_symbols/`, extracted from the published wheels by

    python scripts/torch_symbols.py torch-2.12.1-cp312-cp312-manylinux_2_28_x86_64.whl ...

so a build on a machine with one torch checks against all of them without downloading gigabytes. A build against
the installed torch (full ABI) reads that torch's own libraries, every export included.
"""

from __future__ import annotations

import gzip
import json
import re
import tempfile
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..elf import ElfModule, read_elf
from ..errors import BuildError

__all__ = [
    "Library",
    "TorchTable",
    "shipped_tables",
    "installed_table",
    "extract_wheel",
    "write_link_stubs",
    "write_table",
    "stable_link_stubs",
    "TABLE_DIR",
    "TORCH_LIBRARIES",
]

TABLE_DIR = Path(__file__).with_name("torch_symbols")
#: The torch libraries a kernel module may link (others in torch/lib are torch's own business).
TORCH_LIBRARIES = (
    "libc10.so",
    "libtorch_cpu.so",
    "libtorch.so",
    "libc10_cuda.so",
    "libtorch_cuda.so",
    "libtorch_global_deps.so",
    "libgomp.so.1",
)
#: Mangled names of the C++ standard library (std::, __gnu_cxx::, __cxxabiv1::, operator new/delete):
#: the only C++ symbols a table keeps, since a torch library that exports one serves it to a module first.
STD_MANGLED = re.compile(
    r"^_Z(?:N[KRVO]*|T[ISV]|Th?n?\d*_?)?(?:St|S[aboisd]|9__gnu_cxx|10__cxxabiv1)|^_Z(?:nw|na|dl|da)"
)


@dataclass(frozen=True)
class Library:
    """One library of a torch release as the dynamic linker sees it."""

    soname: str
    needed: tuple[str, ...]
    exports: frozenset[str]


@dataclass(frozen=True)
class TorchTable:
    """The libraries of one torch release (`version` like "2.11.0", `local` like "cu130")."""

    version: str
    local: str | None
    libraries: dict[str, Library]
    source: str = ""
    complete: bool = False  # every export kept (read from an installed torch), not only C and std symbols

    @property
    def minor(self) -> tuple[int, int]:
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)

    @property
    def label(self) -> str:
        return f"torch {self.version}" + (f"+{self.local}" if self.local else "")

    def to_json(self) -> dict[str, object]:
        return {
            "torch": self.version,
            "local": self.local,
            "source": self.source,
            "libraries": {
                k: {"soname": v.soname, "needed": list(v.needed), "exports": sorted(v.exports)}
                for k, v in sorted(self.libraries.items())
            },
        }

    @classmethod
    def from_json(cls, data: dict) -> TorchTable:
        libs = {
            k: Library(v["soname"], tuple(v["needed"]), frozenset(v["exports"])) for k, v in data["libraries"].items()
        }
        return cls(data["torch"], data.get("local"), libs, data.get("source", ""))


def _library(elf: ElfModule, name: str, keep_all: bool) -> Library:
    exports = (
        elf.exports if keep_all else frozenset(s for s in elf.exports if not s.startswith("_Z") or STD_MANGLED.match(s))
    )
    return Library(elf.soname or name, elf.needed, exports)


@lru_cache(maxsize=1)
def shipped_tables() -> tuple[TorchTable, ...]:
    """The tables that ship with hubkernels, oldest torch first."""
    tables = []
    for path in TABLE_DIR.glob("torch-*.json.gz"):
        with gzip.open(path, "rt") as f:
            tables.append(TorchTable.from_json(json.load(f)))
    return tuple(sorted(tables, key=lambda t: tuple(int(x) for x in t.version.split("."))))


@lru_cache(maxsize=4)
def installed_table(torch_lib: str | None = None) -> TorchTable:
    """The table of the torch this process imports (or of the `torch/lib` folder given), every export kept."""
    import torch

    lib_dir = Path(torch_lib) if torch_lib else Path(torch.__file__).parent / "lib"
    version, _, local = torch.__version__.partition("+")
    libs = {}
    for name in TORCH_LIBRARIES:
        path = lib_dir / name
        if path.is_file():
            libs[name] = _library(read_elf(path), name, keep_all=True)
    return TorchTable(version, local or None, libs, str(lib_dir), complete=True)


def extract_wheel(wheel: str | Path) -> TorchTable:
    """The table of a torch wheel: its libraries unpacked one at a time into a temporary folder, then read."""
    wheel = Path(wheel)
    libs: dict[str, Library] = {}
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory() as tmp:
        names = set(zf.namelist())
        version_py = zf.read("torch/version.py").decode()
        version = re.search(r"__version__ = '([^']+)'", version_py)
        if version is None:
            raise BuildError(f"{wheel.name} has no torch/version.py version")
        for lib in TORCH_LIBRARIES:
            member = f"torch/lib/{lib}"
            if member not in names:
                continue
            out = zf.extract(member, tmp)
            libs[lib] = _library(read_elf(out), lib, keep_all=False)
            Path(out).unlink()
    full, _, local = version.group(1).partition("+")
    return TorchTable(full, local or None, libs, wheel.name)


def write_link_stubs(dest: Path, table: TorchTable, libraries: tuple[str, ...]) -> Path:
    """Stub libraries with the SONAMEs and C exports of `table`'s `libraries`, to link a module against.

    A module linked against them records the same DT_NEEDED entries as one linked against that torch's real
    libraries, and binds C++ standard-library symbols to libstdc++ (versioned) rather than to torch's copies,
    so it does not depend on which torch the build machine has.
    """
    import subprocess

    dest.mkdir(parents=True, exist_ok=True)
    for name in libraries:
        lib = table.libraries.get(name)
        if lib is None:
            raise BuildError(f"{table.label} has no {name} to link against")
        c_symbols = sorted(s for s in lib.exports if re.fullmatch(r"[A-Za-z_]\w*", s) and not s.startswith("_Z"))
        src = dest / f"{name}.stub.c"
        src.write_text(
            "/* generated by hubkernels build: link stub of "
            + f"{name} ({table.label}) */\n"
            + "".join(f"void {s}(void) {{}}\n" for s in c_symbols)
        )
        out = dest / name
        proc = subprocess.run(
            ["cc", "-shared", "-fPIC", "-w", "-o", str(out), f"-Wl,-soname,{lib.soname}", str(src)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise BuildError(f"could not make the link stub {name}: {proc.stderr.strip()[-500:]}")
    return dest


def stable_link_stubs(work: Path, target: tuple[int, int], backend: str) -> Path | None:
    """Link stubs of the oldest shipped torch at or above a stable-ABI `target` (None when none ships)."""
    floor = next((t for t in shipped_tables() if t.minor >= target), None)
    if floor is None:
        return None
    libraries: tuple[str, ...] = ("libc10.so", "libtorch.so", "libtorch_cpu.so")
    if backend == "cuda":
        libraries += ("libc10_cuda.so", "libtorch_cuda.so")
    dest = work / f"stubs-{floor.version}"
    if all((dest / name).is_file() for name in libraries):
        return dest
    return write_link_stubs(dest, floor, libraries)


def write_table(table: TorchTable, out_dir: Path = TABLE_DIR) -> Path:
    """Write `table` as `torch-<version>.json.gz` into `out_dir` (by default the tables that ship), byte-stable."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"torch-{table.version}.json.gz"
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        f.write(json.dumps(table.to_json(), separators=(",", ":")).encode())
    return out
