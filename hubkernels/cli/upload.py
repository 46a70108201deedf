"""`hubkernels upload [PATH] --repo-id ORG/NAME`: publish built variants to a Hub kernel repo (`hubkernels.publish`)."""

from __future__ import annotations

import argparse

NAME = "upload"
HELP = "publish built variants to a Hub kernel repo (branch v<version>)"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("path", nargs="?", default=".", help="kernel root (holds build.toml and build/)")
    p.add_argument("--repo-id", help="ORG/NAME (default: [general.hub] repo-id)")
    p.add_argument("--variant", action="append", dest="variants", help="upload only this variant (repeatable)")
    p.add_argument("--private", action="store_true", help="create the repo private")
    p.add_argument("--no-tag", dest="create_tag", action="store_false", help="do not tag the upload")
    p.add_argument(
        "--no-source",
        dest="source",
        action="store_false",
        help="do not publish the source under source/ (machines no variant fits cannot build it)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..publish import upload

    result = upload(
        args.path,
        repo_id=args.repo_id,
        variants=args.variants,
        private=args.private,
        create_tag=args.create_tag,
        source=args.source,
    )
    state = "uploaded" if result.changed else "unchanged (already published)"
    print(f"{result.repo_id}@{result.branch}: {state} {', '.join(result.variants)}")
    print(f"  commit {result.commit}" + (f", tag {result.tag}" if result.tag else ""))
    if result.wheels:
        print(f"  {len(result.wheels)} wheel(s) under wheels/ (pip install --index-url <hub>/simple ...)")
    if result.deleted:
        print(f"  deleted {len(result.deleted)} stale file(s)")
    print(f"  load it: {load_hint(result.repo_id, result.version)}")
    print(f"  {result.url}")
    return 0


def load_hint(repo_id: str, version: int) -> str:
    """The get_kernel call that loads this upload as printed: with trust_remote_code naming the org unless
    HUBKERNELS_TRUSTED_ORGS trusts it here (a Hub-flagged trusted publisher loads either way)."""
    from .. import settings

    org = repo_id.split("/", 1)[0]
    trust = "" if org in settings.trusted_orgs() else f", trust_remote_code=[{org!r}]"
    return f'hubkernels.get_kernel("{repo_id}", version={version}{trust})'
