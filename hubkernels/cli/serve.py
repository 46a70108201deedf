"""`hubkernels serve`: its arguments and run function live in `hubkernels.server.cli`, imported only to run it."""

from __future__ import annotations

import argparse

NAME = "serve"
HELP = "run a Hub-compatible server (git-backed) for publishing and loading kernels locally"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ..server.cli import register_cli

    register_cli(sub)
