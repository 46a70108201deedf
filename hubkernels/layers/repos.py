"""Where a layer comes from (a Hub repo, a local build, a lock file) and which one serves a device and mode.

A repository is anything with `load() -> type[nn.Module]` (HF `kernels`' RepositoryProtocol), so
custom repository classes work too. Loading is lazy: constructing one makes no request.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, Union, runtime_checkable

from ..errors import HubkernelsError
from .mode import MODE_PRIORITY, Mode

if TYPE_CHECKING:
    from torch import nn


@runtime_checkable
class RepositoryProtocol(Protocol):
    """What a mapping entry must offer: load the layer class (once; kernelize memoizes it)."""

    def load(self) -> "type[nn.Module]": ...


class LayerNotFoundError(HubkernelsError, LookupError):
    """The kernel loaded, but it has no `layers.<name>`."""


def layer_from_kernel(kernel: ModuleType, layer_name: str, origin: object) -> "type[nn.Module]":
    """`kernel.layers.<layer_name>`, or an error naming the layers the kernel does have."""
    layers = getattr(kernel, "layers", None)
    if layers is None:
        raise LayerNotFoundError(f"Kernel {origin} has no `layers` module, so it offers no layer {layer_name!r}.")
    layer = getattr(layers, layer_name, None)
    if layer is None:
        have = sorted(n for n, v in vars(layers).items() if isinstance(v, type) and not n.startswith("_"))
        raise LayerNotFoundError(
            f"Layer {layer_name!r} not found in kernel {origin}; it has: {', '.join(have) or 'none'}."
        )
    return layer


class LayerRepository:
    """A layer of a Hub kernel repo: `kernel.layers.<layer_name>` from `get_kernel(repo_id, version|revision)`.

    Exactly one of `version` (a major version, the `v<N>` branch) or `revision` (branch, tag or commit)
    is required, as in HF `kernels`. `trust_remote_code` is passed to `get_kernel`'s trust check.
    """

    def __init__(
        self,
        repo_id: str,
        *,
        layer_name: str,
        revision: str | None = None,
        version: int | None = None,
        trust_remote_code: Union[bool, list[str]] = False,
    ) -> None:
        if revision is not None and version is not None:
            raise ValueError("Either a revision or a version must be specified, not both.")
        if revision is None and version is None:
            raise ValueError(f"LayerRepository({repo_id!r}): pass version=<major> or revision=<branch/commit>.")
        self.repo_id = repo_id
        self.layer_name = layer_name
        self.revision = revision
        self.version = version
        self.trust_remote_code = list(trust_remote_code) if isinstance(trust_remote_code, list) else trust_remote_code

    def load(self) -> "type[nn.Module]":
        from ..fetch import get_kernel  # the fetch stage; imported when a layer is first needed

        kernel = get_kernel(
            self.repo_id, version=self.version, revision=self.revision, trust_remote_code=self.trust_remote_code
        )
        return layer_from_kernel(kernel, self.layer_name, self)

    def _key(self) -> tuple:
        trust = tuple(self.trust_remote_code) if isinstance(self.trust_remote_code, list) else self.trust_remote_code
        return (self.repo_id, self.layer_name, self.revision, self.version, trust)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LayerRepository) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("LayerRepository",) + self._key())

    def __repr__(self) -> str:
        at = f"version={self.version}" if self.version is not None else f"revision={self.revision!r}"
        return f"LayerRepository({self.repo_id!r}, layer_name={self.layer_name!r}, {at})"


class LocalLayerRepository:
    """A layer of a locally built kernel (a `hubkernels build` output dir or one variant dir)."""

    def __init__(self, repo_path: Union[str, Path], *, layer_name: str) -> None:
        self.repo_path = Path(repo_path)
        self.layer_name = layer_name

    def load(self) -> "type[nn.Module]":
        from ..fetch import get_local_kernel

        return layer_from_kernel(get_local_kernel(self.repo_path), self.layer_name, self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalLayerRepository) and (self.repo_path, self.layer_name) == (
            other.repo_path,
            other.layer_name,
        )

    def __hash__(self) -> int:
        return hash(("LocalLayerRepository", self.repo_path, self.layer_name))

    def __repr__(self) -> str:
        return f"LocalLayerRepository({str(self.repo_path)!r}, layer_name={self.layer_name!r})"


class LockedLayerRepository:
    """A layer of a Hub kernel pinned by a lock file (`hubkernels lock`): the commit is read once, at
    construction, and loading checks the variant's bytes against the lock (`get_kernel(lockfile=...)`)."""

    def __init__(
        self,
        repo_id: str,
        *,
        lockfile: Union[str, Path, None] = None,
        layer_name: str,
        trust_remote_code: Union[bool, list[str]] = False,
    ) -> None:
        from ..fetch import DEFAULT_LOCKFILE, LockFileError, read_lock

        self.repo_id = repo_id
        self.layer_name = layer_name
        self.lockfile = Path(lockfile if lockfile is not None else DEFAULT_LOCKFILE)
        self.trust_remote_code = list(trust_remote_code) if isinstance(trust_remote_code, list) else trust_remote_code
        entries = read_lock(self.lockfile)
        if repo_id not in entries:
            raise LockFileError(
                f"{self.lockfile} has no entry for {repo_id}. Add it with "
                f"`hubkernels lock {repo_id} --output {self.lockfile}`."
            )
        self.revision = entries[repo_id].commit

    def load(self) -> "type[nn.Module]":
        from ..fetch import get_kernel

        kernel = get_kernel(self.repo_id, lockfile=self.lockfile, trust_remote_code=self.trust_remote_code)
        return layer_from_kernel(kernel, self.layer_name, self)

    def _key(self) -> tuple:
        trust = tuple(self.trust_remote_code) if isinstance(self.trust_remote_code, list) else self.trust_remote_code
        return (self.repo_id, self.layer_name, self.revision, str(self.lockfile.resolve()), trust)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LockedLayerRepository) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("LockedLayerRepository",) + self._key())

    def __repr__(self) -> str:
        return f"LockedLayerRepository({self.repo_id!r}, layer_name={self.layer_name!r}, revision={self.revision!r})"


