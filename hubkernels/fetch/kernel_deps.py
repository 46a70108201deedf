"""What a kernel sees of its dependencies while it is imported: `get_kernel_dep("org/name")`.

The loader (`hubkernels.fetch.deps`, which installs a kernel's `kernel-depends`) imports the dependencies first,
then the kernel inside `providing(deps)`. HF `kernels` keeps its own record for its own `get_kernel_dep`;
`providing` fills that one too and `get_kernel_dep` reads it when HF kernels is the loader, so a kernel may
call either function under either loader.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from types import ModuleType
from typing import Any

from ..errors import HubkernelsError

__all__ = ["KernelDependencyError", "get_kernel_dep", "providing"]

#: The dependencies of the kernel being imported right now (None outside a kernel's import).
_DEPS: ContextVar[Mapping[str, ModuleType] | None] = ContextVar("hubkernels_kernel_deps", default=None)


class KernelDependencyError(HubkernelsError, RuntimeError):
    """A kernel dependency is malformed, cyclic, or asked for outside a kernel's import."""


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
