"""Load kernels from the Hub: pick a version, pick this machine's variant, download only it, verify it, import it.

    ltx = hubkernels.get_kernel("hubkernels/ltx-kernels")             # newest v<N> branch (logged, pin it)
    ltx = hubkernels.get_kernel("hubkernels/ltx-kernels", version=1)  # what libraries should write

Verification is on by default: metadata.json must match the Hub's listing, and every file the per-file digest
in metadata.json. A receipt (size, mtime_ns and inode of each verified file) lets later loads skip the hashing.

The warm path makes no request at all: a 40-hex `revision`, or a `version` resolved within
HUBKERNELS_VERSION_TTL seconds (default 600), plus a cached listing and a receipt, are all answered from
`<cache>/kernels--org--name/hubkernels/` (see `_local`). Once one process on a node has loaded a kernel, other
ranks and later jobs sharing its cache ask the Hub nothing. A receipt is trusted while every file keeps its
size, mtime and inode; `force_download=True` re-downloads and re-verifies everything.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Union

from .. import digest as _digest
from .. import settings
from ..errors import DigestError, UsageError, VariantNotFoundError
from ..layout import check_repo_id, ships
from ..metadata import Metadata
from ..variants import Accepted, Rejected, Resolution, require, resolve
from ._hub import DownloadError, KernelNotFoundError, Remote, UntrustedKernelError, endpoint
from ._local import RepoState, Refs, TreeEntry, is_commit, version_of

__all__ = [
    "get_kernel", "install_kernel", "has_kernel", "get_kernel_variants", "kernel_versions", "Installed",
    "KernelNotFoundError", "UntrustedKernelError", "DownloadError", "register_cli",
]

logger = logging.getLogger("hubkernels.fetch")

#: What `trust_remote_code` accepts: True, False, or the organizations (or repo ids) to trust.
TrustRemoteCode = Union[bool, Collection[str]]


@dataclass(frozen=True)
class Ref:
    """A request pinned to a commit: `label` is what was asked for (v1, main, a sha), `version` the v<N> if known."""

    commit: str
    version: int | None
    label: str
    latest: bool = False


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
    warm: bool  # True when it was already verified (no download, no hashing)


# -- public API ----------------------------------------------------------------------------------------------


def get_kernel(repo_id: str, *, version: int | None = None, revision: str | None = None, backend: str | None = None,
               trust_remote_code: TrustRemoteCode = False, lockfile: str | Path | None = None,
               force_download: bool = False, cache_dir: str | Path | None = None) -> ModuleType:
    """Download (if needed), verify and import the best variant of a Hub kernel for this machine.

    `version=N` takes branch `v<N>`; `revision=` a branch, tag or commit; neither takes the newest version (and logs
    which, so you can pin it). Version branches are looked up again after HUBKERNELS_VERSION_TTL seconds. Publishers the Hub flags as trusted load directly; others need
    `trust_remote_code=True`, a list of trusted organizations, or HUBKERNELS_TRUSTED_ORGS. `lockfile=` loads the
    commit recorded by `hubkernels lock` and checks the variant against it.
    """
    if lockfile is not None:
        if version is not None or revision is not None:
            raise UsageError("pass lockfile= or version=/revision=, not both: the lock file pins the revision")
        from ..lock import load_locked

        return load_locked(repo_id, lockfile=lockfile, backend=backend, trust_remote_code=trust_remote_code,
                           force_download=force_download, cache_dir=cache_dir)
    local = settings.local_kernels().get(repo_id)
    if local is not None:
        from ..load import get_local_kernel

        logger.info("%s: loading the local build at %s (LOCAL_KERNELS)", repo_id, local)
        return get_local_kernel(local, backend)
    installed = install(repo_id, version=version, revision=revision, backend=backend,
                        trust_remote_code=trust_remote_code, force_download=force_download, cache_dir=cache_dir)
    return import_installed(installed)


def install_kernel(repo_id: str, *, version: int | None = None, revision: str | None = None,
                   backend: str | None = None, trust_remote_code: TrustRemoteCode = False,
                   force_download: bool = False, cache_dir: str | Path | None = None) -> Path:
    """Download and verify this machine's variant without importing it; returns its directory in the cache.

    The same trust rules as `get_kernel` apply, since the directory holds code meant to be imported.
    """
    return install(repo_id, version=version, revision=revision, backend=backend, trust_remote_code=trust_remote_code,
                   force_download=force_download, cache_dir=cache_dir).path


def has_kernel(repo_id: str, *, version: int | None = None, revision: str | None = None, backend: str | None = None,
               cache_dir: str | Path | None = None) -> bool:
    """Does the repo have a variant that loads on this machine? (Unknown repos and versions raise.)"""
    return _resolution(repo_id, version, revision, backend, cache_dir)[1].chosen is not None


def get_kernel_variants(repo_id: str, *, version: int | None = None, revision: str | None = None,
                        backend: str | None = None, cache_dir: str | Path | None = None) -> list[Accepted | Rejected]:
    """Every variant of the repo with the verdict for this machine: accepted ones best first, then each rejection."""
    return list(_resolution(repo_id, version, revision, backend, cache_dir)[1].trace)


def kernel_versions(repo_id: str, *, cache_dir: str | Path | None = None) -> dict[int, str]:
    """{N: commit} of the repo's `v<N>` branches, asking the Hub (or the local index when offline)."""
    state, remote = RepoState(_check_repo_id(repo_id), cache_dir), Remote(repo_id)
    return _refs(state, remote, max_age=0.0)[0].versions


