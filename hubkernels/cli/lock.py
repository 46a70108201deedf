"""`hubkernels lock`: its arguments and run function live in `hubkernels.lock`, imported only to run it."""

from __future__ import annotations

import argparse

NAME = "lock"
HELP = "pin Hub kernels to exact commits and variant hashes in a lock file"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ..fetch.lock import register_cli

    register_cli(sub)
