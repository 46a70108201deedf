"""Will a variant's modules load where the variant's name says? Resolve every symbol as the dynamic linker will.

For each torch the variant admits (a stable-ABI variant: its floor up to the newest torch with a table; a
full-ABI one: the torch it was built with), each undefined symbol of each `.so` must be exported by a library in
the module's DT_NEEDED closure, read from that torch's real binaries (`symbols.TorchTable`). Versioned references
to system libraries must stay within what a manylinux_2_28 system (the platform torch's wheels are built for)
provides, and every DT_NEEDED library must be one torch, its CUDA runtime or that system brings. A problem is one
line naming the symbol, the library and the torch versions that lack it. Needs beyond manylinux_2_28 (a glibc or
libstdc++ symbol version newer than it has) are reported apart: such a module loads on newer systems only.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..elf import ElfModule, read_elf
from ..system import Variant
from .symbols import STD_MANGLED, TorchTable, installed_table, shipped_tables

__all__ = [
    "PLATFORM_FLOOR",
    "LoadCheck",
    "admitted_tables",
    "check_module",
    "check_variant",
    "load_problems",
    "variant_load_problems",
]

#: The platform torch's Linux wheels target, and the newest symbol version of each family it guarantees
#: (the manylinux_2_28 policy: glibc 2.28, GCC 8's libstdc++).
PLATFORM_FLOOR = "manylinux_2_28"
_FLOOR_VERSIONS = {"GLIBC": (2, 28), "GLIBCXX": (3, 4, 24), "CXXABI": (1, 3, 11), "GCC": (7, 0, 0)}
_SYSTEM_LIBRARIES = frozenset(
    {
        "libc.so.6",
        "libm.so.6",
        "libdl.so.2",
        "librt.so.1",
        "libpthread.so.0",
        "libutil.so.1",
        "libresolv.so.2",
        "libanl.so.1",
        "libnsl.so.1",
        "libmvec.so.1",
        "libgcc_s.so.1",
        "libstdc++.so.6",
        "libatomic.so.1",
        "libz.so.1",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
    }
)
_TORCH_CXX = re.compile(r"^_Z(?:N[KRVO]*|T[ISV])?(?:3c10|2at|5torch|6caffe2)")


def admitted_tables(variant: Variant, tables: Sequence[TorchTable] | None = None) -> list[TorchTable]:
    """The torch tables a variant must load on: every shipped one from a stable-ABI floor on, or the installed
    torch for a full-ABI variant of its minor (none when that torch is not installed here)."""
    if variant.kind == "stable-abi" and variant.framework_version:
        pool = shipped_tables() if tables is None else tables
        return [t for t in pool if t.minor >= tuple(variant.framework_version)]
    if variant.kind == "torch" and variant.framework_version:
        try:
            here = installed_table()
        except ImportError:
            return []
        return [here] if here.minor == tuple(variant.framework_version) else []
    return []


@dataclass(frozen=True)
class LoadCheck:
    """What the check found: `problems` (the module fails to load on an admitted torch: the build is refused) and
    `platform` (it needs a newer glibc or libstdc++ than manylinux_2_28 has: it loads only on newer systems)."""

    problems: tuple[str, ...] = ()
    platform: tuple[str, ...] = ()

    def __add__(self, other: LoadCheck) -> LoadCheck:
        return LoadCheck(self.problems + other.problems, self.platform + other.platform)


def check_variant(variant_dir: Path, tables: Sequence[TorchTable] | None = None) -> LoadCheck:
    """The load check of every `.so` in a built variant directory (named `build/<variant>/`)."""
    variant = Variant.parse(variant_dir.name)
    admitted = admitted_tables(variant, tables)
    found = LoadCheck()
    for so in sorted(variant_dir.rglob("*.so")):
        found += check_module(so, variant, admitted)
    return found


def variant_load_problems(variant_dir: Path, tables: Sequence[TorchTable] | None = None) -> list[str]:
    """The reasons a built variant fails to load on a torch its name admits (empty when it loads on all)."""
    return list(check_variant(variant_dir, tables).problems)


def load_problems(so: Path, variant: Variant, tables: Sequence[TorchTable]) -> list[str]:
    """One line per reason `so` (of `variant`) would fail to load on one of `tables`' torches."""
    return list(check_module(so, variant, tables).problems)


