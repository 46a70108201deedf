"""Per-instruction Nsight Compute counters of two kernels side by side: instructions executed and warp-stall samples
by opcode, the hottest instructions, and where each loop's P V wait (`WARPGROUP.DEPBAR.LE gsb0, 0x0`) sits
among the softmax's exponentials.

python scripts/attn_wgmma/ncu_sass.py OURS.csv PEER.csv [TOP]
Each CSV is `ncu -i REPORT --page source --csv --print-source sass -k regex:NAME` of a report taken with
`--set full` (profile_peer.py's command with `-o REPORT`); runs anywhere (no GPU).
"""

from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path

EXEC, SAMPLES = "Instructions Executed", "Warp Stall Sampling (All Samples)"


def rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The per-instruction rows of one kernel's source page (the first line names the kernel)."""
    lines = list(csv.reader(path.open()))
    header = lines[1]
    return header, [dict(zip(header, r)) for r in lines[2:] if len(r) >= len(header)]


def num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source: str) -> str:
    words = [w for w in source.split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else ""


def report(path: Path, top: int) -> str:
    header, insts = rows(path)
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(num(r[SAMPLES]) for r in insts) or 1.0
    executed, sampled, reasons = Counter(), Counter(), Counter()
    for r in insts:
        executed[opcode(r["Source"])] += num(r[EXEC])
        sampled[opcode(r["Source"])] += num(r[SAMPLES])
        for s in stalls:
            reasons[s[len("stall_") :]] += num(r[s])
    out = [f"== {path.name}: {sum(executed.values()) / 1e6:.1f} M warp instructions, {total:.0f} stall samples"]
    out.append("stall reasons: " + ", ".join(f"{k} {v / total:.1%}" for k, v in reasons.most_common(10)))
    out.append("opcode      executed (M)  samples")
    out += [f"{k:10} {v / 1e6:12.2f}  {sampled[k] / total:6.1%}" for k, v in executed.most_common(24)]
    base = int(insts[0]["Address"], 16)
    out.append(f"hottest {top} instructions (offset, executed, samples, top stall reason):")
    for r in sorted(insts, key=lambda r: -num(r[SAMPLES]))[:top]:
        why = max(stalls, key=lambda s: num(r[s]))[len("stall_") :]
        offset = int(r["Address"], 16) - base
        out.append(
            f"  {offset:6x} {num(r[EXEC]) / 1e6:6.2f}M {num(r[SAMPLES]) / total:6.2%} {why:14} {r['Source'][:72]}"
        )
    # the loop's P V wait: how many exponentials of the softmax run before it (the first full wait that follows
    # a `wait_group 1`, i.e. the loop's)
    seen_partial, exps = False, 0
    for r in insts:
        src = r["Source"]
        if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in src:
            seen_partial, exps = True, 0
        elif seen_partial and "MUFU.EX2" in src:
            exps += 1
        elif seen_partial and "WARPGROUP.DEPBAR.LE gsb0, 0x0" in src:
            out.append(f"the loop's P V wait: after {exps} exponentials, {num(r[SAMPLES]) / total:.2%} of the samples")
            break
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    top = int(argv[2]) if len(argv) > 2 else 12
    for path in argv[:2]:
        print(report(Path(path), top))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
