"""The builder: build.toml in, Hub-layout variants and their wheels out.

`build()` compiles a kernel for this machine into `build/<variant>/` (`kernel`, over `machine`, `compile`,
`loadcheck` and `symbols`); `matrix` builds every variant in isolated `toolchain`s; `wheel` packs a variant as a
PEP 825 variant wheel and `slice` cuts a CUDA variant to one arch. Names are imported lazily, so the loader's use
of `slice` does not import the compiler.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "BuildResult": "kernel",
    "build": "kernel",
    "CompileError": "compile",
    "check_abi": "abi",
    "check_torch_stable_abi": "abi",
    "choose_backend": "machine",
    "git_state": "ids",
    "ops_name": "ids",
    "unique_id": "ids",
    "ToolchainError": "toolchain",
    "ToolchainUnavailable": "toolchain",
    "SliceError": "slice",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hubkernels.builder' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # pragma: no cover
    from .abi import check_abi, check_torch_stable_abi
    from .compile import CompileError
    from .ids import git_state, ops_name, unique_id
    from .kernel import BuildResult, build
    from .machine import choose_backend
    from .slice import SliceError
    from .toolchain import ToolchainError, ToolchainUnavailable
