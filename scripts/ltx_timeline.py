"""Where the LTX-Video 2B forward's wall time goes beyond its kernels: idle gaps on the GPU stream.

For each mode: wall time per forward (CUDA events), then a torch.profiler trace (CUDA activity only,
so the CPU is not slowed) of a few forwards, split at a device sleep between them. Per forward: the
sum of kernel durations ("busy"), the span from first kernel start to last kernel end, the idle time
between kernels, and where the biggest gaps sit (the kernels either side). With --graph, the eager
modes are also captured into one CUDA graph and replayed: what is left is GPU time without any
launch overhead. SM clock and power are sampled with nvidia-smi while the timed loop runs.

Usage (GPU machine, after `hubkernels build`): python scripts/ltx_timeline.py [--modes ...] [--graph]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent / "benchmarks")]
from ltx_e2e import LTX_2B  # noqa: E402
from ltx_forward import build_ltx, ltx_inputs  # noqa: E402

import hubkernels  # noqa: E402
from hubkernels.integrations import diffusers as hd  # noqa: E402
from hubkernels.layers import Mode  # noqa: E402

SLEEP_CYCLES = 4_000_000  # ~2 ms at H200 clocks: a marker between profiled forwards


def timed(fn, iters: int) -> list[float]:
    times = []
    for _ in range(iters):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return times


def sample_clocks(path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            "nvidia-smi",
            "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active",
            "--format=csv,noheader",
            "-lms",
            "50",
        ],
        stdout=path.open("w"),
        stderr=subprocess.DEVNULL,
    )


def trace_forwards(fn, n: int) -> list[list[dict]]:
    """Device events (kernels, memsets, memcpys) of n forwards, one list per forward, in start order."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            torch.cuda._sleep(SLEEP_CYCLES)
            fn()
        torch.cuda._sleep(SLEEP_CYCLES)
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    prof.export_chrome_trace(path)
    events = json.loads(Path(path).read_text())["traceEvents"]
    os.unlink(path)
    device_cats = ("kernel", "gpu_memset", "gpu_memcpy")
    device = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in device_cats), key=lambda e: e["ts"])
    forwards: list[list[dict]] = []
    current: list[dict] = []
    for e in device:
        if "spin" in e["name"] or "sleep" in e["name"].lower():
            if current:
                forwards.append(current)
            current = []
        else:
            current.append(e)
    if current:
        forwards.append(current)
    return forwards


def short(name: str) -> str:
    name = name.replace("void ", "")
    for cut in ("(", "<"):
        if cut in name and not name.startswith("ltx_cuda"):
            name = name.split(cut)[0]
    return name[:70]


def analyse(events: list[dict], top: int = 15) -> dict:
    busy = sum(e["dur"] for e in events)
    span = events[-1]["ts"] + events[-1]["dur"] - events[0]["ts"]
    gaps = []
    end = events[0]["ts"] + events[0]["dur"]
    for prev, e in zip(events, events[1:]):
        gap = e["ts"] - end
        if gap > 0:
            gaps.append((gap, short(prev["name"]), short(e["name"])))
        end = max(end, e["ts"] + e["dur"])
    idle = sum(g for g, _, _ in gaps)
    by_next: Counter[str] = Counter()
    by_prev: Counter[str] = Counter()
    for g, p, n in gaps:
        by_next[n] += g
        by_prev[p] += g
    hist = Counter()
    for g, _, _ in gaps:
        bucket = "<2us" if g < 2 else "2-5us" if g < 5 else "5-20us" if g < 20 else "20-100us" if g < 100 else ">100us"
        hist[bucket] += 1
    kernels = Counter()
    for e in events:
        kernels[short(e["name"])] += e["dur"]
    return {
        "events": len(events),
        "busy_ms": busy / 1e3,
        "span_ms": span / 1e3,
        "idle_ms": idle / 1e3,
        "gap_histogram": dict(hist),
        "idle_before_ms": {k: round(v / 1e3, 3) for k, v in by_next.most_common(top)},
        "idle_after_ms": {k: round(v / 1e3, 3) for k, v in by_prev.most_common(top)},
        "largest_gaps_us": [(round(g, 1), p, n) for g, p, n in sorted(gaps, reverse=True)[:top]],
        "kernel_ms": {k: round(v / 1e3, 3) for k, v in kernels.most_common(top)},
    }


def graph_replay(fn, iters: int) -> dict:
    """GPU time of one forward captured into a CUDA graph (no launch overhead at all)."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        graph.replay()
        torch.cuda.synchronize()
        times = timed(graph.replay, iters)
        return {"median_ms": statistics.median(times), "min_ms": min(times)}
    except Exception as e:  # noqa: BLE001 - report why capture failed, keep the other numbers
        return {"error": f"{type(e).__name__}: {e}"[:400]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", nargs="*", default=["eager+kernels", "compile+kernels"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--traced", type=int, default=3)
    ap.add_argument("--graph", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = build_ltx(LTX_2B, dtype=torch.bfloat16, device="cuda")
    inputs = ltx_inputs(LTX_2B, tokens_shape=(16, 16, 24), text_len=128, dtype=torch.bfloat16, device="cuda")
    kernel = hubkernels.get_local_kernel(Path(__file__).resolve().parent.parent, backend="cuda")
    report = {}
    with torch.inference_mode():
        for mode in args.modes:
            hd.unkernelize(model)
            if mode.endswith("+kernels"):
                kmode = Mode.INFERENCE | Mode.TORCH_COMPILE if mode.startswith("compile") else Mode.INFERENCE
                hd.kernelize(model, kernel=kernel, mode=kmode)
            torch._dynamo.reset()
            target = torch.compile(model, fullgraph=True) if mode.startswith("compile") else model

            def fn():
                return target(**inputs)[0]

            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            sampler = sample_clocks(out / f"clocks_{mode.replace('+', '_')}.csv")
            times = timed(fn, args.iters)
            sampler.terminate()
            entry = {
                "wall_median_ms": statistics.median(times),
                "wall_min_ms": min(times),
                "forwards": [analyse(f) for f in trace_forwards(fn, args.traced)],
            }
            if args.graph and not mode.startswith("compile"):
                entry["cuda_graph"] = graph_replay(fn, args.iters)
            report[mode] = entry
            f0 = entry["forwards"][0]
            print(
                f"== {mode}: wall median {entry['wall_median_ms']:.2f} ms (min {entry['wall_min_ms']:.2f}); "
                f"traced: busy {f0['busy_ms']:.2f} span {f0['span_ms']:.2f} idle {f0['idle_ms']:.2f} ms over "
                f"{f0['events']} events; gaps {f0['gap_histogram']}"
            )
            for f in entry["forwards"][1:]:
                print(
                    f"   another traced forward: busy {f['busy_ms']:.2f} span {f['span_ms']:.2f} "
                    f"idle {f['idle_ms']:.2f}"
                )
            if "cuda_graph" in entry:
                print(f"   CUDA graph replay: {entry['cuda_graph']}")
            print("   idle before (ms):", json.dumps(f0["idle_before_ms"]))
            print("   idle after (ms):", json.dumps(f0["idle_after_ms"]))
            print("   largest gaps (us, prev, next):")
            for g in f0["largest_gaps_us"][:10]:
                print("     ", g)
            print("   kernel time (ms):", json.dumps(f0["kernel_ms"]))
        hd.unkernelize(model)
    (out / "timeline.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