def check_module(so: Path, variant: Variant, tables: Sequence[TorchTable]) -> LoadCheck:
    """Resolve `so` (of `variant`) against each of `tables`' torches and the manylinux_2_28 platform."""
    module = read_elf(so)
    found: dict[str, list[str]] = {}  # problem -> torch labels it holds for
    platform: dict[str, list[str]] = {}

    def report(message: str, table: TorchTable | None = None, *, floor: bool = False) -> None:
        into = platform if floor else found
        into.setdefault(message, [])
        if table is not None:
            into[message].append(_short(table))

    cuda_major = variant.backend_version[0] if variant.backend == "cuda" and variant.backend_version else None
    for need in module.needed:
        m = re.fullmatch(r"libcudart\.so\.(\d+)", need)
        if m and cuda_major is not None and int(m.group(1)) != cuda_major:
            report(
                f"{so.name} needs {need}, but the variant is for CUDA {cuda_major}: build with a CUDA "
                f"{cuda_major} toolkit"
            )
    for u in module.undefined:
        if u.weak or not u.version or u.file not in _SYSTEM_LIBRARIES:
            continue
        family, _, number = u.version.partition("_")
        floor = _FLOOR_VERSIONS.get(family)
        if floor is not None and _numbers(number) > floor:
            report(
                f"{so.name} needs {_demangle(u.name)} at {u.version} from {u.file}, newer than {PLATFORM_FLOOR} "
                f"guarantees ({family}_{'.'.join(map(str, floor))}): it fails to load on older Linux systems; "
                "avoid the call or build on an older system",
                floor=True,
            )
    for table in tables:
        _resolve(so, module, variant, table, report)
    return LoadCheck(
        tuple(f"{msg}{_versions(labels)}" for msg, labels in found.items()),
        tuple(f"{msg}{_versions(labels)}" for msg, labels in platform.items()),
    )


def _resolve(so: Path, module: ElfModule, variant: Variant, table: TorchTable, report) -> None:
    """Report what `module` cannot find when loaded into a process with `table`'s torch."""
    by_name = {name: lib for name, lib in table.libraries.items()}
    by_name.update({lib.soname: lib for lib in table.libraries.values()})
    reachable = {n for lib in table.libraries.values() for n in lib.needed}  # loaded once torch is imported
    scope, queue = [], list(module.needed)
    while queue:
        name = queue.pop(0)
        if name in scope:
            continue
        scope.append(name)
        if name in by_name:
            queue += by_name[name].needed
    for need in module.needed:
        if need in _SYSTEM_LIBRARIES or need in by_name or re.fullmatch(r"libcudart\.so\.\d+", need):
            if variant.backend != "cuda" and need in ("libtorch_cuda.so", "libc10_cuda.so"):
                report(f"{so.name} needs {need}, which a CPU-only torch does not have: link it only in CUDA builds")
            continue
        if need not in reachable:
            report(
                f"{so.name} needs {need}, which neither torch nor a {PLATFORM_FLOOR} system provides: link it "
                "statically or ship it with the kernel",
                table,
            )
    providers = [by_name[n] for n in scope if n in by_name]
    for u in module.undefined:
        if u.weak or u.version or u.name.startswith(("Py", "_Py")):
            continue  # versioned references are checked above; Python symbols come from the interpreter
        if any(u.name in lib.exports for lib in providers):
            continue
        if not table.complete and _TORCH_CXX.match(u.name):
            continue  # torch's C++ API: the stable-ABI check names these
        if STD_MANGLED.match(u.name):  # not in torch's libraries: libstdc++ serves it, at the version it defines it
            version = _libstdcxx_versions().get(u.name)
            if version is None or _numbers(version.partition("_")[2]) > _FLOOR_VERSIONS["GLIBCXX"]:
                report(
                    f"{so.name} calls {_demangle(u.name)}, which torch does not export and libstdc++ has only "
                    f"from {version or 'no version'} (newer than {PLATFORM_FLOOR}'s GLIBCXX_3.4.24): avoid it",
                    table,
                    floor=True,
                )
            continue
        elsewhere = [name for name, lib in table.libraries.items() if u.name in lib.exports]
        if elsewhere:
            report(
                f"{so.name} calls {_demangle(u.name)}, exported by {elsewhere[0]}, which {so.name} does not "
                f"list in DT_NEEDED: link it (-l{elsewhere[0][3:].split('.so')[0]})",
                table,
            )
        else:
            since = next(
                (t for t in shipped_tables() if any(u.name in lib.exports for lib in t.libraries.values())), None
            )
            hint = (
                (
                    f"; torch exports it from {_short(since)} on: raise [torch] stable-abi to {_short(since)} or "
                    "avoid the call"
                )
                if since is not None and since.minor > table.minor
                else ""
            )
            report(f"{so.name} calls {_demangle(u.name)}, which no library it links exports{hint}", table)


@lru_cache(maxsize=1)
def _libstdcxx_versions() -> dict[str, str]:
    """The version at which this system's libstdc++ defines each symbol (empty when none is found)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    path = None
    if cxx:
        out = subprocess.run([cxx, "-print-file-name=libstdc++.so.6"], capture_output=True, text=True).stdout.strip()
        path = Path(out) if out and Path(out).is_file() else None
    return dict(read_elf(path).version_defs) if path else {}


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def _short(table: TorchTable) -> str:
    return table.version.rsplit(".", 1)[0] if table.version.count(".") == 2 else table.version


def _versions(labels: Iterable[str]) -> str:
    labels = list(dict.fromkeys(labels))
    return f" (torch {', '.join(labels)})" if labels else ""


def _demangle(name: str) -> str:
    if not name.startswith("_Z") or shutil.which("c++filt") is None:
        return name
    out = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
    return f"{out} [{name}]" if out and out != name else name
