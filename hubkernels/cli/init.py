"""`hubkernels init NAME`: a new kernel from the skill's template (`hubkernels.author.scaffold.init_kernel`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

NAME = "init"
HELP = "create a new kernel from the skill's template (build.toml, sources, package, tests, benchmark)"


def run(args: argparse.Namespace) -> int:
    from ..author.scaffold import init_kernel

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    root = init_kernel(args.name, args.dest, backends=backends, op=args.op, repo_id=args.repo_id)
    print(root)
    print(f"next: cd {os.path.relpath(root)} && hubkernels verify", flush=True)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from ..author.scaffold import BACKENDS, TEMPLATE_OP

    p = sub.add_parser(
        NAME,
        help="create a new kernel (build.toml, op sources, package, tests, benchmark, git)",
        description="Create a kernel from the skill's template: one op, CPU and/or CUDA sources, "
        "fake implementation, backward, layer, tests and a benchmark declaration, "
        "committed to a new git repository. Never overwrites.",
    )
    p.add_argument("name", help="kernel name, lowercase and '-' (the Python package uses '_')")
    p.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: cpu, cuda (default: both)")
    p.add_argument("--op", default=TEMPLATE_OP, help=f"name of the first op (default: {TEMPLATE_OP})")
    p.add_argument("--dest", type=Path, help="create the kernel here (default: ./NAME)")
    p.add_argument("--repo-id", help="Hub repo id for build.toml (default: my-org/NAME)")
    p.set_defaults(func=run)
