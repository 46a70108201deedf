"""`hubkernels` command line: a thin shell over the library, one module per command.

Each command module has `NAME`, `HELP` and `register(subparsers)`. Only the command being run is registered
in full (its module imports what it needs then), so `hubkernels build` never imports the Hub server; the
others are listed by name and help. Usage and `HubkernelsError`s exit 2 with one line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..errors import HubkernelsError
from . import bench, build, demo, download, info, init, lock, serve, skill, upload, variants, verify

#: Every command, in the order `hubkernels --help` lists them.
COMMANDS = (init, build, verify, variants, serve, upload, download, info, lock, skill, bench, demo)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line on stderr, exit 2, like every other usage error here
        self.exit(2, f"{self.prog}: error: {message}\n")


def make_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with the command that `argv` names registered in full (every command when argv is None)."""
    from .._version import __version__

    parser = _Parser(prog="hubkernels", description="Build, publish and load kernels through the Hugging Face Hub.")
    parser.add_argument("--version", action="version", version=f"hubkernels {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    wanted = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    for command in COMMANDS:
        if (wanted is None or wanted == command.NAME) and command.NAME not in sub.choices:
            command.register(sub)
    for command in COMMANDS:
        if command.NAME not in sub.choices:
            sub.add_parser(command.NAME, help=command.HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = make_parser(argv).parse_args(argv)
    if not sys.stderr.isatty():
        _no_progress_bars()
    try:
        return int(args.func(args) or 0)
    except HubkernelsError as e:
        print(f"hubkernels {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _no_progress_bars() -> None:
    """Into a log (stderr not a terminal), huggingface_hub's and hf_xet's progress bars are a line per refresh:
    leave them out unless HF_HUB_DISABLE_PROGRESS_BARS says otherwise."""
    if "HF_HUB_DISABLE_PROGRESS_BARS" in os.environ:
        return
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read when huggingface_hub is imported
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


if __name__ == "__main__":
    raise SystemExit(main())
