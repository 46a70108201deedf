"""hubkernels: build custom kernels from build.toml, publish them to a Hub, load and swap them into models."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ._version import __version__

# Public API, imported lazily so `import hubkernels` stays cheap (torch is only imported when needed).
_EXPORTS = {
    "build_kernel": "hubkernels.builder",
    "load_config": "hubkernels.config",
    "ConfigError": "hubkernels.config",
    "get_local_kernel": "hubkernels.fetch",
    "loaded_kernels": "hubkernels.fetch",
    "system_variants": "hubkernels.variants",
    "resolve": "hubkernels.variants",
    "Variant": "hubkernels.system",
    "get_kernel": "hubkernels.fetch",
    "get_kernel_dep": "hubkernels.fetch",
    "has_kernel": "hubkernels.fetch",
    "get_kernel_variants": "hubkernels.fetch",
    "install_kernel": "hubkernels.fetch",
    "load_locked": "hubkernels.fetch",
    "kernelize": "hubkernels.integrations",
    "from_pretrained": "hubkernels.integrations",
    **{
        name: "hubkernels.layers"
        for name in (
            "Mode",
            "Device",
            "CUDAProperties",
            "ROCMProperties",
            "LayerRepository",
            "LocalLayerRepository",
            "LockedLayerRepository",
            "LayerMatch",
            "KernelizeFallback",
            "register_kernel_mapping",
            "use_kernel_mapping",
            "use_kernel_forward_from_hub",
            "replace_kernel_forward_from_hub",
            "kernelized_layers",
        )
    },
    "System": "hubkernels.system",
    # Every error class (the rule is in hubkernels/errors.py).
    **{
        name: "hubkernels.errors"
        for name in (
            "HubkernelsError",
            "BuildError",
            "VariantNotFoundError",
            "DigestError",
            "KernelLoadError",
            "UsageError",
            "MetadataError",
            "VariantImportError",
        )
    },
    "KernelDependencyError": "hubkernels.fetch",
    "ElfError": "hubkernels.elf",
    "CompileError": "hubkernels.builder",
    "ScaffoldError": "hubkernels.author.scaffold",
    "ToolchainError": "hubkernels.builder",
    "ToolchainUnavailable": "hubkernels.builder",
    "TokenError": "hubkernels.server.auth",
    "ServeError": "hubkernels.server.background",
    "ServeExtraMissing": "hubkernels.server",
    "XetFormatError": "hubkernels.server.xet.format",
    "PublishError": "hubkernels.publish",
    "SliceError": "hubkernels.builder",
    "LockFileError": "hubkernels.fetch",
    "OpNamespaceError": "hubkernels.fetch",
    "KernelNotFoundError": "hubkernels.fetch",
    "UntrustedKernelError": "hubkernels.fetch",
    "DownloadError": "hubkernels.fetch",
    "LayerNotFoundError": "hubkernels.layers",
    "ConfigEntryError": "hubkernels.integrations.config",
    "SkillInstallError": "hubkernels.author.skill_install",
    "HubError": "hubkernels.server.storage.model",
}

_ALIASES = {"build_kernel": "build"}

#: Modules that moved: importing an old name (or a submodule under it) warns and hands back the new module.
_MOVED = {
    "hubkernels.bench": "hubkernels.author.bench",
    "hubkernels.scaffold": "hubkernels.author.scaffold",
    "hubkernels.skill_cli": "hubkernels.author.skill_install",
    "hubkernels.verify": "hubkernels.author.verify",
    "hubkernels.load": "hubkernels.fetch",
    "hubkernels.lock": "hubkernels.fetch.lockfile",
    "hubkernels.kernel_deps": "hubkernels.fetch.kernel_deps",
    "hubkernels.fetch.locked": "hubkernels.fetch",
    "hubkernels.layers.globals": "hubkernels.layers.mapping",
    "hubkernels.build": "hubkernels.builder",
    "hubkernels.build.toolchain": "hubkernels.builder.machine",
    "hubkernels.matrix": "hubkernels.builder.matrix",
    "hubkernels.toolchain": "hubkernels.builder.toolchain",
    "hubkernels.wheel": "hubkernels.builder.wheel",
    "hubkernels.slice": "hubkernels.builder.slice",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hubkernels' has no attribute {name!r}")

    value = getattr(importlib.import_module(module), _ALIASES.get(name, name))
    globals()[name] = value
    return value


def _moved_to(name: str) -> str | None:
    """The new name of a module `_MOVED` lists (the longest listed prefix wins), None for any other."""
    if not name.startswith("hubkernels."):  # every import of the process passes here: leave others at once
        return None
    old = max((o for o in _MOVED if name == o or name.startswith(o + ".")), key=len, default=None)
    return None if old is None else _MOVED[old] + name[len(old) :]


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names of moved modules; loading one warns (DeprecationWarning) and returns the new module."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if _moved_to(fullname) else None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        new = _moved_to(spec.name)
        assert new is not None
        frame, level = sys._getframe(1), 2  # warn at the importing line, past importlib's own frames
        while frame.f_back is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
            frame, level = frame.f_back, level + 1
        warnings.warn(
            f"{spec.name} moved to {new}: import that instead (the old name will be removed)",
            DeprecationWarning,
            stacklevel=level,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        pass


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())  # before the path finder, which would load a second copy


if TYPE_CHECKING:  # pragma: no cover
    from .builder import build as build_kernel
    from .config import ConfigError, load_config
    from .fetch import (
        get_kernel,
        get_kernel_dep,
        get_kernel_variants,
        get_local_kernel,
        has_kernel,
        install_kernel,
        load_locked,
        loaded_kernels,
    )
    from .integrations import from_pretrained, kernelize
    from .layers import (
        CUDAProperties,
        Device,
        KernelizeFallback,
        LayerMatch,
        LayerRepository,
        LocalLayerRepository,
        LockedLayerRepository,
        Mode,
        ROCMProperties,
        kernelized_layers,
        register_kernel_mapping,
        replace_kernel_forward_from_hub,
        use_kernel_forward_from_hub,
        use_kernel_mapping,
    )
    from .system import System, Variant
    from .variants import resolve, system_variants
