"""``hubkernels serve``: run the local Hub from the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``serve`` command to an ``argparse`` subparsers object; it sets ``func`` (``args.func(args)``
    runs it and returns the exit status)."""
    parser = subparsers.add_parser(
        "serve", help="run a Hub-compatible server (git-backed) for publishing and loading kernels locally",
        description="Run a Hugging Face Hub-compatible HTTP server that stores repositories as git repos under "
                    "--root. Point clients at it with HF_ENDPOINT=<printed URL>; large files travel through Xet "
                    "(huggingface_hub with hf_xet) or the LFS batch API (clients without hf_xet).")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one (default 0)")
    parser.add_argument("--root", type=Path, default=None,
                        help="directory of the repositories (default: a temporary one, deleted on exit)")
    parser.add_argument("--trusted-org", dest="trusted_orgs", action="append", default=[], metavar="ORG",
                        help="organization reported as a trusted kernel publisher (repeatable)")
    parser.add_argument("--lfs-threshold", type=int, default=1024, metavar="BYTES",
                        help="files of this size or more are uploaded as large files (Xet or LFS); -1 inlines "
                             "every file in the commit (default 1024)")
    parser.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"],
                        help="uvicorn log level (default warning)")
    parser.set_defaults(func=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    from .background import serve

    if args.port < 0 or args.port > 65535:
        print(f"hubkernels serve: invalid --port {args.port}: use 0-65535 (0 picks a free port)", file=sys.stderr)
        return 2
    try:
        serve(host=args.host, port=args.port, root=args.root, trusted_orgs=args.trusted_orgs,
              log_level=args.log_level, lfs_threshold=None if args.lfs_threshold < 0 else args.lfs_threshold)
    except OSError as exc:
        print(f"hubkernels serve: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m hubkernels.server [serve] [--host H] [--port N] [--root DIR] [--trusted-org ORG]...``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        argv = argv[1:]
    parser = argparse.ArgumentParser(prog="python -m hubkernels.server")
    sub = parser.add_subparsers(dest="command")
    register_cli(sub)
    args = parser.parse_args(["serve", *argv])
    return args.func(args)
