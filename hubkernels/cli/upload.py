"""`hubkernels upload`: its arguments and run function live in `hubkernels.publish`, imported only to run it."""

from __future__ import annotations

import argparse

NAME = "upload"
HELP = "publish built variants to a Hub kernel repo (branch v<version>)"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ..publish import register_cli

    register_cli(sub)
