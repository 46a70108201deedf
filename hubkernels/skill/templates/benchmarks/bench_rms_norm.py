"""Time my_kernels.rms_norm against its peers in one run: the eager formula, F.rms_norm, torch.compile.

Timing is hubkernels.bench's: on a GPU, CUDA events around back-to-back calls queued behind a device-side
sleep (GPU time, not Python launch time); on a CPU, a monotonic clock. Inputs rotate among several
buffers so the cache cannot serve repeats, and every row reports the share of this device's measured
copy bandwidth it reaches (bytes read + written once). Inputs are fresh random values every run.

    python benchmarks/bench_rms_norm.py                        # this machine's device, bf16
    python benchmarks/bench_rms_norm.py --device cpu --shape 2 1024 2048 --output bench.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

import hubkernels
from hubkernels.bench import Report, Row, copy_bandwidth, format_report, time_calls, warm_up_device
from hubkernels.build import build

ROOT = Path(__file__).resolve().parent.parent
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def eager(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The formula modeling code writes by hand: several kernels, an fp32 round trip."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x64 = x.double()
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU {platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--shape", type=int, nargs=3, metavar=("B", "S", "D"),
                        help="x's shape (default 2 6144 2048 on a GPU, 2 1024 2048 on a CPU)")
    parser.add_argument("--rotate", type=int, default=3, help="input buffers to cycle through")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch.compile peer")
    parser.add_argument("--output", help="also write the report as JSON here")
    args = parser.parse_args(argv)

    dev, dtype = torch.device(args.device), DTYPES[args.dtype]
    b, s, d = args.shape or ((2, 6144, 2048) if dev.type == "cuda" else (2, 1024, 2048))
    kernel = hubkernels.get_local_kernel(build(ROOT, backend=dev.type, quiet=True).path, backend=dev.type)
    eps = 1e-6
    gen = torch.Generator(device=dev).manual_seed(time.time_ns() & 0xFFFFFFFF)
    inputs = [(torch.randn(b, s, d, device=dev, dtype=dtype, generator=gen),
               1 + 0.1 * torch.randn(d, device=dev, dtype=dtype, generator=gen)) for _ in range(args.rotate)]
    peers = {
        "ours": lambda x, w: kernel.rms_norm(x, w, eps),
        "eager": lambda x, w: eager(x, w, eps),
        "F.rms_norm": lambda x, w: F.rms_norm(x, (d,), w, eps),
    }
    if not args.no_compile:
        peers["torch.compile"] = torch.compile(peers["eager"], dynamic=False)

    warm_up_device(dev)
    copy_gbps = copy_bandwidth(dev, 1 << 30 if dev.type == "cuda" else 1 << 27, args.warmup, args.iters)
    report = Report(device=device_name(dev), torch=torch.__version__, dtype=args.dtype, shape=[b, s, d],
                    copy_gbps=round(copy_gbps, 1))
    expected = reference(*inputs[0], eps)
    for name, fn in peers.items():
        out = fn(*inputs[0])
        err = float((out.double() - expected).norm() / expected.norm())
        median_us = statistics.median(time_calls(fn, inputs, dev, args.warmup, args.iters))
        nbytes = sum(t.numel() * t.element_size() for t in (*inputs[0], out))
        pct = 100 * nbytes / (median_us * 1e-6) / 1e9 / copy_gbps
        report.rows.append(Row("rms_norm", name, round(median_us, 2), nbytes, round(pct, 1), err, args.iters))
    print(format_report(report))
    if args.output:
        Path(args.output).write_text(json.dumps({**asdict(report), "argv": sys.argv}, indent=2))
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
