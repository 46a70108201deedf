"""`hubkernels download`: its arguments and run function live in `hubkernels.fetch`, imported only to run it."""

from __future__ import annotations

import argparse

NAME = "download"
HELP = "download and verify a Hub kernel's variant for this machine"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ..fetch import register_cli

    register_cli(sub)
