"""`hubkernels verify [PATH]`: whether a kernel is shippable here and why not (`hubkernels.author.verify`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import Any

NAME = "verify"
HELP = "say whether a kernel is shippable and why not (build, ABI, tests, compile, vectorisation, speed)"


def run(args: argparse.Namespace) -> int:
    from ..author.bench import parse_size
    from ..author.verify import format_table, verify

    skip = [s.strip() for s in (args.skip or "").split(",") if s.strip()]
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    shape = dict(parse_size(s) for s in args.shape or [])
    verdict = verify(
        args.path,
        skip=skip,
        threads=args.threads or None,
        tolerance=args.tolerance,
        dtypes=dtypes,
        iters=args.iters,
        on_check=None if args.json else lambda c: print(c.line(), file=sys.stderr, flush=True),
        ops=args.ops or None,
        shape=shape,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "path": verdict.path,
                    "ok": verdict.ok,
                    "unverified": [c.subject for c in verdict.unverified],
                    "checks": [asdict(c) for c in verdict.checks],
                },
                indent=2,
            )
        )
    elif _same_file(sys.stdout, sys.stderr):  # one log: the findings are in it already, as they came
        print(format_table(verdict).splitlines()[-1])
    else:
        print(format_table(verdict))
    return 0 if verdict.ok else 1


def _same_file(a: Any, b: Any) -> bool:
    """Whether two streams write to one file (`verify > log 2>&1`, or one terminal)."""
    try:
        x, y = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino)


def register(sub: argparse._SubParsersAction) -> None:
    from ..author import verify as stage

    p = sub.add_parser(
        NAME,
        help="say whether the kernel is shippable: build, ABI, tests, compile, "
        "vectorisation, speed against torch.compile",
        description=stage.__doc__.split("\n\n")[1] if stage.__doc__ else None,
    )
    p.add_argument("path", nargs="?", default=".", help="kernel root (holds build.toml)")
    p.add_argument("--json", action="store_true", help="machine-readable findings on stdout")
    p.add_argument("--skip", help=f"comma-separated checks to leave out: {','.join(stage.CHECKS)}")
    p.add_argument("--dtypes", default="fp32,bf16,fp16", help="dtypes to time (default: fp32,bf16,fp16)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads while timing (default 1: stable on a shared machine; 0: torch's default)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.05,
        help="allowed excess over torch.compile's time, as a fraction (default 0.05: the "
        "run-to-run noise of a shared machine)",
    )
    p.add_argument("--iters", type=int, default=30, help="timed rounds per op and dtype")
    p.add_argument("--ops", nargs="*", metavar="OP", help="trace and time only these declared ops")
    p.add_argument(
        "--shape",
        nargs="*",
        metavar="NAME=N",
        help="time at these sizes instead of the declared CPU ones (e.g. tokens=6144)",
    )
    p.set_defaults(func=run)
