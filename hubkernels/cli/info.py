"""`hubkernels info ORG/NAME[@vN|@REV] [--json]`: a Hub kernel's versions and how its variants resolve here."""

from __future__ import annotations

import argparse
import json

from .download import kernel_command

NAME = "info"
HELP = "show a Hub kernel's versions and how its variants resolve here"


def register(sub: argparse._SubParsersAction) -> None:
    p = kernel_command(sub, NAME, HELP, "resolve for this backend (cpu or the machine's)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..fetch import kernel_info, parse_spec
    from ..variants import Accepted

    repo_id, version, revision = parse_spec(args.kernel)
    info = kernel_info(repo_id, version=version, revision=revision, backend=args.backend)
    age, ref, resolution = info.index_age_s, info.ref, info.resolution
    if args.json:
        print(
            json.dumps(
                {
                    "repo_id": repo_id,
                    "versions": {f"v{n}": c for n, c in info.versions.items()},
                    "version_cache_age_s": None if age is None or age == float("inf") else round(age, 1),
                    "version_cache_ttl_s": info.index_ttl_s,
                    "resolved": {"label": ref.label, "commit": ref.commit, "version": ref.version},
                    "chosen": str(resolution.chosen) if resolution.chosen else None,
                    "trace": [
                        {"variant": str(e.variant), "accepted": True}
                        if isinstance(e, Accepted)
                        else {"variant": e.name, "accepted": False, "reason": e.reason}
                        for e in resolution.trace
                    ],
                },
                indent=2,
            )
        )
        return 0
    print(f"{repo_id}")
    shown = "empty" if age is None else "stale" if age == float("inf") else f"{age:.0f} s old"
    print(
        f"  version cache: {shown} (answers warm loads for {info.index_ttl_s:.0f} s, HUBKERNELS_VERSION_TTL); "
        "listed again now"
    )
    for n, commit in info.versions.items():
        print(f"  v{n}  {commit}")
    print(f"\n{ref.label} (commit {ref.commit[:7]}) on this machine:")
    print(resolution.describe())
    return 0 if resolution.chosen is not None else 1