# -- the pipeline ----------------------------------------------------------------------------------------------


def install(repo_id: str, *, version: int | None = None, revision: str | None = None, backend: str | None = None,
            trust_remote_code: TrustRemoteCode = False, force_download: bool = False,
            cache_dir: str | Path | None = None, locked: Mapping[str, str] | None = None,
            max_age: float | None = None) -> Installed:
    """Resolve, trust-check, choose, download and verify one variant. `locked`: {variant: metadata sha256}."""
    _check_repo_id(repo_id)
    offline = settings.offline()
    if force_download and offline:
        raise UsageError("force_download=True needs the network, but HF_HUB_OFFLINE=1 is set")
    state, remote = RepoState(repo_id, cache_dir), Remote(repo_id)
    ref = resolve_ref(state, remote, version, revision, max_age=max_age)
    trusted_by = _check_trust(state, remote, ref, trust_remote_code)
    tree = _tree(state, remote, ref.commit)
    names = sorted(locked) if locked is not None else _variant_names(state, ref.commit, tree)
    resolution = resolve(names, None, backend)
    where = f"{repo_id}@{ref.label}" + ("" if ref.label == ref.commit else f" (commit {ref.commit[:7]})")
    variant = str(require(resolution, where))
    meta_sha = None if force_download else state.receipt_holds(ref.commit, variant)
    warm = meta_sha is not None
    if meta_sha is None:
        meta_sha = _download_and_verify(state, remote, ref, variant, tree, force_download)
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
    return Installed(repo_id, ref.commit, ref.version, variant, state.variant_dir(ref.commit, variant), meta_sha,
                     resolution, warm)


def import_installed(installed: Installed) -> ModuleType:
    """Import a verified variant under its unique id (checks GPU capability and Python dependencies first)."""
    from ..load import import_variant

    module = import_variant(installed.path, verify=False)
    logger.info("%s: loaded %s (%s, commit %s) from %s", installed.repo_id, installed.variant,
                f"v{installed.version}" if installed.version is not None else "pinned revision",
                installed.commit[:7], installed.path)
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


def resolve_ref(state: RepoState, remote: Remote, version: int | None, revision: str | None, *,
                max_age: float | None = None) -> Ref:
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
        refs = state.save_refs(*remote.refs())  # the index may predate what was asked for: ask the Hub once
        ref = _pick(refs, version, revision)
    if ref is None and revision is not None and not settings.offline():
        commit = remote.commit_of(revision)  # a commit prefix, or a ref the listing does not show
        if commit:
            ref = Ref(commit, None, revision)
    if ref is None:
        raise KernelNotFoundError(_missing(state.repo_id, refs, version, revision))
    if ref.latest:
        logger.info("%s: no version given, using the newest, v%d (commit %s). Pin it with get_kernel(%r, version=%d) "
                    "or revision=%r.", state.repo_id, ref.version, ref.commit[:7], state.repo_id, ref.version,
                    ref.commit)
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
        return (f"{repo_id} has no revision {revision!r}{offline}. Versions: {versions}; branches: {branches}; "
                f"tags: {tags}.")
    branches = ", ".join(sorted(refs.branches)) or "none"
    return (f"{repo_id} has no v<N> version branches{offline} (branches: {branches}). Publish with "
            "`hubkernels upload`, or pass revision= to load another branch.")


