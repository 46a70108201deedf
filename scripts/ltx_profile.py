"""Where the LTX-Video 2B forward spends GPU time with ltx-kernels (eager), by kernel: torch.profiler.

Usage (GPU machine, after `hubkernels build`): python scripts/ltx_profile.py [--compile]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hubkernels  # noqa: E402
from hubkernels.integrations import diffusers as hd  # noqa: E402
from hubkernels.integrations.ltx_bench import build_ltx, ltx_inputs  # noqa: E402
from ltx_e2e import LTX_2B  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-kernels", action="store_true")
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    model = build_ltx(LTX_2B, dtype=torch.bfloat16, device="cuda")
    inputs = ltx_inputs(LTX_2B, tokens_shape=(16, 16, 24), text_len=128, dtype=torch.bfloat16, device="cuda")
    if not args.no_kernels:
        kernel = hubkernels.get_local_kernel(Path(__file__).resolve().parent.parent, backend="cuda")
        hd.kernelize(model, kernel=kernel)
    fn = torch.compile(model, fullgraph=True) if args.compile else model
    with torch.inference_mode():
        for _ in range(3):
            fn(**inputs)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn(**inputs)
            torch.cuda.synchronize()
    events = prof.key_averages()
    total = sum(e.device_time_total for e in events if e.device_time_total) / 1e3
    print(f"GPU time in kernels: {total:.1f} ms (one forward)")
    rows = sorted((e for e in events if e.device_time_total), key=lambda e: -e.device_time_total)[:30]
    for e in rows:
        print(f"{e.device_time_total / 1e3:9.2f} ms {e.count:6d}x  {e.key[:110]}")


if __name__ == "__main__":
    main()
