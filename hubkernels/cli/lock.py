"""`hubkernels lock ORG/NAME@vN ... [-o kernels.lock]` or `hubkernels lock [DIR] [--project DIR]`: pin Hub kernels to
exact commits and variant digests (`hubkernels.fetch.locking`)."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "lock"
HELP = "pin Hub kernels to exact commits and variant digests in kernels.lock"


def register(sub: argparse._SubParsersAction) -> None:
    from ..fetch import DEFAULT_LOCKFILE

    p = sub.add_parser(NAME, help=HELP)
    p.add_argument(
        "kernels",
        nargs="*",
        metavar="ORG/NAME[@vN|@REV] | DIR",
        help="kernels to lock, or a project directory whose pyproject.toml lists them (default: .)",
    )
    p.add_argument("-o", "--output", default=DEFAULT_LOCKFILE, help="lock file to update when naming kernels")
    p.add_argument("--project", metavar="DIR", help="add the named kernels to DIR/pyproject.toml and lock DIR")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..fetch import DEFAULT_LOCKFILE, lock, lock_project

    targets = list(args.kernels)
    if args.project is not None:
        project: Path | None = Path(args.project)
    elif not targets or (len(targets) == 1 and Path(targets[0]).is_dir()):
        project, targets = Path(targets[0] if targets else "."), []
    else:
        project = None
    if project is not None:
        entries, written = lock_project(project, add=targets), project / DEFAULT_LOCKFILE
    else:
        entries, written = lock(targets, args.output), Path(args.output)
    for entry in entries:
        asked = f"v{entry.version}" if entry.version is not None else entry.revision
        print(f"{entry.repo_id} ({asked}) -> {entry.commit}: {len(entry.variants)} variant(s)")
    print(f"wrote {written}")
    return 0
