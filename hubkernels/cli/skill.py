"""`hubkernels skill`: its arguments and run function live in `hubkernels.author.skill_install`."""

from __future__ import annotations

import argparse

NAME = "skill"
HELP = "install the agent skill for writing and shipping kernels"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ..author.skill_install import register_cli

    register_cli(sub)
