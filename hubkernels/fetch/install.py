"""The engine under the loaders: resolve a request to a commit, check trust, choose this machine's variant,
download and verify it (or build it from source), then install its kernel dependencies the same way.

Nothing here imports a kernel; `importer` does that with what `install` returns.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import settings
from ..errors import DigestError, HubkernelsError, UsageError, VariantNotFoundError
from ..layout import check_repo_id, variant_dirs
from ..metadata import Metadata
from ..system import System
from ..variants import Resolution, require, resolve
from .artifact import listing
from .cache import RepoState, Verified
from .download import download_and_verify
from .kernel_deps import Dependency, KernelDependencyError, declared
from .remote import Remote
from .resolve import resolve_ref, variant_names
from .trust import TrustRemoteCode, check_trust

logger = logging.getLogger("hubkernels.fetch")


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
    deps: tuple[Installed, ...] = ()  # its kernel-depends, installed


def resolve_local(
    path: str | Path, backend: str | None = None, system: System | None = None
) -> tuple[Path, Resolution]:
    """Resolve the best variant of a local kernel directory; returns (its directory, the full trace)."""
    base, found = variant_dirs(path)
    resolution = resolve(found, system, backend)
    chosen = require(resolution, str(base))
    return found[str(chosen)], resolution


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
    check_repo_id(repo_id)
    offline = settings.offline()
    if force_download and offline:
        raise UsageError("force_download=True needs the network, but HF_HUB_OFFLINE=1 is set")
    state, remote = RepoState(repo_id, cache_dir), Remote(repo_id)
    ref = resolve_ref(state, remote, version, revision, max_age=max_age)
    for attempt in range(2):
        trusted_by = check_trust(state, remote, ref, trust_remote_code)
        tree = listing(state, remote, ref.commit)  # wheels/ (one artifact per variant), else build/
        names = sorted(locked) if locked is not None else variant_names(state, ref.commit, tree)
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
            held if held is not None else download_and_verify(state, remote, ref, variant, tree, force_download)
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
    how = Options(backend, trust_remote_code, force_download, cache_dir, dict(pins or {}), build)
    return install_dependencies(installed, how)


@dataclass(frozen=True)
class Options:
    """How every kernel of one load is installed: its dependencies as the kernel itself. `pins` ({repo_id: commit},
    from a lock) overrides what a dependent's metadata asks for."""

    backend: str | None = None
    trust_remote_code: TrustRemoteCode = False
    force_download: bool = False
    cache_dir: str | Path | None = None
    pins: Mapping[str, str] = field(default_factory=dict)
    build: bool | None = None


def install_dependencies(installed: Installed, how: Options, chain: tuple[str, ...] = ()) -> Installed:
    """`installed` with its `kernel-depends` installed (and theirs), each as the dependent's metadata asks;
    `chain` is the dependents above it (a cycle is refused)."""
    wanted = declared(Metadata.read(installed.path))
    if not wanted:
        return installed
    chain = (*chain, installed.repo_id)
    for dep in wanted:
        if dep.repo_id in chain:
            raise KernelDependencyError(
                f"cyclic kernel dependency: {' -> '.join((*chain, dep.repo_id))}. "
                "A kernel cannot depend on itself, directly or through others."
            )
    return dataclasses.replace(installed, deps=tuple(install_dependency(dep, how, chain) for dep in wanted))


def install_dependency(dep: Dependency, how: Options, chain: tuple[str, ...] = ()) -> Installed:
    """One kernel dependency installed, with its own: from LOCAL_KERNELS when it names it (as in HF kernels),
    else from the Hub at the commit `how.pins` gives it, else as `dep` asks."""
    local = settings.local_kernels().get(dep.repo_id)
    if local is not None:
        path, resolution = resolve_local(local, how.backend)
        return install_dependencies(Installed(dep.repo_id, "", None, path.name, path, "", resolution, True), how, chain)
    pinned = how.pins.get(dep.repo_id)
    try:
        child = install(
            dep.repo_id,
            version=None if pinned else dep.version,
            revision=pinned or dep.revision,
            backend=how.backend,
            trust_remote_code=how.trust_remote_code,
            force_download=how.force_download,
            cache_dir=how.cache_dir,
            dependencies=False,
            build=how.build,
        )
    except HubkernelsError as e:
        also = " (build=True on the dependent's load builds its dependencies too.)"
        pin = f" (pinned {pinned[:7]})" if pinned else ""
        raise type(e)(
            f"while installing kernel dependency {dep}{pin}: {e}{also if isinstance(e, VariantNotFoundError) else ''}"
        ) from e
    return install_dependencies(child, how, chain)
