"""verify's vectorisation check: the CPU code's vector instructions counted per function and per ISA clone.

A total over the library says nothing: one vectorised clone hides a scalar one. So the disassembly (objdump) is
split at every symbol of the kernel's own namespaces, each function-multiversioning clone (`[clone .arch_x86_64_v3]`,
`.avx2`, ...) or explicit per-ISA compilation (`ns::run_avx2<ns::op(...)::{lambda}...<T>...>`, the runners of
ltx-kernels' vec.h, one per op, storage type and ISA) is read on its own, and each is judged at the width its ISA
offers: packed floating-point arithmetic on zmm for x86-64-v4 / AVX-512, ymm for x86-64-v3 / AVX2, xmm for the
baseline. A compilation with none at its width is scalar code and fails.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from . import Check

_SYMBOL = re.compile(r"^[0-9a-f]+ <(.+)>:$")
# Packed single/double precision arithmetic, conversions and FMAs (not moves, not shuffles): the work of a loop.
_PACKED = re.compile(r"^\s*[0-9a-f]+:\s+v?(?:fn?m(?:add|sub)\w*p[sd]|(?:add|sub|mul|div|sqrt|max|min|rsqrt|rcp)p[sd]"
                     r"|cvt\w*p[sdh]\w*|cvtph2ps|cvtps2ph)\b[^\n]*?%(?P<reg>[xyz])mm")
_SCALAR = re.compile(r"^\s*[0-9a-f]+:\s+v?(?:fn?m(?:add|sub)\w*s[sd]|(?:add|sub|mul|div|sqrt|max|min)s[sd])\b")
_WIDTH = {"z": 512, "y": 256, "x": 128}
# `void ns::run_avx512<ns::op(args)::{lambda(auto:1)#1}::operator()<ns::BFloat16>(...) const::{lambda...}>(...)`
_RUNNER = re.compile(r"(?P<ns>\w+)::run_(?P<isa>avx512bf16|avx512|avx2|baseline)<(?P=ns)::(?P<op>\w+)\(.*?"
                     r"operator\(\)<(?:(?P=ns)::)?(?P<type>\w+)>")


def check_vectorised(variant_dir: Path, namespaces: Sequence[str]) -> list[Check]:
    """One finding per CPU function and ISA clone of `namespaces` in the variant's modules."""
    objdump = shutil.which("objdump")
    if objdump is None:
        return [Check("vector", "cpu", "skip", "objdump not found (install binutils) to read the disassembly")]
    found = []
    for so in sorted(Path(variant_dir).rglob("*.so")):
        counts = clone_counts(so, namespaces, objdump)
        if not counts:
            found.append(Check("vector", so.name, "skip", f"no functions of {', '.join(namespaces)} in the module"))
        fp64 = sorted(symbol for symbol in counts if "<double> [" in symbol)
        if fp64:
            found.append(Check("vector", f"{len(fp64)} fp64 compilations", "skip",
                               "not judged: fp64 is for gradcheck, and verify times fp32, bf16 and fp16 only"))
        for symbol, (width, packed, scalar) in sorted(counts.items()):
            if (not packed and not scalar) or symbol in fp64:
                continue  # no floating-point work (a dispatcher, a CPU-feature check), or fp64
            need = expected_width(symbol)
            at_width = sum(n for w, n in packed.items() if w >= need)
            data = {"packed": {str(w): n for w, n in packed.items()}, "scalar": scalar, "isa_width": need}
            summary = (f"{at_width} packed fp ops at {need}-bit, {scalar} scalar"
                       + (f" (widest {width}-bit)" if width else ""))
            status = "pass" if at_width > 0 else "fail"
            if status == "fail":
                summary = f"scalar code: {summary}; see the skill's CPU guide (-fno-trapping-math, conversions)"
            found.append(Check("vector", symbol, status, summary, data))
    return found


def clone_counts(so: Path, namespaces: Sequence[str],
                 objdump: str = "objdump") -> dict[str, tuple[int, dict[int, int], int]]:
    """{short symbol: (widest register width used, {width: packed fp instructions}, scalar fp instructions)}."""
    text = subprocess.run([objdump, "-d", "-C", "--no-show-raw-insn", str(so)], capture_output=True, text=True,
                          check=True).stdout
    out: dict[str, tuple[int, dict[int, int], int]] = {}
    current: str | None = None
    packed: dict[int, int] = {}
    scalar = 0

    def flush() -> None:
        if current is not None:
            out[current] = (max(packed, default=0), dict(packed), scalar)

    for line in text.splitlines():
        m = _SYMBOL.match(line)
        if m:
            flush()
            current, packed, scalar = _short(m.group(1), namespaces), {}, 0
            continue
        if current is None:
            continue
        p = _PACKED.match(line)
        if p:
            width = _WIDTH[p.group("reg")]
            packed[width] = packed.get(width, 0) + 1
        elif _SCALAR.match(line):
            scalar += 1
    flush()
    return out


def expected_width(symbol: str) -> int:
    """The vector width (bits) the ISA of a clone offers: 512 (AVX-512), 256 (AVX2) or 128 (baseline SSE2)."""
    if re.search(r"x86_64_v4|avx512|skylake_avx512|sapphirerapids|icelake|znver[45]", symbol):
        return 512
    if re.search(r"x86_64_v3|avx2|haswell|znver[123]", symbol):
        return 256
    return 128


def _short(demangled: str, namespaces: Sequence[str]) -> str | None:
    """`ns::op [arch_x86_64_v3]` for a function of the kernel's namespaces (no parameter list), `ns::op<T> [avx2]` for
    a per-ISA runner, else None."""
    if not any(demangled.startswith(f"{ns}::") or f" {ns}::" in demangled for ns in namespaces):
        return None
    runner = _RUNNER.search(demangled)
    if runner and runner.group("ns") in namespaces:
        return f"{runner.group('ns')}::{runner.group('op')}<{runner.group('type')}> [{runner.group('isa')}]"
    if demangled.endswith("@plt") or "(anonymous namespace)" in demangled or "::dispatch<" in demangled:
        return None  # inlined helpers compiled out of line: not entry points
    name = re.sub(r"\(.*\)", "", demangled.split(" [clone", 1)[0]).strip()
    clone = re.search(r"\[clone (\.[\w.]+)\]", demangled)
    if clone and clone.group(1) in (".resolver", ".ifunc"):
        return None
    return f"{name} [{clone.group(1).lstrip('.')}]" if clone else name
