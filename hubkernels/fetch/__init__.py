"""Load kernels from the Hub: pick a version, pick this machine's variant, download only it, verify it, import it.

    ltx = hubkernels.get_kernel("hubkernels/ltx-kernels")             # newest v<N> branch (logged, pin it)
    ltx = hubkernels.get_kernel("hubkernels/ltx-kernels", version=1)  # what libraries should write

Verification is on by default: metadata.json must match the Hub's listing, and every file the per-file digest
in metadata.json. A receipt (the hash of each verified file) lets a warm load check content without the Hub: every
file is hashed again once per process (a few hundred microseconds for a small build) and compared with it.

A warm load of a `version` asks the Hub one thing, the branch's current commit (as HF `kernels` does, so a
re-uploaded `v1` is seen at once); everything else, a cached listing and a receipt, is answered from
`<cache>/kernels--org--name/hubkernels/` (see `_local`). A 40-hex `revision` or a lockfile makes no request at
all, and so does a `version` resolved within HUBKERNELS_VERSION_TTL seconds when the user sets one (offline, the
index answers whatever its age): then other ranks and later jobs sharing a node's cache ask the Hub nothing.
A receipt holds while every file keeps the content it
recorded; the Python code runs from sources checked as they are read (or code compiled from them at verification),
never from `__pycache__`. `force_download=True` re-downloads and re-verifies everything.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

from .. import digest as _digest
from .. import settings
from ..errors import DigestError, UsageError, VariantImportError, VariantNotFoundError
from ..layout import check_repo_id, hub_variant_of, ships
from ..load import Verified
from ..metadata import Metadata
from ..variants import Accepted, Rejected, Resolution, require, resolve
from ._artifact import listing
from ._hub import DownloadError, KernelNotFoundError, Remote, UntrustedKernelError
from ._local import Refs, RepoState, TreeEntry, compile_sources, is_commit, version_of
from ._trust import TrustRemoteCode
from ._trust import check_trust as _check_trust
from ._verify import _download_and_verify, _shipped  # noqa: F401  (the tests reach them here)

__all__ = [
    "get_kernel",
    "install_kernel",
    "has_kernel",
    "get_kernel_variants",
    "kernel_versions",
    "Installed",
    "KernelNotFoundError",
    "UntrustedKernelError",
    "DownloadError",
    "register_cli",
]

logger = logging.getLogger("hubkernels.fetch")


@dataclass(frozen=True)
class Ref:
    """A request pinned to a commit: `label` is what was asked for (v1, main, a sha), `version` the v<N> if known."""

    commit: str
    version: int | None
    label: str
    latest: bool = False
    cached: bool = False  # answered from the local index, without asking the Hub


@dataclass(frozen=True)
class Installed:
    """One verified variant in the cache, ready to import."""

    repo_id: str
    commit: str
    version: int | None
    variant: str
    path: Path
    metadata_sha256: str
    resolution: Resolution
    warm: bool  # True when it was already verified (no download; each file re-hashed once per process)
    verified: Verified | None = None  # what the files were verified to be, so the import runs exactly that
    deps: tuple[Installed, ...] = ()  # its kernel-depends, installed (see `deps`)


# -- public API ----------------------------------------------------------------------------------------------


def get_kernel(
    repo_id: str,
    *,
    version: int | None = None,
    revision: str | None = None,
    backend: str | None = None,
    trust_remote_code: TrustRemoteCode = False,
    lockfile: str | Path | None = None,
    force_download: bool = False,
    cache_dir: str | Path | None = None,
    build: bool | None = None,
) -> ModuleType:
    """Download (if needed), verify and import the best variant of a Hub kernel for this machine.

    `version=N` takes branch `v<N>`; `revision=` a branch, tag or commit; neither takes the newest version (and logs
    which, so you can pin it). Version branches are looked up on each online load (or after HUBKERNELS_VERSION_TTL
    seconds, when set). Publishers the Hub flags as trusted load directly; others need
    `trust_remote_code=True`, a list of trusted organizations, or HUBKERNELS_TRUSTED_ORGS. `lockfile=` loads the
    commit recorded by `hubkernels lock` and checks the variant against it. The kernels it `kernel-depends` on
    load first. `build=True` (or HUBKERNELS_BUILD=auto) builds the published source here when no variant fits.
    A variant whose native module does not load here (a symbol this torch lacks) is logged in one line and the next
    one that fits is taken; when none is left, `VariantImportError` says which symbol and how to build instead.
    """
    if lockfile is not None:
        if version is not None or revision is not None:
            raise UsageError("pass lockfile= or version=/revision=, not both: the lock file pins the revision")
        from .locked import load_locked

        return load_locked(
            repo_id,
            lockfile=lockfile,
            backend=backend,
            trust_remote_code=trust_remote_code,
            force_download=force_download,
            cache_dir=cache_dir,
        )
    local = settings.local_kernels().get(repo_id)
    if local is not None:
        from ..load import get_local_kernel

        logger.info("%s: loading the local build at %s (LOCAL_KERNELS)", repo_id, local)
        return get_local_kernel(local, backend, trust_remote_code=trust_remote_code)
    failed: dict[str, str] = {}  # variant -> why it does not load here
    while True:
        try:
            installed = install(
                repo_id,
                version=version,
                revision=revision,
                backend=backend,
                trust_remote_code=trust_remote_code,
                force_download=force_download,
                cache_dir=cache_dir,
                build=build,
                exclude=frozenset(failed),
            )
        except VariantNotFoundError as e:
            if not failed:
                raise
            raise VariantImportError(
                f"{repo_id}: no variant loads on this machine ("
                + "; ".join(f"{v}: {why}" for v, why in failed.items())
                + "). Build it here from its published source with build=True (or HUBKERNELS_BUILD=auto), or ask "
                "the publisher to rebuild: `hubkernels build` checks every symbol against each torch it admits.",
                variant=next(iter(failed)),
                reason=next(iter(failed.values())),
            ) from e
        try:
            return import_installed(installed)
        except VariantImportError as e:
            if installed.variant in failed:  # a build from source that does not load either
                raise
            failed[installed.variant] = e.reason
            logger.warning("%s: %s; trying the next variant that fits this machine", repo_id, e)


def install_kernel(
    repo_id: str,
    *,
    version: int | None = None,
    revision: str | None = None,
    backend: str | None = None,
    trust_remote_code: TrustRemoteCode = False,
    force_download: bool = False,
    cache_dir: str | Path | None = None,
    build: bool | None = None,
) -> Path:
    """Download and verify this machine's variant without importing it; returns its directory in the cache.

    The same trust rules as `get_kernel` apply, since the directory holds code meant to be imported.
    """
    return install(
        repo_id,
        version=version,
        revision=revision,
        backend=backend,
        trust_remote_code=trust_remote_code,
        force_download=force_download,
        cache_dir=cache_dir,
        build=build,
    ).path


def has_kernel(
    repo_id: str,
    *,
    version: int | None = None,
    revision: str | None = None,
    backend: str | None = None,
    cache_dir: str | Path | None = None,
) -> bool:
    """Does the repo have a variant that loads on this machine? (Unknown repos and versions raise.)"""
    return _resolution(repo_id, version, revision, backend, cache_dir)[1].chosen is not None


def get_kernel_variants(
    repo_id: str,
    *,
    version: int | None = None,
    revision: str | None = None,
    backend: str | None = None,
    cache_dir: str | Path | None = None,
) -> list[Accepted | Rejected]:
    """Every variant of the repo with the verdict for this machine: accepted ones best first, then each rejection."""
    return list(_resolution(repo_id, version, revision, backend, cache_dir)[1].trace)


def kernel_versions(repo_id: str, *, cache_dir: str | Path | None = None) -> dict[int, str]:
    """{N: commit} of the repo's `v<N>` branches, asking the Hub (or the local index when offline)."""
    state, remote = RepoState(_check_repo_id(repo_id), cache_dir), Remote(repo_id)
    return _refs(state, remote, max_age=0.0)[0].versions


