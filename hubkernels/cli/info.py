"""`hubkernels info`: its arguments and run function live in `hubkernels.fetch`, imported only to run it."""

from __future__ import annotations

import argparse

NAME = "info"
HELP = "show a Hub kernel's versions and how its variants resolve here"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ..fetch import register_cli

    register_cli(sub)
