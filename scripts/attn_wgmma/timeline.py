"""Timeline: where a consumer's cycles go in ltx-kernels' sm_90a attention, read from %clock inside the kernel.

python scripts/attn_wgmma/timeline.py [patch ...]   (on the GPU machine; default: trace trace-late; a patch
may join a trace patch with others by "+", as in the probe)
Builds shim.cu against the probe's trace patches (probe.py: `_trace`), runs the 2B shape ([2, 6144, 32, 64]
bf16) a few times, and reads back the clock that lane 0 of each consumer warp wrote at the marks of every loop
iteration in four CTAs. Prints, in SM cycles, for each warp of a consumer the median of each step over tiles
2..46, the three consumers and the four CTAs: 0-1 waiting for K(j) / V(j - 1), 1-2 waiting for the turn, 2-3
issuing the wgmmas and handing the turn on, 3-4 waiting for Q K^T(j), 4-... the softmax (and the wait for
P V(j - 1)), 6-7 O's rescale and P's packing, and a tile's whole period; how far behind its consumer's first
warp each warp reaches each mark; then one CTA's three consumers (warp 0) over three tiles, side by side.
The marks themselves cost time (the traced kernel runs about 10 % slower): read the steps as shares.
Writes $OUT/attn_timeline.json.
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import probe  # noqa: E402  (the shim's build, its patches and its inputs)

STEPS = {  # name: (from mark, to mark)
    "K/V wait": (0, 1),
    "turn wait": (1, 2),
    "issue + hand over": (2, 3),
    "Q K^T wait": (3, 4),
    "softmax (with P V wait where ptxas puts it)": (4, 6),
    "softmax alone": (4, 5),
    "P V wait after the softmax": (5, 6),
    "rescale + pack": (6, 7),
}


def read(name: str) -> dict:
    """Runs the shim built with patch `name` on the 2B shape and returns the marks as
    [cta][consumer][warp][tile][mark] (None where the patch has no such mark) and the kernel's do_bench time."""
    import torch
    import triton

    run, label = probe.attention(0, name)
    lib = ctypes.CDLL(str(probe.PATCHED / name / "attn.so"))
    q, k, v = probe.sets(torch, torch.device("cuda"), 3)["gaussian"]
    o = torch.empty_like(q)
    ms = triton.testing.do_bench(lambda: run(q, k, v, o), warmup=50, rep=300, return_mode="median")
    n = len(probe.TRACE_CTAS) * 3 * 4 * probe.TRACE_TILES * probe.TRACE_MARKS
    buf = (ctypes.c_uint * n)()
    for _ in range(3):  # the marks of the last call, after warm calls
        run(q, k, v, o)
    torch.cuda.synchronize()
    if lib.ltx_trace_read(buf):
        raise RuntimeError("could not read the trace")
    marks = next(probe.TRACE_SETS[part] for part in name.split("+") if part in probe.TRACE_SETS)
    flat = list(buf)
    tiles, per = probe.TRACE_TILES, probe.TRACE_MARKS

    def row(c: int, w: int, x: int, j: int) -> list[int | None]:
        at = (((c * 3 + w) * 4 + x) * tiles + j) * per
        return [flat[at + m] if m in marks else None for m in range(per)]

    out = [
        [[[row(c, w, x, j) for j in range(tiles)] for x in range(4)] for w in range(3)]
        for c in range(len(probe.TRACE_CTAS))
    ]
    return {"label": label, "us": ms * 1e3, "marks": out}


def steps(trace: list, warp: int) -> dict[str, float]:
    """The median cycles of each step in one warp of each consumer, and of a tile's period (mark 0 to the next
    tile's mark 0)."""
    got: dict[str, list[int]] = {}
    for cta in trace:
        for cons in cta:
            for j in range(2, probe.TRACE_TILES - 1):
                row, nxt = cons[warp][j], cons[warp][j + 1]
                for name, (a, b) in STEPS.items():
                    if row[a] is not None and row[b] is not None:
                        got.setdefault(name, []).append((row[b] - row[a]) % 2**32)
                if row[0] is not None and nxt[0] is not None:
                    got.setdefault("period", []).append((nxt[0] - row[0]) % 2**32)
    return {name: statistics.median(v) for name, v in got.items()}


def skew(trace: list) -> dict[int, list[float]]:
    """For each mark: the median, over tiles, consumers and CTAs, of how far each warp of a consumer reaches it
    after the consumer's first warp to get there (warps 0..3; warp 0 shares its SM quarter with the producer)."""
    got: dict[int, list[list[int]]] = {}
    for cta in trace:
        for cons in cta:
            for j in range(2, probe.TRACE_TILES - 1):
                for m in range(probe.TRACE_MARKS):
                    at = [cons[x][j][m] for x in range(4)]
                    if None in at:
                        continue
                    first = min(at, key=lambda c: (c - at[0] + 2**31) % 2**32)
                    got.setdefault(m, []).append([(c - first) % 2**32 for c in at])
    return {m: [statistics.median(r[x] for r in rows) for x in range(4)] for m, rows in got.items()}


def side_by_side(trace: list, cta: int = 1, tiles: range = range(20, 23)) -> list[str]:
    """One CTA's consumers (warp 0 of each) over a few tiles: each mark's cycle relative to the first mark of
    consumer 0 in the first tile."""
    base = next(x for x in trace[cta][0][0][tiles[0]] if x is not None)
    lines = ["tile consumer " + " ".join(f"{m:>7}" for m in range(probe.TRACE_MARKS))]
    for j in tiles:
        for w in range(3):
            row = trace[cta][w][0][j]
            cells = [f"{(x - base) % 2**32:>7}" if x is not None else "      -" for x in row]
            lines.append(f"{j:>4} {w:>8} " + " ".join(cells))
    return lines


def main(argv: list[str]) -> int:
    import torch

    names = argv or ["trace", "trace-late"]
    print(probe.build(set(names)).count("spill stores"), "ptxas reports", flush=True)
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    result = {}
    for name in names:
        r = read(name)
        r["steps"] = [steps(r["marks"], x) for x in range(4)]
        r["skew"] = skew(r["marks"])
        result[name] = r
        print(f"\n== {r['label']}: {r['us']:.1f} us (do_bench); cycles, warps 0 / 1 / 2 / 3 of each consumer")
        for step in r["steps"][0]:
            print(f"  {step:45} " + " / ".join(f"{s.get(step, float('nan')):5.0f}" for s in r["steps"]))
        for m, lag in r["skew"].items():
            print(f"  mark {m} reached after the consumer's first warp by " + " / ".join(f"{x:4.0f}" for x in lag))
        print("\n".join(side_by_side(r["marks"])))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "attn_timeline.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
