"""`hubkernels demo`: build, publish, get_kernel and kernelize LTX-Video end to end (see `hubkernels.demo`)."""

from __future__ import annotations

import argparse

NAME = "demo"
HELP = "build, publish, get_kernel and kernelize LTX-Video end to end, with timings"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ..demo import add_arguments, run

    p = sub.add_parser(NAME, help=HELP)
    add_arguments(p)
    p.set_defaults(func=run)
