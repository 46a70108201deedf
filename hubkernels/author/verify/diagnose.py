"""verify's next step after a speed failure: the instruction mix of the compilation that runs on this CPU against
Inductor's kernel for the same formula, per 16 elements stored, and the likely causes with the skill's fix.

Both sides are read the same way (`vector.Mix` over the innermost loop with the most packed work): divisions,
scalar compares, lane extracts, gathers and calls, divided by the elements the loop stores (its vector stores'
bits over the dtype's). Static counts are a guide to where to look, not a profile.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from . import Check, vector

_BITS = {"fp32": 32, "bf16": 16, "fp16": 16}
_TYPES = {"fp32": ("float",), "bf16": ("BFloat16", "bfloat16", "bf16"), "fp16": ("Half", "half", "fp16")}
#: Per 16 elements: the figures a cause is judged by, and how they print.
_FIGURES = (
    ("divides", "vdivps"),
    ("compares", "scalar compares"),
    ("extracts", "lane extracts"),
    ("gathers", "gathers"),
    ("calls", "calls"),
    ("stack", "vector stack moves"),
)
GUIDE = "the skill's CPU guide (references/cpu-translation.md)"
#: The guide's headings (or bullet) each cause points to; tests/test_skill.py checks they exist.
SECTIONS = {
    "division": "One division per element",
    "lanes": "Compares at the ISA's width",
    "clones": "ISA clones",
    "memory": "Memory",
}


def per16(loop: vector.Mix, dtype: str) -> dict[str, float]:
    """The loop's figures per 16 elements stored (per iteration when it stores no vector)."""
    elements = loop.stored_bits / _BITS[dtype] if loop.stored_bits else 16
    scale = 16 / elements
    out = {key: round(getattr(loop, key) * scale, 2) for key, _ in _FIGURES}
    out["width"] = loop.widest
    return out


def running(compiled: Sequence[vector.Compilation], op: str, dtype: str) -> list[vector.Compilation]:
    """The compilations of `op` this CPU runs for `dtype` (a runner's storage type must match): the functions named
    `op`, else those whose name starts with `op_` (a row loop such as `silu_and_mul_rows`)."""

    def name(c: vector.Compilation) -> str:
        return re.split(r"[<\s]", c.symbol.rsplit("::", 1)[-1], maxsplit=1)[0]

    candidates = []
    for c in compiled:
        typed = re.search(r"<(\w+)> \[", c.symbol)
        if c.runs_here and (c.mix.packed or c.mix.scalar) and not (typed and typed.group(1) not in _TYPES[dtype]):
            candidates.append(c)
    exact = [c for c in candidates if name(c) == op]
    return exact or [c for c in candidates if name(c).startswith(f"{op}_")]


def inductor_kernels(modules: Sequence[str]) -> list[vector.Compilation]:
    """The `kernel` function of each module Inductor compiled and loaded for the formula."""
    found = []
    for so in modules:
        c = vector.module_mix(Path(so), "kernel")
        if c is not None and c.loop is not None:
            found.append(c)
    return found


def causes(ours: dict[str, float], theirs: dict[str, float]) -> list[str]:
    """The one or two likely causes, most telling first, each with the fix the skill documents."""
    out = []
    if ours["divides"] > theirs["divides"]:
        out.append(
            f"{ours['divides']:g} vdivps per 16 elements against Inductor's {theirs['divides']:g}: "
            "a select or clamp applied to a quotient makes GCC divide for each side; clamp the operand "
            f"before the division and divide once ({GUIDE}, '{SECTIONS['division']}')"
        )
    if ours["compares"] + ours["extracts"] > theirs["compares"] + theirs["extracts"]:
        out.append(
            f"{ours['compares']:g} scalar compares and {ours['extracts']:g} lane extracts per 16 elements "
            f"against Inductor's {theirs['compares']:g} and {theirs['extracts']:g}: a vector compare or select "
            f"lowered lane by lane; compare at the ISA's width ({GUIDE}, '{SECTIONS['lanes']}')"
        )
    if ours["width"] < theirs["width"]:
        out.append(
            f"{ours['width']}-bit vectors against Inductor's {theirs['width']}-bit: add a compilation for this "
            f"CPU's ISA (target_clones or a per-ISA runner, {GUIDE}, '{SECTIONS['clones']}')"
        )
    if ours["calls"] > theirs["calls"]:
        out.append(
            f"{ours['calls']:g} calls per 16 elements in the loop against Inductor's {theirs['calls']:g}: a "
            f"helper or libm function left out of line; force-inline it or write the polynomial ({GUIDE})"
        )
    if ours["stack"] > theirs["stack"] + 1:
        out.append(
            f"{ours['stack']:g} vector moves to or from the stack per 16 elements against Inductor's "
            f"{theirs['stack']:g}: vectors assembled or bit-cast through arrays (memcpy of __m256 pairs) or "
            f"kept in memory; combine registers with intrinsics instead ({GUIDE}, '{SECTIONS['lanes']}')"
        )
    if ours["gathers"] > theirs["gathers"]:
        out.append(
            f"{ours['gathers']:g} gathers per 16 elements against Inductor's {theirs['gathers']:g}: read "
            "contiguous rows and shuffle in registers"
        )
    return out[:2]


def explain(check: Check, variant_dir: Path, namespaces: Sequence[str], op_names: Sequence[str]) -> Check:
    """`check` (a speed failure) with where to look added to its detail and data; unchanged when nothing can be
    read (no objdump, no loop found, Inductor's kernel not loaded in this process)."""
    import shutil

    objdump = shutil.which("objdump")
    dtype = check.data.get("dtype")
    if objdump is None or dtype not in _BITS:
        return check
    compiled = [
        c for so in sorted(Path(variant_dir).rglob("*.so")) for c in vector.compilations(so, namespaces, objdump)
    ]
    ours = [c for name in dict.fromkeys(n for n in op_names if n) for c in running(compiled, name, dtype)]
    theirs = inductor_kernels(check.data.get("inductor_modules", []))
    if not ours or not theirs:
        return check
    mine = max(ours, key=lambda c: c.loop.packed_bits if c.loop else 0)
    if mine.loop is None:
        return check
    a = per16(mine.loop, dtype)
    b = {key: round(sum(per16(k.loop, dtype)[key] for k in theirs if k.loop), 2) for key, _ in _FIGURES}
    b["width"] = max(k.loop.widest for k in theirs if k.loop)
    figures = ", ".join(f"{a[key]:g} {label}" for key, label in _FIGURES)
    theirs_figures = ", ".join(f"{b[key]:g} {label}" for key, label in _FIGURES)
    found = causes(a, b)
    detail = (
        f"{check.detail}; where to look: {mine.symbol} (runs here), per 16 elements of its hottest loop: "
        f"{figures} at {a['width']}-bit; Inductor's kernel: {theirs_figures} at {b['width']}-bit; "
        + (
            f"likely: {'; '.join(found)}"
            if found
            else f"the mixes match: look at memory (page faults, streaming stores; the guide's '{SECTIONS['memory']}')"
        )
    )
    data = {**check.data, "where": {"compilation": mine.symbol, "ours_per16": a, "inductor_per16": b, "causes": found}}
    return Check(check.check, check.subject, check.status, detail, data)
