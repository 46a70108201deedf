"""Every public loader, in one place: from the Hub (`get_kernel`, `install_kernel`, `has_kernel`,
`get_kernel_variants`, `kernel_versions`, `kernel_info`), from a lock file (`load_locked`, `install_locked`) and
from a local build (`get_local_kernel`). Each composes `install` (the engine) and `importer`; `hubkernels.fetch`
re-exports them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from .. import settings
from ..errors import UsageError, VariantImportError, VariantNotFoundError
from ..layout import check_repo_id
from ..metadata import Metadata
from ..variants import Accepted, Rejected, Resolution
from .cache import RepoState
from .importer import import_variant
from .install import Installed, Options, install, install_dependency, resolve_local
from .kernel_deps import declared
from .lockfile import DEFAULT_LOCKFILE, lock_entry, read_lock
from .remote import Remote
from .resolve import Ref, list_refs, resolution
from .trust import TrustRemoteCode

logger = logging.getLogger("hubkernels.fetch")


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
            return _import_installed(installed)
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
    return resolution(repo_id, version, revision, backend, cache_dir)[1].chosen is not None


def get_kernel_variants(
    repo_id: str,
    *,
    version: int | None = None,
    revision: str | None = None,
    backend: str | None = None,
    cache_dir: str | Path | None = None,
) -> list[Accepted | Rejected]:
    """Every variant of the repo with the verdict for this machine: accepted ones best first, then each rejection."""
    return list(resolution(repo_id, version, revision, backend, cache_dir)[1].trace)


def kernel_versions(repo_id: str, *, cache_dir: str | Path | None = None) -> dict[int, str]:
    """{N: commit} of the repo's `v<N>` branches, asking the Hub (or the local index when offline)."""
    state, remote = RepoState(check_repo_id(repo_id), cache_dir), Remote(repo_id)
    return list_refs(state, remote, max_age=0.0)[0].versions


@dataclass(frozen=True)
class KernelInfo:
    """What `hubkernels info` shows: the repo's versions, the version index's age, and how the request resolves."""

    repo_id: str
    versions: dict[int, str]
    index_age_s: float | None  # None: never listed here; inf: marked stale
    index_ttl_s: float
    ref: Ref
    resolution: Resolution


def kernel_info(
    repo_id: str, *, version: int | None = None, revision: str | None = None, backend: str | None = None
) -> KernelInfo:
    """The repo's versions (listed on the Hub now) and how the request's variants resolve on this machine."""
    state, remote = RepoState(check_repo_id(repo_id)), Remote(repo_id)
    cached = state.refs()
    age = None if cached is None else max(0.0, cached.age()) if cached.checked_at else float("inf")
    versions = list_refs(state, remote, max_age=0.0)[0].versions
    ref, resolved = resolution(repo_id, version, revision, backend, None)
    return KernelInfo(repo_id, versions, age, settings.version_freshness_s(), ref, resolved)


def get_local_kernel(
    repo_path: str | Path,
    backend: str | None = None,
    *,
    verify: bool = False,
    trust_remote_code: TrustRemoteCode = False,
) -> ModuleType:
    """Import the best variant of a locally built kernel (`hubkernels build` output or a variant dir).

    `verify=True` checks every file against the digest in metadata.json before importing. Its `kernel-depends`
    come from the Hub (or LOCAL_KERNELS), under `trust_remote_code` as in `get_kernel`.
    """
    variant_dir, resolved = resolve_local(repo_path, backend)
    logger.info("loading %s from %s", resolved.chosen, variant_dir)
    how = Options(backend=backend, trust_remote_code=trust_remote_code)
    deps = {
        dep.repo_id: _import_installed(install_dependency(dep, how)) for dep in declared(Metadata.read(variant_dir))
    }
    return import_variant(variant_dir, verify=verify, deps=deps)


def install_locked(
    repo_id: str,
    *,
    lockfile: str | Path = DEFAULT_LOCKFILE,
    backend: str | None = None,
    trust_remote_code: TrustRemoteCode = False,
    force_download: bool = False,
    cache_dir: str | Path | None = None,
) -> Path:
    """Download and verify the locked commit's variant for this machine; returns its directory."""
    return _install_locked(repo_id, lockfile, backend, trust_remote_code, force_download, cache_dir).path


def load_locked(
    repo_id: str,
    *,
    lockfile: str | Path = DEFAULT_LOCKFILE,
    backend: str | None = None,
    trust_remote_code: TrustRemoteCode = False,
    force_download: bool = False,
    cache_dir: str | Path | None = None,
) -> ModuleType:
    """Import the locked commit of `repo_id`; refuses a variant whose metadata.json differs from the locked one."""
    return _import_installed(_install_locked(repo_id, lockfile, backend, trust_remote_code, force_download, cache_dir))


def _install_locked(
    repo_id: str,
    lockfile: str | Path,
    backend: str | None,
    trust_remote_code: TrustRemoteCode,
    force_download: bool,
    cache_dir: str | Path | None,
) -> Installed:
    entry = lock_entry(lockfile, repo_id)
    if not entry.variants:
        logger.info(
            "%s: %s pins commit %s without variant digests (written by `kernels lock`?); loading that commit "
            "with the Hub's listing as the reference",
            repo_id,
            lockfile,
            entry.commit[:7],
        )
    locked = {n: v.metadata_sha256 for n, v in entry.variants.items()} if entry.variants else None
    pins = {e.repo_id: e.commit for e in read_lock(lockfile).values()}  # a locked dependent pins its deps too
    return install(
        repo_id,
        revision=entry.commit,
        backend=backend,
        trust_remote_code=trust_remote_code,
        force_download=force_download,
        cache_dir=cache_dir,
        locked=locked,
        pins=pins,
    )


def _import_installed(installed: Installed) -> ModuleType:
    """Import a variant installed from the Hub, its kernel dependencies first (depth first), each under its id."""
    deps = {dep.repo_id: _import_installed(dep) for dep in installed.deps}
    module = import_variant(installed.path, verify=installed.verified is None, verified=installed.verified, deps=deps)
    logger.info(
        "%s: loaded %s (%s, commit %s) from %s",
        installed.repo_id,
        installed.variant,
        f"v{installed.version}" if installed.version is not None else "pinned revision",
        installed.commit[:7] or "local",
        installed.path,
    )
    return module
