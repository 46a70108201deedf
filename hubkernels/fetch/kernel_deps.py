"""A kernel's dependencies: its `kernel-depends` (other Hub kernels) and `python-depends` (curated packages), and
what it sees of them while it is imported: `get_kernel_dep("org/name")`.

A variant names the kernels it needs (`{"repo-id": "org/name", "version": N}` or `"revision": ...`). The loader
installs each first (`install`, same trust policy, backend and cache; recursively, refusing cycles), imports them,
then imports the kernel inside `providing(deps)`. HF `kernels` keeps its own record for its own `get_kernel_dep`;
`providing` fills that one too and `get_kernel_dep` reads it when HF kernels is the loader, so a kernel may
call either function under either loader.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..errors import HubkernelsError, KernelLoadError
from ..metadata import Metadata

__all__ = [
    "Dependency",
    "KernelDependencyError",
    "check_python_depends",
    "declared",
    "get_kernel_dep",
    "providing",
]

#: The dependencies of the kernel being imported right now (None outside a kernel's import).
_DEPS: ContextVar[Mapping[str, ModuleType] | None] = ContextVar("hubkernels_kernel_deps", default=None)


class KernelDependencyError(HubkernelsError, RuntimeError):
    """A kernel dependency is malformed, cyclic, or asked for outside a kernel's import."""


@dataclass(frozen=True)
class Dependency:
    """One `kernel-depends` entry: another Hub kernel, by major `version` or exact `revision`."""

    repo_id: str
    version: int | None = None
    revision: str | None = None

    def __str__(self) -> str:
        at = f"v{self.version}" if self.version is not None else self.revision
        return f"{self.repo_id}@{at}" if at else self.repo_id


def declared(metadata: Metadata) -> list[Dependency]:
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


def check_python_depends(metadata: Metadata) -> None:
    """Refuse a variant whose curated `python-depends` are unknown or not installed (pip command in the error)."""
    if not metadata.python_depends:
        return
    from ..config import PYTHON_MODULES  # the curated table; read only when a kernel declares python-depends

    for dep in metadata.python_depends:
        if dep not in PYTHON_MODULES:
            raise KernelLoadError(f"{metadata.name} declares unsupported Python dependency {dep!r}")
        module = PYTHON_MODULES[dep]
        if module and importlib.util.find_spec(module) is None:
            raise KernelLoadError(f"{metadata.name} requires the Python package {dep!r}: pip install {dep}")


def get_kernel_dep(repo_id: str) -> ModuleType:
    """The module of dependency `repo_id` of the kernel being imported (call it from the kernel's __init__)."""
    deps = _DEPS.get()
    if deps is None:
        deps = _kernels_deps()  # imported by HF kernels' loader, which keeps its own record
    if deps is None:
        raise KernelDependencyError(
            f"get_kernel_dep({repo_id!r}) only works while a kernel is being imported: call it at the top level of "
            "the kernel's __init__.py, and load the kernel with hubkernels.get_kernel (or kernels.get_kernel)."
        )
    module = deps.get(repo_id)
    if module is None:
        have = ", ".join(sorted(deps)) or "none"
        raise KernelDependencyError(
            f"{repo_id} is not a dependency of the kernel being imported (its kernel-depends: {have}). Add "
            f'{{ repo-id = "{repo_id}", version = N }} to kernel-depends in build.toml and rebuild.'
        )
    return module


@contextmanager
def providing(deps: Mapping[str, ModuleType]) -> Iterator[None]:
    """Make `deps` what `get_kernel_dep` (ours and HF kernels') returns inside the block."""
    token = _DEPS.set(dict(deps))
    try:
        with _kernels_context(deps):
            yield
    finally:
        _DEPS.reset(token)


def _kernels_deps() -> Mapping[str, ModuleType] | None:
    module = sys.modules.get("kernels.deps")
    var: Any = getattr(module, "_KERNEL_DEPS", None)
    return var.get() if var is not None else None


def _kernels_context(deps: Mapping[str, ModuleType]) -> Any:
    """HF kernels' own dependency context, so `kernels.get_kernel_dep` answers inside our import too."""
    if not deps and "kernels.deps" not in sys.modules:
        return nullcontext()  # importing HF kernels costs ~0.5 s; a kernel without dependencies does not need it
    try:
        from kernels.deps import use_kernel_deps
    except Exception:  # noqa: BLE001 - not installed, or a version without kernel dependencies
        return nullcontext()
    return use_kernel_deps(dict(deps))
