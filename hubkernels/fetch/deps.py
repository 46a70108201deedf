"""Kernel dependencies: `kernel-depends` of a variant's metadata.json, resolved at load time as HF `kernels` does.

A variant names the kernels it needs (`{"repo-id": "org/name", "version": N}` or `"revision": ...`). Loading it
installs each dependency first (same trust policy, backend and cache; recursively, refusing cycles), imports
them, then imports the dependent with them on hand: its `__init__` calls `get_kernel_dep("org/name")` while it
is being imported. HF `kernels`' own `kernels.get_kernel_dep` works under this loader too, and ours under
theirs, so one kernel source loads under both. Dependencies of a locked kernel are pinned by the lock (`pins`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from .. import settings
from ..errors import HubkernelsError, VariantNotFoundError
from ..metadata import Metadata
from .kernel_deps import KernelDependencyError, get_kernel_dep, providing

if TYPE_CHECKING:
    from . import Installed, TrustRemoteCode

__all__ = [
    "Dependency",
    "KernelDependencyError",
    "dependencies",
    "get_kernel_dep",
    "providing",
    "install_dependencies",
    "import_with_dependencies",
    "local_dependencies",
]


@dataclass(frozen=True)
class Dependency:
    """One `kernel-depends` entry: another Hub kernel, by major `version` or exact `revision`."""

    repo_id: str
    version: int | None = None
    revision: str | None = None

    def __str__(self) -> str:
        at = f"v{self.version}" if self.version is not None else self.revision
        return f"{self.repo_id}@{at}" if at else self.repo_id


def dependencies(metadata: Metadata) -> list[Dependency]:
    """The `kernel-depends` entries of a variant's metadata, checked."""
    out = []
    for i, entry in enumerate(metadata.kernel_depends, 1):
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("repo-id"), str)
            or ("version" in entry) == ("revision" in entry)
        ):
            raise KernelDependencyError(
                f"{metadata.name} ({metadata.id}): kernel-depends entry {i} is {entry!r}; each entry needs repo-id "
                "and exactly one of version or revision. Ask the publisher to rebuild it."
            )
        version = entry.get("version")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise KernelDependencyError(
                f"{metadata.name}: kernel-depends entry {i} has version {version!r}, "
                "not a whole number. Ask the publisher to rebuild it."
            )
        out.append(Dependency(entry["repo-id"], version, entry.get("revision")))
    return out


def install_dependencies(
    installed: Installed,
    *,
    backend: str | None,
    trust_remote_code: TrustRemoteCode,
    force_download: bool,
    cache_dir: str | Path | None,
    pins: Mapping[str, str] | None = None,
    build: bool | None = None,
    _chain: tuple[str, ...] = (),
) -> Installed:
    """`installed` with its dependencies installed (and theirs), each as the dependent's metadata asks.

    `pins` ({repo_id: commit}, from a lock) overrides what the metadata asks for.
    """
    wanted = dependencies(Metadata.read(installed.path))
    if not wanted:
        return installed
    chain = (*_chain, installed.repo_id)
    found = []
    for dep in wanted:
        if dep.repo_id in chain:
            raise KernelDependencyError(
                f"cyclic kernel dependency: {' -> '.join((*chain, dep.repo_id))}. "
                "A kernel cannot depend on itself, directly or through others."
            )
        child = _install_one(
            dep,
            backend=backend,
            trust_remote_code=trust_remote_code,
            force_download=force_download,
            cache_dir=cache_dir,
            pins=pins or {},
            build=build,
        )
        found.append(
            install_dependencies(
                child,
                backend=backend,
                trust_remote_code=trust_remote_code,
                force_download=force_download,
                cache_dir=cache_dir,
                pins=pins,
                build=build,
                _chain=chain,
            )
        )
    return dataclasses.replace(installed, deps=tuple(found))


def local_dependencies(
    variant_dir: str | Path, *, backend: str | None = None, trust_remote_code: TrustRemoteCode = False
) -> dict[str, ModuleType]:
    """{repo_id: module} of the kernel-depends of a local variant, installed from the Hub (or LOCAL_KERNELS)."""
    meta = Metadata.read(variant_dir)
    out = {}
    for dep in dependencies(meta):
        child = _install_one(
            dep,
            backend=backend,
            trust_remote_code=trust_remote_code,
            force_download=False,
            cache_dir=None,
            pins={},
            build=None,
        )
        child = install_dependencies(
            child, backend=backend, trust_remote_code=trust_remote_code, force_download=False, cache_dir=None
        )
        out[dep.repo_id] = import_with_dependencies(child)
    return out


def import_with_dependencies(installed: Installed) -> ModuleType:
    """Import the dependencies (depth first), then the variant with them available to `get_kernel_dep`."""
    from .importer import import_variant

    modules = {dep.repo_id: import_with_dependencies(dep) for dep in installed.deps}
    return import_variant(installed.path, verify=installed.verified is None, verified=installed.verified, deps=modules)


# -- helpers ---------------------------------------------------------------------------------------------------


def _install_one(
    dep: Dependency,
    *,
    backend: str | None,
    trust_remote_code: TrustRemoteCode,
    force_download: bool,
    cache_dir: str | Path | None,
    pins: Mapping[str, str],
    build: bool | None,
) -> Installed:
    from . import Installed, install

    local = settings.local_kernels().get(dep.repo_id)
    if local is not None:  # LOCAL_KERNELS overrides dependencies too, as in HF kernels
        from .importer import resolve_local

        path, resolution = resolve_local(local, backend)
        return Installed(dep.repo_id, "", None, path.name, path, "", resolution, True)
    pinned = pins.get(dep.repo_id)
    try:
        return install(
            dep.repo_id,
            version=None if pinned else dep.version,
            revision=pinned or dep.revision,
            backend=backend,
            trust_remote_code=trust_remote_code,
            force_download=force_download,
            cache_dir=cache_dir,
            dependencies=False,
            build=build,
        )
    except HubkernelsError as e:
        also = (
            " (build=True on the dependent's load builds its dependencies too.)"
            if isinstance(e, VariantNotFoundError)
            else ""
        )
        raise type(e)(
            f"while installing kernel dependency {dep}{' (pinned ' + pinned[:7] + ')' if pinned else ''}: {e}{also}"
        ) from e