_FULL_RANGE = (0, sys.maxsize)


class DeviceRepos:
    """The repositories registered for one device type, by capability range (CUDA/ROCm) and mode.

    Lookup takes the narrowest range containing the device's capability; among equal ranges the
    latest registration wins (re-registering a range replaces it), as in HF `kernels`.
    """

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self._ranges: list[tuple[tuple[int, int], dict[Mode, RepositoryProtocol]]] = []

    def insert(self, capability_range: tuple[int, int] | None, repos: dict[Mode, RepositoryProtocol]) -> None:
        rng = capability_range or _FULL_RANGE
        if self.device_type not in ("cuda", "rocm"):
            rng = _FULL_RANGE  # capability only means something on CUDA/ROCm: one entry per other type
        self._ranges = [(r, v) for r, v in self._ranges if r != rng]
        self._ranges.append((rng, dict(repos)))

    def for_capability(self, capability: int | None) -> dict[Mode, RepositoryProtocol] | None:
        """The mode->repo table for this capability (None: unknown, only unrestricted entries match)."""
        best: tuple[tuple[int, int], dict[Mode, RepositoryProtocol]] | None = None
        for rng, repos in self._ranges:
            fits = rng == _FULL_RANGE if capability is None else rng[0] <= capability <= rng[1]
            if fits and (best is None or rng[1] - rng[0] <= best[0][1] - best[0][0]):
                best = (rng, repos)
        return None if best is None else best[1]

    def copy(self) -> "DeviceRepos":
        new = DeviceRepos(self.device_type)
        new._ranges = [(r, dict(v)) for r, v in self._ranges]
        return new

    def __repr__(self) -> str:
        return f"DeviceRepos({self.device_type!r}, {self._ranges!r})"


def select_repository(repos: dict[Mode, RepositoryProtocol], mode: Mode) -> tuple[RepositoryProtocol, Mode] | None:
    """The repository serving `mode` and the mode it was registered for, in HF `kernels`' priority order."""
    if mode not in MODE_PRIORITY:
        raise ValueError(f"Unsupported kernelize mode: {mode}")
    for candidate in MODE_PRIORITY[mode]:
        if candidate in repos:
            return repos[candidate], candidate
    return None
