"""Time ltx-kernels' CPU ops against `torch.compile` of their formulas by the calling thread's CPU time.

On a shared machine verify's wall-clock gate measures the other jobs as much as the code (the same build swung
from 0.3x to 1.8x torch.compile between runs at load 6-15). This uses verify's own pieces (the declared
benchmarks, their inputs, the two functions taking turns call by call, the fastest fifth of the calls) but reads
`time.thread_time()`, which stops while the thread waits for a core, and repeats the whole set in rounds, ops
interleaved, reporting per row the median over rounds of torch.compile's time over ours. One thread; the ISAs as
verify's: LTX_CPU_ISA and ATEN_CPU_CAPABILITY cap ours and Inductor's.

    python scripts/cpu_time_vs_compile.py OUT.json [--rounds 5] [--iters 10] [--ops OP ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from hubkernels import get_local_kernel  # noqa: E402
from hubkernels.author.verify import op_checks as _ops  # noqa: E402


def thread_samples(fns: dict[str, Callable[..., Any]], inputs: Sequence[tuple], iters: int) -> dict[str, list[float]]:
    """µs of thread CPU time per call of each function, in turns, after three warm-up calls each."""
    for fn in fns.values():
        for i in range(3):
            fn(*inputs[i % len(inputs)])
    out: dict[str, list[float]] = {name: [] for name in fns}
    for i in range(iters):
        args = inputs[i % len(inputs)]
        for name, fn in fns.items():
            t0 = time.thread_time()
            fn(*args)
            out[name].append((time.thread_time() - t0) * 1e6)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--ops", nargs="*")
    args = parser.parse_args()
    torch.set_num_threads(1)
    kernel = get_local_kernel(ROOT, backend="cpu")
    cases = []
    for op, cls in _ops.workloads(_ops.benchmarks(ROOT), args.ops).items():
        for dtype in _ops._DTYPES:
            bench = _ops._instance(cls, kernel, getattr(torch, _ops._DTYPES[dtype]))
            inputs = [getattr(bench, f"setup_{op}")() for _ in range(2)]
            ours = getattr(bench, f"benchmark_{op}")
            torch._dynamo.reset()
            compiled = torch.compile(getattr(bench, f"verify_{op}"), dynamic=False)
            ours(*inputs[0])
            compiled(*inputs[0])
            cases.append((f"{op} {dtype}", {"ours": ours, "torch.compile": compiled}, inputs))
    loads = [os.getloadavg()[0]]
    fast: dict[str, dict[str, list[float]]] = {name: {"ours": [], "torch.compile": []} for name, _, _ in cases}
    for _ in range(args.rounds):
        for name, fns, inputs in cases:
            for who, s in thread_samples(fns, inputs, args.iters).items():
                fast[name][who].append(_ops.quantile(s, _ops.FAST_QUANTILE))
        loads.append(os.getloadavg()[0])
    rows = {}
    for name, f in fast.items():
        ratios = [c / o for o, c in zip(f["ours"], f["torch.compile"])]
        rows[name] = {
            "ours_ms": round(statistics.median(f["ours"]) / 1e3, 3),
            "compile_ms": round(statistics.median(f["torch.compile"]) / 1e3, 3),
            "vs_compile": round(statistics.median(ratios), 3),
            "vs_compile_rounds": [round(r, 3) for r in ratios],
        }
        r = rows[name]
        print(
            f"{name:28s} ours {r['ours_ms']:8.2f} ms  torch.compile {r['compile_ms']:8.2f} ms  {r['vs_compile']:.2f}x"
        )
    print("load average (1 min) over the run:", " ".join(f"{x:.1f}" for x in loads))
    meta = {k: os.environ.get(k) for k in ("LTX_CPU_ISA", "ATEN_CPU_CAPABILITY")}
    result = {"env": meta, "rounds": args.rounds, "iters": args.iters, "load1": loads, "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
