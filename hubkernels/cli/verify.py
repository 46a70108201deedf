"""`hubkernels verify [PATH]`: its arguments and run function live in `hubkernels.author.verify`."""

from __future__ import annotations

import argparse

NAME = "verify"
HELP = "say whether a kernel is shippable and why not (build, ABI, tests, compile, vectorisation, speed)"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ..author.verify import register_cli

    register_cli(sub)