# -- the pipeline ----------------------------------------------------------------------------------------------


def install(
    repo_id: str,
    *,
    version: int | None = None,
    revision: str | None = None,
    backend: str | None = None,
    trust_remote_code: TrustRemoteCode = False,
    force_download: bool = False,
    cache_dir: str | Path | None = None,
    locked: Mapping[str, str] | None = None,
    max_age: float | None = None,
    pins: Mapping[str, str] | None = None,
    dependencies: bool = True,
    build: bool | None = None,
    exclude: frozenset[str] = frozenset(),
) -> Installed:
    """Resolve, trust-check, choose, download and verify one variant, then its kernel dependencies.

    `locked`: {variant: metadata sha256}; `pins`: {repo_id: commit} for dependencies (both from a lock file);
    `exclude`: variants already found not to load here (the next acceptable one is taken, or the source built).
    """
    _check_repo_id(repo_id)
    offline = settings.offline()
    if force_download and offline:
        raise UsageError("force_download=True needs the network, but HF_HUB_OFFLINE=1 is set")
    state, remote = RepoState(repo_id, cache_dir), Remote(repo_id)
    ref = resolve_ref(state, remote, version, revision, max_age=max_age)
    for attempt in range(2):
        trusted_by = _check_trust(state, remote, ref, trust_remote_code)
        tree = listing(state, remote, ref.commit)  # wheels/ (one artifact per variant), else build/
        names = sorted(locked) if locked is not None else _variant_names(state, ref.commit, tree)
        resolution = resolve([n for n in names if n not in exclude], None, backend)
        if resolution.chosen is not None or not ref.cached or offline or attempt:
            break
        # the commit the local index named has nothing for this machine: the name may have moved since
        fresh = resolve_ref(state, remote, version, revision, max_age=0.0)
        if fresh.commit == ref.commit:
            break
        logger.info(
            "%s: %s moved from %s to %s since it was last listed", repo_id, ref.label, ref.commit[:7], fresh.commit[:7]
        )
        ref = fresh
    where = f"{repo_id}@{ref.label}" + ("" if ref.label == ref.commit else f" (commit {ref.commit[:7]})")
    built = None
    try:
        if resolution.chosen is None and locked is None:  # nothing published fits: build the source, if asked to
            from .source import install_from_source

            built = install_from_source(
                state,
                remote,
                ref.commit,
                resolution,
                backend=backend,
                build=build,
                force=force_download,
                asked=(ref.version, ref.label),
            )
        variant = built.variant if built else str(require(resolution, where))
    except VariantNotFoundError:
        if ref.label != ref.commit:
            state.forget_refs()  # a resolution that led to no load is not kept: the next call lists again
        raise
    verified = None
    if built:
        meta_sha, warm = built.metadata_sha256, built.warm
    else:
        held = None if force_download else state.receipt_holds(ref.commit, variant)
        warm = held is not None
        meta_sha, verified = (
            held if held is not None else _download_and_verify(state, remote, ref, variant, tree, force_download)
        )
    if locked is not None and locked.get(variant) != meta_sha:
        raise DigestError(
            f"{repo_id}@{ref.commit[:7]} variant {variant}: metadata.json (sha256 {meta_sha}) is not the one the "
            f"lock file recorded ({locked.get(variant)}). The files differ from what was locked; re-run "
            f"`hubkernels lock {repo_id}@{ref.commit}` if the change is expected."
        )
    if trusted_by == "publisher" and ref.commit not in (state.trust().get("approved_commits") or []):
        state.save_trust(approve=ref.commit)
    if ref.version is not None:
        state.write_hf_ref(f"v{ref.version}", ref.commit)
    installed = Installed(
        repo_id,
        ref.commit,
        ref.version,
        variant,
        built.path if built else state.variant_dir(ref.commit, variant),
        meta_sha,
        resolution,
        warm,
        verified,
    )
    if not dependencies:
        return installed
    from .deps import install_dependencies

    return install_dependencies(
        installed,
        backend=backend,
        trust_remote_code=trust_remote_code,
        force_download=force_download,
        cache_dir=cache_dir,
        pins=pins,
        build=build,
    )


