"""verify's vectorisation check: the instruction mix of the CPU code, per function and per ISA compilation.

A total over the library says nothing: one vectorised clone hides a scalar one. So the disassembly (objdump) is
split at every symbol of the kernel's own namespaces, anonymous ones included (a fast row loop there is what runs),
and each compilation is read on its own: a function-multiversioning clone (`[clone .arch_x86_64_v3]`, `.avx2`, ...),
an explicit per-ISA runner (`ns::run_avx2<ns::op(...)::{lambda}...<T>...>`, ltx-kernels' vec.h), or a function with
a `target` attribute, whose ISA is read from its instructions (zmm or mask registers: AVX-512; VEX: AVX2). Each is
judged at its ISA's width whether or not this CPU runs it: packed floating-point arithmetic on zmm for x86-64-v4 /
AVX-512, ymm for x86-64-v3 / AVX2, xmm for the baseline. Scalar compares (`vucomiss`), lane extracts and inserts
(`vpextrd`, `vextractps`) and integer selects (`cmov`) are lane-by-lane work, counted as scalar: a compilation fails
when it has no packed arithmetic at its width, or when its hottest loop (the backward branch over the most packed
work; scalar tails stay outside it) holds more lane-by-lane instructions than packed ones, or a vector compare's
worth of scalar compares (LANEWISE_COMPARES).
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ... import settings
from . import Check

_SYMBOL = re.compile(r"^([0-9a-f]+) <(.+)>:$")
_INSN = re.compile(r"^\s*([0-9a-f]+):\s+(?:(?:rex\.?\w*|data16|lock|notrack|bnd|rep\w*|cs|ds)\s+)*(\S+)\s*(.*)$")
# Packed single/double precision arithmetic, conversions and FMAs (not moves, not shuffles): the work of a loop.
_PACKED = re.compile(
    r"v?(?:fn?m(?:add|sub)\w*p[sd]|(?:add|sub|mul|div|sqrt|max|min|rsqrt|rcp)p[sd]"
    r"|cvt\w*p[sdh]\w*|cvtph2ps|cvtps2ph|cvtneps2bf16)"
)
_SCALAR = re.compile(r"v?(?:fn?m(?:add|sub)\w*s[sd]|(?:add|sub|mul|div|sqrt|max|min)s[sd])")
_REG = re.compile(r"%([xyz])mm")
_WIDTH = {"z": 512, "y": 256, "x": 128}
#: Lane-by-lane work: scalar fp compares, one lane moved out of or into a vector, integer selects.
_LANEWISE = {
    "compares": re.compile(r"v?u?comis[sd]|v?cmp[a-z_]*s[sd]"),
    "extracts": re.compile(r"v?pextr[bwdq]|v?extractps|v?pinsr[bwdq]|v?insertps"),
    "selects": re.compile(r"cmov\w+"),
}
#: Scalar fp compares from which a compilation is judged lane by lane (one 16-lane vector compare, unrolled).
LANEWISE_COMPARES = 16
_DIVIDE = re.compile(r"v?divp[sd]")
_GATHER = re.compile(r"v?p?gather\w+")
_NARROWING_STORE = re.compile(r"vpmov[a-z]*(?:dw|wb|qd|qw|db|qb)|v?cvtps2ph|vcvtneps2bf16")
#: Part of a register stored by an extract: GCC's generic and AMD tunings split an unaligned 256-bit store into
#: `vmovups %xmm` and `vextractf128 $1, %ymm, mem`, so both halves are the loop's output.
_EXTRACT_STORE = re.compile(r"vextract[fi](?:128|32x4|64x2|32x8|64x4)")
# `void ns::run_avx512<ns::op(args)::{lambda(auto:1)#1}::operator()<ns::BFloat16>(...) const::{lambda...}>(...)`
# (a runner of a single-type op has no `operator()<T>`: `ns::run_avx2<ns::op(args)::{lambda(auto:1)#1}>(...)`)
_RUNNER = re.compile(
    r"(?P<ns>\w+)::run_(?P<isa>avx512bf16|avx512|avx2|baseline)<(?P=ns)::(?P<op>\w+)\("
    r"(?:.*?operator\(\)<(?:(?P=ns)::)?(?P<type>\w+)>)?"
)


@dataclass
class Mix:
    """The instructions of one compilation (or of its hottest loop) that say whether it works lane by lane."""

    packed: dict[int, int] = field(default_factory=dict)  # {register width: packed fp instructions}
    scalar: int = 0  # scalar fp arithmetic
    compares: int = 0
    extracts: int = 0
    selects: int = 0
    divides: int = 0  # packed divisions
    gathers: int = 0
    calls: int = 0
    stored_bits: int = 0  # bits of vector registers stored to memory, not the stack (the loop's output)
    stack: int = 0  # vector moves to or from the stack: values assembled or spilled through memory
    counts: dict[str, int] = field(default_factory=dict)  # {mnemonic: n} of the lane-by-lane ones

    @property
    def lanewise(self) -> int:
        return self.compares + self.extracts + self.selects

    @property
    def packed_bits(self) -> int:
        """The packed work, weighted by register width (a zmm op does four xmm ops' work)."""
        return sum(w * n for w, n in self.packed.items())

    @property
    def widest(self) -> int:
        return max(self.packed, default=0)

    def add(self, mnemonic: str, operands: str) -> None:
        regs = _REG.findall(operands)
        if _PACKED.fullmatch(mnemonic) and regs:
            width = _WIDTH[regs[0]]
            self.packed[width] = self.packed.get(width, 0) + 1
            if _DIVIDE.fullmatch(mnemonic):
                self.divides += 1
        elif _SCALAR.fullmatch(mnemonic):
            self.scalar += 1
        for kind, pattern in _LANEWISE.items():
            if pattern.fullmatch(mnemonic):
                setattr(self, kind, getattr(self, kind) + 1)
                self.counts[mnemonic] = self.counts.get(mnemonic, 0) + 1
        if _GATHER.fullmatch(mnemonic):
            self.gathers += 1
        if mnemonic.startswith("call"):
            self.calls += 1
        if regs and mnemonic.startswith("vmov") and re.search(r"\((?:%rsp|%rbp)\)|\(%r[sb]p,", operands):
            self.stack += 1
        to_memory = re.search(r"\((?!%rsp|%rbp)[^)]*\)$", operands.rstrip())  # not a spill to the stack
        if regs and to_memory and (mnemonic.startswith(("vmov", "mov")) or _NARROWING_STORE.fullmatch(mnemonic)):
            bits = _WIDTH[regs[0]] // (2 if _NARROWING_STORE.fullmatch(mnemonic) else 1)
            self.stored_bits += bits
        elif regs and to_memory and _EXTRACT_STORE.fullmatch(mnemonic):
            self.stored_bits += 256 if mnemonic.endswith(("32x8", "64x4")) else 128

    def top(self, n: int = 2) -> str:
        """The most frequent lane-by-lane mnemonics, e.g. `384 vucomiss, 144 vpextrd`."""
        ranked = sorted(self.counts.items(), key=lambda kv: -kv[1])[:n]
        return ", ".join(f"{k} {m}" for m, k in ranked)


@dataclass
class Compilation:
    """One function as compiled for one ISA: its name, the width that ISA offers and how that was known."""

    symbol: str
    isa_width: int
    isa_from: str  # "name" (clone suffix, runner, target name) or "instructions" (a target attribute)
    mix: Mix
    loop: Mix | None  # the hottest loop: the backward branch whose body holds the most packed fp work
    runs_here: bool = False

    @property
    def group(self) -> str:
        """The function without its ISA: the clones of one function share it."""
        return re.sub(r" \[[\w.]+\]$", "", self.symbol)


def check_vectorised(variant_dir: Path, namespaces: Sequence[str]) -> list[Check]:
    """One finding per CPU function and ISA compilation of `namespaces` in the variant's modules."""
    objdump = shutil.which("objdump")
    if objdump is None:
        return [Check("vector", "cpu", "skip", "objdump not found (install binutils) to read the disassembly")]
    found = []
    for so in sorted(Path(variant_dir).rglob("*.so")):
        compiled = compilations(so, namespaces, objdump)
        if not compiled:
            found.append(Check("vector", so.name, "skip", f"no functions of {', '.join(namespaces)} in the module"))
        fp64 = sorted(c.symbol for c in compiled if "<double> [" in c.symbol)
        if fp64:
            found.append(
                Check(
                    "vector",
                    f"{len(fp64)} fp64 compilations",
                    "skip",
                    "not judged: fp64 is for gradcheck, and verify times fp32, bf16 and fp16 only",
                )
            )
        for c in sorted(compiled, key=lambda c: c.symbol):
            if (not c.mix.packed and not c.mix.scalar) or c.symbol in fp64:
                continue  # no floating-point work (a dispatcher, a CPU-feature check), or fp64
            found.append(judge(c))
    return found


def judge(c: Compilation) -> Check:
    """Pass, or fail naming what is scalar and the instruction counts that show it."""
    mix, need = c.mix, c.isa_width
    at_width = sum(n for w, n in mix.packed.items() if w >= need)
    data = {
        "packed": {str(w): n for w, n in mix.packed.items()},
        "scalar": mix.scalar,
        "isa_width": need,
        "isa_from": c.isa_from,
        "runs_here": c.runs_here,
        "lanewise": mix.counts,
        "mix": asdict(mix),
        "loop": asdict(c.loop) if c.loop else None,
    }
    summary = (
        f"{at_width} packed fp ops at {need}-bit, {mix.scalar} scalar, {mix.lanewise} lane by lane"
        + (f" (widest {mix.widest}-bit)" if mix.widest else "")
        + ("; ISA read from its instructions" if c.isa_from == "instructions" else "")
        + ("; runs on this CPU" if c.runs_here else "")
    )
    if at_width == 0:
        return Check(
            "vector",
            c.symbol,
            "fail",
            f"scalar code: {summary}; see the skill's CPU guide (-fno-trapping-math, conversions)",
            data,
        )
    loop = c.loop or mix
    loop_at_width = sum(n for w, n in loop.packed.items() if w >= need)
    if loop.lanewise > loop_at_width or loop.compares >= LANEWISE_COMPARES:
        return Check(
            "vector",
            c.symbol,
            "fail",
            f"lane by lane: its hottest loop has {loop.top(3)} against {loop_at_width} packed fp ops at "
            f"{need}-bit ({mix.top(3)} in all); compares and "
            "selects of vectors wider than the ISA's registers are lowered one lane at a time: compare "
            "at the ISA's width (the skill's CPU guide, 'Compares at the ISA's width')",
            data,
        )
    return Check("vector", c.symbol, "pass", summary, data)


def compilations(so: Path, namespaces: Sequence[str], objdump: str = "objdump") -> list[Compilation]:
    """Every compilation of a function of `namespaces` in `so`, with its mix and whether this CPU runs it."""
    out: list[Compilation] = []
    seen: dict[str, list[tuple[int, str, str]]] = {}
    for symbol, lines in _functions(so, objdump):
        name = _short(symbol, namespaces)
        if name is None:
            continue
        seen[name] = max(seen.get(name, []), lines, key=len)  # an alias (a PLT stub, a local symbol): the longer
    for name, lines in seen.items():
        mix = Mix()
        for _, mnemonic, operands in lines:
            mix.add(mnemonic, operands)
        width = named_width(name)
        isa_from = "name"
        if width is None:
            width, isa_from = instruction_width(lines), "instructions"
        out.append(Compilation(name, width, isa_from, mix, hottest_loop(lines)))
    _mark_runs_here(out, cpu_width(), cpu_has_avx512bf16())
    return out


def clone_counts(
    so: Path, namespaces: Sequence[str], objdump: str = "objdump"
) -> dict[str, tuple[int, dict[int, int], int]]:
    """{short symbol: (widest register width used, {width: packed fp instructions}, scalar fp instructions)}."""
    return {c.symbol: (c.mix.widest, dict(c.mix.packed), c.mix.scalar) for c in compilations(so, namespaces, objdump)}


def module_mix(so: Path, symbol: str, objdump: str = "objdump") -> Compilation | None:
    """A function of any module (Inductor's `kernel`, say) read like the kernel's own compilations: of it and the
    parts outlined from it (`kernel._omp_fn.0`, an OpenMP region), the one whose hottest loop does the most."""
    best: Compilation | None = None
    for name, lines in _functions(so, objdump):
        if name != symbol and not re.fullmatch(rf"{re.escape(symbol)}\._omp_fn\.\d+", name):
            continue
        mix = Mix()
        for _, mnemonic, operands in lines:
            mix.add(mnemonic, operands)
        c = Compilation(name, instruction_width(lines), "instructions", mix, hottest_loop(lines), True)
        if c.loop is not None and (best is None or best.loop is None or c.loop.packed_bits > best.loop.packed_bits):
            best = c
    return best


def _functions(so: Path, objdump: str) -> list[tuple[str, list[tuple[int, str, str]]]]:
    """[(demangled symbol, [(address, mnemonic, operands)])] in the order of the disassembly."""
    text = subprocess.run(
        [objdump, "-d", "-C", "--no-show-raw-insn", str(so)], capture_output=True, text=True, check=True
    ).stdout
    out: list[tuple[str, list[tuple[int, str, str]]]] = []
    for line in text.splitlines():
        m = _SYMBOL.match(line)
        if m:
            out.append((m.group(2), []))
            continue
        i = _INSN.match(line)
        if i and out:
            out[-1][1].append((int(i.group(1), 16), i.group(2), i.group(3)))
    return out


def hottest_loop(lines: Sequence[tuple[int, str, str]]) -> Mix | None:
    """The mix of the innermost loop (a backward branch and the code it jumps over) with the most packed fp work."""
    if not lines:
        return None
    start = lines[0][0]
    loops = []  # (first address, backward branch address)
    for addr, mnemonic, operands in lines:
        # a conditional backward branch: an unconditional one is as often a jump into shared tail code
        target = re.match(r"([0-9a-f]+)\b", operands) if mnemonic.startswith("j") and mnemonic != "jmp" else None
        if target and start <= int(target.group(1), 16) < addr:
            loops.append((int(target.group(1), 16), addr))
    # innermost loops only: an outer loop (over rows, say) would count its scalar tails as loop work
    inner = [
        (lo, hi)
        for lo, hi in loops
        if not any(lo <= a < hi for a, _ in loops if (a, _) != (lo, hi))
        and not any(lo <= b < hi for _, b in loops if b != hi)
    ]
    best: Mix | None = None
    for lo, addr in inner:
        body = Mix()
        for a, m, o in lines:
            if lo <= a <= addr:
                body.add(m, o)
        if best is None or (body.packed_bits, -body.calls) > (best.packed_bits, -best.calls):
            best = body  # on a tie, the loop without calls (a partial chunk's memcpy is not the main loop)
    return best


def named_width(symbol: str) -> int | None:
    """The vector width (bits) the ISA named in a compilation's name offers, or None when it names none."""
    isa = re.search(r"\[([\w.]+)\]$", symbol)
    if isa is None:
        return None
    return expected_width(isa.group(1))


def expected_width(symbol: str) -> int:
    """The vector width (bits) the ISA of a clone offers: 512 (AVX-512), 256 (AVX2) or 128 (baseline SSE2)."""
    if re.search(r"x86_64_v4|avx512|skylake_avx512|sapphirerapids|icelake|znver[45]", symbol):
        return 512
    if re.search(r"x86_64_v3|avx2|haswell|znver[123]", symbol):
        return 256
    return 128


def instruction_width(lines: Sequence[tuple[int, str, str]]) -> int:
    """The ISA a function was compiled for, as its instructions show it: zmm or mask registers are AVX-512,
    VEX-encoded instructions AVX2 (x86-64-v3 in practice), else the baseline."""
    vex = False
    for _, mnemonic, operands in lines:
        if "%zmm" in operands or re.search(r"%k[1-7]\b", operands):
            return 512
        vex = vex or (mnemonic.startswith("v") and mnemonic != "vzeroupper")
    return 256 if vex else 128


@functools.cache
def _cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return frozenset()
    m = re.search(r"^flags\s*:\s*(.*)$", text, flags=re.M)
    return frozenset(m.group(1).split()) if m else frozenset()


#: torch's own cap on the ISA of ATen and Inductor; verify's "runs on this CPU" follows it too, so that
#: `ATEN_CPU_CAPABILITY=avx2` (with the kernel's own cap, e.g. ltx-kernels' LTX_CPU_ISA=avx2) models an AVX2 CPU.
_ATEN_CAP = {"avx512": 512, "avx2": 256, "default": 128}


def cpu_width() -> int:
    """The widest vector ISA level this CPU runs: 512 (x86-64-v4), 256 (x86-64-v3) or 128; at most what
    ATEN_CPU_CAPABILITY allows."""
    flags = _cpu_flags()
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"} <= flags:
        width = 512
    elif {"avx2", "fma", "f16c", "bmi2"} <= flags:
        width = 256
    else:
        width = 128
    return min(width, _ATEN_CAP.get(settings.aten_cpu_capability(), 512))


def cpu_has_avx512bf16() -> bool:
    return cpu_width() == 512 and "avx512_bf16" in _cpu_flags()


def _mark_runs_here(compiled: list[Compilation], width: int, bf16: bool) -> None:
    """Per group of clones, the best one this CPU runs (its widest ISA; AVX512-BF16 where the CPU has it)."""
    groups: dict[str, list[Compilation]] = {}
    for c in compiled:
        groups.setdefault(c.group, []).append(c)
    for clones in groups.values():
        runnable = [c for c in clones if c.isa_width <= width and (bf16 or not c.symbol.endswith("[avx512bf16]"))]
        if runnable:
            max(runnable, key=lambda c: (c.isa_width, c.symbol.endswith("[avx512bf16]"))).runs_here = True


def _short(demangled: str, namespaces: Sequence[str]) -> str | None:
    """`ns::op [arch_x86_64_v3]` for a function of the kernel's namespaces (no parameter list), `ns::op<T> [avx2]`
    for a per-ISA runner, `ns::(anonymous namespace)::loop` for one of an anonymous namespace, else None."""
    if not any(demangled.startswith(f"{ns}::") or f" {ns}::" in demangled for ns in namespaces):
        return None
    clone = re.search(r"\[clone (\.[\w.]+)\]", demangled)
    if clone and clone.group(1).startswith((".cold", ".part", ".constprop", ".isra", ".resolver", ".ifunc")):
        return None  # a piece split off by the optimiser (read with its function), or the ifunc resolver
    runner = _RUNNER.search(demangled)
    if runner and runner.group("ns") in namespaces:
        typed = f"<{runner.group('type')}>" if runner.group("type") else ""
        return f"{runner.group('ns')}::{runner.group('op')}{typed} [{runner.group('isa')}]"
    if demangled.endswith("@plt") or "::dispatch<" in demangled or "::run_" in demangled:
        return None  # a PLT stub, the dtype switch, or a runner of another shape
    anon = "(anonymous namespace)"
    name = demangled.split(" [clone", 1)[0].replace(anon, "@anon@")
    name = re.sub(r"\(.*\)", "", name).strip()
    starts = [name.find(f"{ns}::") for ns in namespaces if f"{ns}::" in name]
    name = name[min(starts) :].replace("@anon@", anon)  # no return type
    return f"{name} [{clone.group(1).lstrip('.')}]" if clone else name
