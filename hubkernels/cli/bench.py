"""`hubkernels bench [PATH]`: run the benchmarks the kernel at PATH declares (see `hubkernels.author.bench`)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

NAME = "bench"
HELP = "time the kernel's declared ops against eager, their peers and torch.compile"


def run(args: argparse.Namespace) -> int:
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    from ..author.bench import discover, format_report, parse_size
    from ..author.bench import run as run_benchmarks

    benchmarks = discover(args.path)
    if args.repo_id:
        from ..fetch import get_kernel

        kernel = get_kernel(args.repo_id, version=args.version, trust_remote_code=True)
    else:
        from ..fetch import get_local_kernel

        kernel = get_local_kernel(args.kernel or args.path)
    shape = dict(parse_size(s) for s in args.shape or [])
    shape.update(
        {
            k: v
            for k, v in (("batch", args.batch), ("tokens", args.tokens), ("hidden", args.hidden), ("ff", args.ff))
            if v is not None
        }
    )
    report = run_benchmarks(
        kernel,
        benchmarks,
        device=device,
        dtype=dtype,
        shape=shape,
        warmup=args.warmup,
        iters=args.iters,
        compile_peers=not args.no_compile,
        ops=args.ops,
    )
    print(format_report(report))
    if args.output:
        Path(args.output).write_text(json.dumps({**asdict(report), "argv": sys.argv}, indent=2))
        print(f"wrote {args.output}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("path", nargs="?", default=".", help="kernel root with benchmarks/benchmark*.py (default: .)")
    p.add_argument("--kernel", help="local kernel dir to load (default: PATH's build)")
    p.add_argument("--repo-id", help="load from the Hub instead")
    p.add_argument("--version", type=int, help="kernel version on the Hub")
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--shape", nargs="*", metavar="NAME=N", help="override a declared size")
    p.add_argument("--batch", type=int, help="shorthand for --shape batch=N")
    p.add_argument("--tokens", type=int, help="shorthand for --shape tokens=N")
    p.add_argument("--hidden", type=int, help="shorthand for --shape hidden=N")
    p.add_argument("--ff", type=int, help="shorthand for --shape ff=N")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile peers")
    p.add_argument("--ops", nargs="*", help="only these ops")
    p.add_argument("--output", help="write the full report as JSON here")
    p.set_defaults(func=run)