def import_installed(installed: Installed) -> ModuleType:
    """Import a verified variant under its unique id, its kernel dependencies first (checks GPU capability and
    Python dependencies first)."""
    from .deps import import_with_dependencies

    module = import_with_dependencies(installed)
    logger.info(
        "%s: loaded %s (%s, commit %s) from %s",
        installed.repo_id,
        installed.variant,
        f"v{installed.version}" if installed.version is not None else "pinned revision",
        installed.commit[:7],
        installed.path,
    )
    return module


def _check_repo_id(repo_id: str) -> str:
    return check_repo_id(repo_id)


def _refs(state: RepoState, remote: Remote, max_age: float) -> tuple[Refs, bool]:
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
    refs, listed = _refs(state, remote, ttl)
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


def _tree(state: RepoState, remote: Remote, commit: str) -> dict[str, TreeEntry] | None:
    """The build/ listing of `commit`: cached forever once listed (commits are immutable). None if offline."""
    tree = state.tree(commit)
    if tree is None and not settings.offline():
        tree = remote.build_tree(commit)
        state.save_tree(commit, tree)
    return tree


def _variant_names(state: RepoState, commit: str, tree: dict[str, TreeEntry] | None) -> list[str]:
    if tree is not None:
        return sorted({v for p in tree if (v := hub_variant_of(p))})
    names = state.local_variants(commit)
    if not names and (state.root / "builds" / commit).is_dir():
        return []  # nothing downloaded, but built here from source (see `source`)
    if not names:
        raise KernelNotFoundError(
            f"HF_HUB_OFFLINE=1 and no variant of {state.repo_id}@{commit[:7]} is in the cache ({state.repo_dir}). "
            "Load it once online first."
        )
    return names


def _resolution(
    repo_id: str, version: int | None, revision: str | None, backend: str | None, cache_dir: str | Path | None
) -> tuple[Ref, Resolution]:
    state, remote = RepoState(_check_repo_id(repo_id), cache_dir), Remote(repo_id)
    ref = resolve_ref(state, remote, version, revision)
    return ref, resolve(_variant_names(state, ref.commit, _tree(state, remote, ref.commit)), None, backend)


# -- command line ----------------------------------------------------------------------------------------------


def parse_spec(spec: str) -> tuple[str, int | None, str | None]:
    """`org/name`, `org/name@v2` or `org/name@<revision>` -> (repo_id, version, revision)."""
    repo_id, _, at = spec.partition("@")
    _check_repo_id(repo_id)
    if not at:
        return repo_id, None, None
    n = version_of(at)
    return (repo_id, n, None) if n is not None else (repo_id, None, at)


def register_cli(subparsers) -> None:  # type: ignore[no-untyped-def]
    """Add `download`, `info` and `lock` to the hubkernels CLI (they live in `fetch.commands`)."""
    from .commands import register_cli as register

    register(subparsers)
