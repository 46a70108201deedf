"""`hubkernels demo [PATH]`: build, publish, get_kernel and kernelize LTX-Video end to end (`hubkernels.demo`)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

NAME = "demo"
HELP = "build, publish, get_kernel and kernelize LTX-Video end to end, with timings"


def run(args: argparse.Namespace) -> int:
    work = Path(args.workdir or tempfile.mkdtemp(prefix="hubkernels-demo-"))
    if "huggingface_hub" in sys.modules:
        # huggingface_hub reads HF_ENDPOINT once, at import: run the demo in a process that sees the embedded Hub.
        argv = sys.argv[1:] if sys.argv[1:2] == ["demo"] else ["demo"]
        return subprocess.call([sys.executable, "-m", "hubkernels", *argv, "--workdir", str(work)])
    from ..demo import run_demo

    report = run_demo(
        args.path,
        work,
        compile=args.compile,
        iters=args.iters,
        verbose=args.verbose,
        say=lambda line: print(line, flush=True),
    )
    print("\nSummary")
    for name, dt, detail in report.steps:
        print(f"  {name:<52} {dt:8.2f} s   {detail}")
    print("\n" + report.timings)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"steps": report.steps, "replaced": report.replaced, "failed": report.failed}, indent=2, default=str
            )
        )
    if report.failed:
        print("\nFAILED: " + "; ".join(report.failed))
        return 1
    print("\nAll checks passed.")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP + ". Exits 1 if any check fails.")
    p.add_argument(
        "path", nargs="?", default=".", help="the hubkernels checkout whose ltx-kernels it builds (default: .)"
    )
    p.add_argument("--workdir", help="where the Hub and the cache live (default: a new temp dir)")
    p.add_argument("--compile", action="store_true", help="also time torch.compile with and without the kernels")
    p.add_argument("--iters", type=int, default=5, help="timed forwards per mode")
    p.add_argument("--json", help="write the results here")
    p.add_argument("-v", "--verbose", action="store_true", help="show the compiler's commands")
    p.set_defaults(func=run)
