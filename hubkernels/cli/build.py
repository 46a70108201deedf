"""`hubkernels build [PATH] [--wheel]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "build"
HELP = "compile the kernel for this machine into build/<variant>/"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("path", nargs="?", default=".", help="kernel root (holds build.toml)")
    p.add_argument("--backend", help="build this backend instead of the machine's (e.g. cpu)")
    p.add_argument("-j", "--jobs", type=int, help="parallel compile jobs")
    p.add_argument("-v", "--verbose", action="store_true", help="show every compiler command")
    p.add_argument(
        "--wheel",
        action="store_true",
        help="also pack each built variant as a variant wheel (PEP 825; one version, the variant in the label)",
    )
    p.add_argument("--wheel-dir", default="dist", help="where wheels go (default: dist/)")
    p.add_argument(
        "--matrix",
        action="store_true",
        help="build every variant build.toml allows for the default torch and CUDA versions, each in an "
        "isolated, cached toolchain from the package index",
    )
    p.add_argument("--torch", nargs="+", metavar="M.m", help="build for these torch versions (isolated toolchains)")
    p.add_argument("--cuda", nargs="+", metavar="M.m", help="build for these CUDA versions (isolated toolchains)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.matrix or args.torch or args.cuda:
        return run_matrix(args)
    from ..builder import CompileError, build

    try:
        result = build(args.path, backend=args.backend, jobs=args.jobs, verbose=args.verbose, say=_say)
    except CompileError as e:  # the compiler's own output, then exit 1 (a bad input or setup exits 2)
        print(f"hubkernels build: error: {e}", file=sys.stderr)
        return 1
    for built in (result, *result.also):  # a noarch kernel builds every listed backend in one run
        print(built.path)
        if args.wheel:
            print(_pack(built.path, args.wheel_dir))
    return 0


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _pack(variant_dir: Path, wheel_dir: str) -> Path:
    from ..builder.wheel import pack

    return pack(variant_dir, wheel_dir)


def run_matrix(args: argparse.Namespace) -> int:
    """`--matrix`, `--torch`, `--cuda`: every variant asked for, each in its own toolchain; a table at the end
    (and with `--wheel`, the variant wheel of each built variant)."""
    from ..builder.matrix import DEFAULT_CUDA, DEFAULT_TORCH, format_table, plan
    from ..builder.matrix import run_matrix as run_jobs
    from ..config import load_config
    from ..layout import variant_dir

    jobs = plan(
        load_config(args.path),
        args.torch or DEFAULT_TORCH,
        args.cuda or DEFAULT_CUDA,
        [args.backend] if args.backend else None,
    )
    outcomes = run_jobs(args.path, jobs, say=_say, jobs_per_build=args.jobs)
    print(format_table(outcomes))
    if args.wheel:
        for o in outcomes:
            if o.status in ("built", "up to date"):
                print(_pack(variant_dir(args.path, o.job.variant), args.wheel_dir))
    return 1 if any(o.status == "failed" for o in outcomes) else 0