def _check_trust(state: RepoState, remote: Remote, ref: Ref, trust_remote_code: TrustRemoteCode) -> str:
    """Why this kernel may run here: an explicit opt-in, or the Hub's trusted-publisher flag (else raise)."""
    repo_id = state.repo_id
    org = repo_id.split("/", 1)[0]
    if trust_remote_code is True:
        return "trust_remote_code"
    if trust_remote_code is not False and trust_remote_code is not None:
        if isinstance(trust_remote_code, str) or not isinstance(trust_remote_code, Collection):
            raise UsageError("trust_remote_code must be True, False, or a list of organizations such as "
                             f"[{org!r}], got {trust_remote_code!r}")
        if org in trust_remote_code or repo_id in trust_remote_code:
            return "allow-list"
    if org in settings.trusted_orgs():
        return "HUBKERNELS_TRUSTED_ORGS"
    record = state.trust()
    if ref.commit in (record.get("approved_commits") or []):
        return "publisher"  # this exact commit was loaded while its publisher was trusted; commits are immutable
    age = time.time() - float(record.get("checked_at") or 0.0)
    if record.get("publisher_trusted") is True and (settings.offline() or age < settings.version_freshness_s()):
        trusted = True  # a refusal is never cached: an org the Hub starts trusting loads on the next call
    elif settings.offline():
        raise UntrustedKernelError(
            f"HF_HUB_OFFLINE=1, so whether {org!r} is a trusted kernel publisher cannot be checked. Load "
            f"{repo_id} once online, or opt in: trust_remote_code=[{org!r}] or HUBKERNELS_TRUSTED_ORGS={org}."
        )
    else:
        trusted = remote.publisher_trusted(org)
        state.save_trust(publisher_trusted=trusted)
    if trusted:
        return "publisher"
    raise UntrustedKernelError(
        f"{repo_id} is published by {org!r}, which {endpoint()} does not flag as a trusted kernel publisher, and "
        f"loading a kernel runs its code in this process. If you trust {org}, pass trust_remote_code=[{org!r}] "
        f"(or trust_remote_code=True), or set HUBKERNELS_TRUSTED_ORGS={org}."
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
        return sorted({p.split("/")[1] for p in tree if p.count("/") >= 2})
    names = state.local_variants(commit)
    if not names:
        raise KernelNotFoundError(
            f"HF_HUB_OFFLINE=1 and no variant of {state.repo_id}@{commit[:7]} is in the cache ({state.repo_dir}). "
            "Load it once online first."
        )
    return names


def _resolution(repo_id: str, version: int | None, revision: str | None, backend: str | None,
                cache_dir: str | Path | None) -> tuple[Ref, Resolution]:
    state, remote = RepoState(_check_repo_id(repo_id), cache_dir), Remote(repo_id)
    ref = resolve_ref(state, remote, version, revision)
    return ref, resolve(_variant_names(state, ref.commit, _tree(state, remote, ref.commit)), None, backend)


def _shipped(path: str) -> bool:
    return ships(path)


def _download_and_verify(state: RepoState, remote: Remote, ref: Ref, variant: str,
                         tree: dict[str, TreeEntry] | None, force: bool) -> str:
    """Fetch what is missing of the variant, verify all of it, write the receipt; returns metadata's sha256."""
    vdir = state.variant_dir(ref.commit, variant)
    prefix = f"build/{variant}/"
    if tree is not None:
        wanted = {p: e for p, e in tree.items() if p.startswith(prefix) and _shipped(p)}
        if prefix + "metadata.json" not in wanted:
            raise VariantNotFoundError(f"{state.repo_id}@{ref.commit[:7]}: build/{variant} has no metadata.json, "
                                       "so it is not a loadable variant. Ask the publisher to re-upload it.")
        missing = [p for p, e in wanted.items()
                   if force or not _has_size(state.variant_dir(ref.commit, variant) / p[len(prefix):], e.size)]
        if missing:
            remote.download(ref.commit, sorted(missing), state.cache, force=force,
                            label=f"{state.repo_id} {variant}")
    elif not (vdir / "metadata.json").is_file():
        raise KernelNotFoundError(f"HF_HUB_OFFLINE=1 and {vdir} is not in the cache. Load it once online first.")
    return _verify(state, ref, variant, tree)


def _has_size(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


def _verify(state: RepoState, ref: Ref, variant: str, tree: dict[str, TreeEntry] | None) -> str:
    vdir = state.variant_dir(ref.commit, variant)
    repair = (f"Repair it with get_kernel({state.repo_id!r}, revision={ref.commit!r}, force_download=True) "
              f"(CLI: `hubkernels download {state.repo_id}@{ref.commit} --force`), or delete {state.repo_dir}.")
    state.drop_receipt(ref.commit, variant)
    prefix = f"build/{variant}/"
    try:
        raw = (vdir / "metadata.json").read_bytes()
    except OSError as e:
        raise DigestError(f"{vdir}/metadata.json cannot be read ({e}). {repair}") from None
    meta_sha = hashlib.sha256(raw).hexdigest()
    entry = tree.get(prefix + "metadata.json") if tree is not None else None
    if entry is not None and not entry.matches(raw):
        raise DigestError(f"{vdir}/metadata.json differs from the one the Hub lists for commit {ref.commit[:7]}. "
                          f"{repair}")
    try:
        metadata = Metadata.from_dict(json.loads(raw))
    except ValueError as e:
        raise DigestError(f"{vdir}/metadata.json is not valid metadata ({e}). {repair}") from None
    if metadata.digest:
        problems = _digest.violations(vdir, metadata.digest)
    elif tree is not None:
        logger.warning("%s %s: metadata.json has no digest; checking the files against the Hub's listing instead",
                       state.repo_id, variant)
        problems = _tree_violations(vdir, {p[len(prefix):]: e for p, e in tree.items()
                                           if p.startswith(prefix) and _shipped(p)})
    else:
        problems = ["metadata.json has no digest, and offline there is no Hub listing to check the files against"]
    if problems:
        raise DigestError(f"{vdir} does not match what was published; refusing to load it:\n  - "
                          + "\n  - ".join(problems) + f"\n{repair}")
    state.save_receipt(ref.commit, variant, meta_sha)
    return meta_sha


def _tree_violations(vdir: Path, expected: dict[str, TreeEntry]) -> list[str]:
    from ._local import variant_files

    actual = dict(variant_files(vdir))
    problems = [f"missing file {p}" for p in sorted(set(expected) - set(actual))]
    problems += [f"unexpected file {p}" for p in sorted(set(actual) - set(expected))]
    problems += [f"{p} has been modified (hash mismatch)" for p in sorted(set(expected) & set(actual))
                 if not expected[p].matches(actual[p].read_bytes())]
    return problems


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
    """Add `download`, `info` and `lock` to the hubkernels CLI."""
    p = subparsers.add_parser("download", help="download and verify a Hub kernel's variant for this machine")
    p.add_argument("kernel", help="org/name, org/name@v<N> or org/name@<revision>")
    p.add_argument("--backend", help="choose the variant for this backend (cpu or the machine's)")
    p.add_argument("--trust-remote-code", action="store_true", help="load even if the publisher is not trusted")
    p.add_argument("--force", action="store_true", help="download again even if cached (repairs a damaged cache)")
    p.set_defaults(func=_cmd_download)
    p = subparsers.add_parser("info", help="show a Hub kernel's versions and how its variants resolve here")
    p.add_argument("kernel", help="org/name, org/name@v<N> or org/name@<revision>")
    p.add_argument("--backend", help="resolve for this backend (cpu or the machine's)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_info)
    from ..lock import register_cli as register_lock

    register_lock(subparsers)


def _cmd_download(args) -> int:  # type: ignore[no-untyped-def]
    repo_id, version, revision = parse_spec(args.kernel)
    path = install_kernel(repo_id, version=version, revision=revision, backend=args.backend,
                          trust_remote_code=bool(args.trust_remote_code), force_download=args.force)
    print(path)
    return 0


def _cmd_info(args) -> int:  # type: ignore[no-untyped-def]
    repo_id, version, revision = parse_spec(args.kernel)
    state, remote = RepoState(repo_id), Remote(repo_id)
    versions = _refs(state, remote, max_age=0.0)[0].versions
    ref, resolution = _resolution(repo_id, version, revision, args.backend, None)
    if args.json:
        print(json.dumps({
            "repo_id": repo_id, "versions": {f"v{n}": c for n, c in versions.items()},
            "resolved": {"label": ref.label, "commit": ref.commit, "version": ref.version},
            "chosen": str(resolution.chosen) if resolution.chosen else None,
            "trace": [{"variant": str(e.variant), "accepted": True} if isinstance(e, Accepted)
                      else {"variant": e.name, "accepted": False, "reason": e.reason} for e in resolution.trace],
        }, indent=2))
        return 0
    print(f"{repo_id}")
    for n, commit in versions.items():
        print(f"  v{n}  {commit}")
    print(f"\n{ref.label} (commit {ref.commit[:7]}) on this machine:")
    print(resolution.describe())
    return 0 if resolution.chosen is not None else 1

