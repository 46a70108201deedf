"""`hubkernels init NAME`: its arguments and run function live in `hubkernels.author.scaffold`."""

from __future__ import annotations

import argparse

NAME = "init"
HELP = "create a new kernel from the skill's template (build.toml, sources, package, tests, benchmark)"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ..author.scaffold import register_cli

    register_cli(sub)
