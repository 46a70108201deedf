"""Pin a request (`version=N`, `revision=`, or the newest) to a commit, and list the variants that commit has.

A 40-hex revision costs no request; names are answered from the local index while it is fresh
(HUBKERNELS_VERSION_TTL, any age offline), else by one listing of the repo's refs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from .. import settings
from ..errors import UsageError
from ..layout import check_repo_id
from ..variants import Resolution, resolve
from .cache import Refs, RepoState, TreeEntry, is_commit, version_of
from .remote import KernelNotFoundError, Remote

logger = logging.getLogger("hubkernels.fetch")


@dataclass(frozen=True)
class Ref:
    """A request pinned to a commit: `label` is what was asked for (v1, main, a sha), `version` the v<N> if known."""

    commit: str
    version: int | None
    label: str
    latest: bool = False
    cached: bool = False  # answered from the local index, without asking the Hub


def parse_spec(spec: str) -> tuple[str, int | None, str | None]:
    """`org/name`, `org/name@v2` or `org/name@<revision>` -> (repo_id, version, revision)."""
    repo_id, _, at = spec.partition("@")
    check_repo_id(repo_id)
    if not at:
        return repo_id, None, None
    n = version_of(at)
    return (repo_id, n, None) if n is not None else (repo_id, None, at)


def list_refs(state: RepoState, remote: Remote, max_age: float) -> tuple[Refs, bool]:
    """The repo's refs and whether they were just listed: the local index if younger than `max_age` (any age
    offline), else the Hub's answer."""
    refs = state.refs()
    if settings.offline():
        if refs is not None:
            return refs, False
        hf = state.hf_refs()  # refs/<branch> written by huggingface_hub (e.g. an HF `kernels` download by name)
        if hf:
            return Refs(hf, {}, 0.0), False
        raise KernelNotFoundError(
            f"HF_HUB_OFFLINE=1 and {state.repo_id} has never been resolved on this machine (nothing under "
            f"{state.repo_dir}). Load it once online, or pass the 40-hex revision= of a cached commit."
        )
    if refs is not None and refs.age() < max_age:
        return refs, False
    return state.save_refs(*remote.refs()), True


def resolve_ref(
    state: RepoState, remote: Remote, version: int | None, revision: str | None, *, max_age: float | None = None
) -> Ref:
    """Pin the request to a commit. A 40-hex revision costs nothing; names use the index while it is fresh."""
    if version is not None and revision is not None:
        raise UsageError("pass version= or revision=, not both")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 0):
        raise UsageError(f"version must be a whole number N (the v<N> branch), got {version!r}")
    if revision is not None and is_commit(revision):
        return Ref(revision, None, revision)
    ttl = settings.version_freshness_s() if max_age is None else max_age
    refs, listed = list_refs(state, remote, ttl)
    ref = _pick(refs, version, revision)
    if ref is None and not listed and not settings.offline():
        refs, listed = state.save_refs(*remote.refs()), True  # the index may predate what was asked: ask once
        ref = _pick(refs, version, revision)
    if ref is not None and not listed:
        ref = replace(ref, cached=True)
    if ref is None and revision is not None and not settings.offline():
        commit = remote.commit_of(revision)  # a commit prefix, or a ref the listing does not show
        if commit:
            ref = Ref(commit, None, revision)
    if ref is None:
        raise KernelNotFoundError(_missing(state.repo_id, refs, version, revision))
    if ref.latest:
        logger.info(
            "%s: no version given, using the newest, v%d (commit %s). Pin it with get_kernel(%r, version=%d) "
            "or revision=%r.",
            state.repo_id,
            ref.version,
            ref.commit[:7],
            state.repo_id,
            ref.version,
            ref.commit,
        )
    elif version is not None and refs.versions and max(refs.versions) > version:
        logger.info("%s: using v%d; a newer version, v%d, exists.", state.repo_id, version, max(refs.versions))
    return ref


def _pick(refs: Refs, version: int | None, revision: str | None) -> Ref | None:
    if version is not None:
        commit = refs.versions.get(version)
        return Ref(commit, version, f"v{version}") if commit else None
    if revision is not None:
        commit = refs.branches.get(revision) or refs.tags.get(revision)
        return Ref(commit, version_of(revision) if revision in refs.branches else None, revision) if commit else None
    if not refs.versions:
        return None
    newest = max(refs.versions)
    return Ref(refs.versions[newest], newest, f"v{newest}", latest=True)


def _missing(repo_id: str, refs: Refs, version: int | None, revision: str | None) -> str:
    versions = ", ".join(f"v{n}" for n in refs.versions) or "none"
    offline = " (offline: only what was resolved before is known)" if settings.offline() else ""
    if version is not None:
        hint = f" Pass version={max(refs.versions)} for the newest." if refs.versions else ""
        return f"{repo_id} has no version {version}{offline}. Available versions: {versions}.{hint}"
    if revision is not None:
        branches = ", ".join(sorted(refs.branches)) or "none"
        tags = ", ".join(sorted(refs.tags)) or "none"
        return (
            f"{repo_id} has no revision {revision!r}{offline}. Versions: {versions}; branches: {branches}; "
            f"tags: {tags}."
        )
    branches = ", ".join(sorted(refs.branches)) or "none"
    return (
        f"{repo_id} has no v<N> version branches{offline} (branches: {branches}). Publish with "
        "`hubkernels upload`, or pass revision= to load another branch."
    )


def build_tree(state: RepoState, remote: Remote, commit: str) -> dict[str, TreeEntry] | None:
    """The build/ listing of `commit`: cached forever once listed (commits are immutable). None if offline."""
    tree = state.tree(commit)
    if tree is None and not settings.offline():
        tree = remote.build_tree(commit)
        state.save_tree(commit, tree)
    return tree


def variant_names(state: RepoState, commit: str, tree: dict[str, TreeEntry] | None) -> list[str]:
    """The variants of `commit`: from its listing, else (offline) those in the cache."""
    if tree is not None:
        return sorted({p.split("/")[1] for p in tree if p.count("/") >= 2})
    names = state.local_variants(commit)
    if not names and (state.root / "builds" / commit).is_dir():
        return []  # nothing downloaded, but built here from source (see `source`)
    if not names:
        raise KernelNotFoundError(
            f"HF_HUB_OFFLINE=1 and no variant of {state.repo_id}@{commit[:7]} is in the cache ({state.repo_dir}). "
            "Load it once online first."
        )
    return names


def resolution(
    repo_id: str, version: int | None, revision: str | None, backend: str | None, cache_dir: str | Path | None
) -> tuple[Ref, Resolution]:
    """The commit the request names and how its variants resolve on this machine (nothing is downloaded)."""
    state, remote = RepoState(check_repo_id(repo_id), cache_dir), Remote(repo_id)
    ref = resolve_ref(state, remote, version, revision)
    return ref, resolve(variant_names(state, ref.commit, build_tree(state, remote, ref.commit)), None, backend)
