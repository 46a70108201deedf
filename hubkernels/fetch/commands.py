"""The `download`, `info` and `lock` commands: thin shells over `hubkernels.fetch`."""

from __future__ import annotations

import json

from .. import settings
from ..variants import Accepted
from . import _refs, _resolution, install_kernel, parse_spec
from .cache import RepoState
from .remote import Remote


def register_cli(subparsers) -> None:  # type: ignore[no-untyped-def]
    """Add `download`, `info` and `lock` to the hubkernels CLI."""
    p = subparsers.add_parser("download", help="download and verify a Hub kernel's variant for this machine")
    p.add_argument("kernel", help="org/name, org/name@v<N> or org/name@<revision>")
    p.add_argument("--backend", help="choose the variant for this backend (cpu or the machine's)")
    p.add_argument("--trust-remote-code", action="store_true", help="load even if the publisher is not trusted")
    p.add_argument("--force", action="store_true", help="download again even if cached (repairs a damaged cache)")
    p.add_argument(
        "--build",
        action="store_true",
        default=None,
        help="if no published variant fits this machine, build the published source here",
    )
    p.set_defaults(func=_cmd_download)
    p = subparsers.add_parser("info", help="show a Hub kernel's versions and how its variants resolve here")
    p.add_argument("kernel", help="org/name, org/name@v<N> or org/name@<revision>")
    p.add_argument("--backend", help="resolve for this backend (cpu or the machine's)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_info)
    from .lock import register_cli as register_lock

    register_lock(subparsers)


def _cmd_download(args) -> int:  # type: ignore[no-untyped-def]
    repo_id, version, revision = parse_spec(args.kernel)
    path = install_kernel(
        repo_id,
        version=version,
        revision=revision,
        backend=args.backend,
        trust_remote_code=bool(args.trust_remote_code),
        force_download=args.force,
        build=args.build,
    )
    print(path)
    return 0


def _cmd_info(args) -> int:  # type: ignore[no-untyped-def]
    repo_id, version, revision = parse_spec(args.kernel)
    state, remote = RepoState(repo_id), Remote(repo_id)
    cached = state.refs()
    age = None if cached is None else max(0.0, cached.age()) if cached.checked_at else float("inf")
    versions = _refs(state, remote, max_age=0.0)[0].versions
    ref, resolution = _resolution(repo_id, version, revision, args.backend, None)
    if args.json:
        print(
            json.dumps(
                {
                    "repo_id": repo_id,
                    "versions": {f"v{n}": c for n, c in versions.items()},
                    "version_cache_age_s": None if age is None or age == float("inf") else round(age, 1),
                    "version_cache_ttl_s": settings.version_freshness_s(),
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
    ttl = settings.version_freshness_s()
    shown = "empty" if age is None else "stale" if age == float("inf") else f"{age:.0f} s old"
    print(f"  version cache: {shown} (answers warm loads for {ttl:.0f} s, HUBKERNELS_VERSION_TTL); listed again now")
    for n, commit in versions.items():
        print(f"  v{n}  {commit}")
    print(f"\n{ref.label} (commit {ref.commit[:7]}) on this machine:")
    print(resolution.describe())
    return 0 if resolution.chosen is not None else 1
