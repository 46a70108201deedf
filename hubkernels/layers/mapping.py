"""The kernel mapping: layer name (or module class) -> device -> mode -> repository, held in a ContextVar.

`register_kernel_mapping` changes the mapping of the current context; `use_kernel_mapping` scopes a
mapping to a `with` block (threads and async tasks don't see each other's scoped mappings).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Optional, Union

from .device import Device
from .mode import Mode
from .repos import DeviceRepos, RepositoryProtocol

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class LayerMatch:
    """A mapping key that selects modules by their exact class (subclasses don't match), optionally
    only those instances for which `condition(module)` is true.

    This is how third-party layers without a `kernel_layer_name` are mapped without touching their
    class, e.g. `LayerMatch(torch.nn.GELU, lambda m: m.approximate == "tanh")`. A bare class used as
    a key means `LayerMatch(cls)`.
    """

    cls: type
    condition: Optional[Callable[["nn.Module"], bool]] = None

    def matches(self, module: "nn.Module") -> bool:
        return type(module) is self.cls and (self.condition is None or bool(self.condition(module)))

    def __str__(self) -> str:
        return f"{self.cls.__module__}.{self.cls.__qualname__}" + (" (conditional)" if self.condition else "")


Key = Union[str, LayerMatch]
RepoSpec = Union[RepositoryProtocol, Mapping[Mode, RepositoryProtocol]]
UserMapping = Mapping[Union[str, type, LayerMatch], Mapping[Union[Device, str], RepoSpec]]
Table = dict[Key, dict[str, DeviceRepos]]

_MAPPING: ContextVar[Table] = ContextVar("hubkernels_kernel_mapping", default={})
_LAYER_NAMES: ContextVar[dict[type, str]] = ContextVar("hubkernels_layer_names", default={})


def current_mapping() -> Table:
    """The mapping kernelize uses now (do not mutate; register instead)."""
    return _MAPPING.get()


def _copy(table: Table) -> Table:
    # Copy the structure, never the repositories: they may hold loaded modules and are compared by value.
    return {key: {dev: repos.copy() for dev, repos in by_device.items()} for key, by_device in table.items()}


def _normalize_key(key: object) -> Key:
    if isinstance(key, (str, LayerMatch)):
        return key
    if isinstance(key, type):
        return LayerMatch(key)
    raise TypeError(f"Kernel mapping keys are layer names (str), module classes or LayerMatch; got {key!r}")


def register_kernel_mapping(mapping: UserMapping, inherit_mapping: bool = True) -> None:
    """Add `mapping` to the current mapping (`inherit_mapping=False`: replace it).

    Shape, as in HF `kernels`: `{layer: {device: repo | {Mode: repo}}}` where `layer` is a
    `kernel_layer_name` (or, hubkernels' extension, a module class / `LayerMatch`), `device` a type
    string or `Device`; a bare repo is registered for `Mode.FALLBACK` (any mode it can serve).
    """
    parsed: list[tuple[Key, str, tuple[int, int] | None, dict[Mode, RepositoryProtocol]]] = []
    for raw_key, by_device in mapping.items():  # validate everything before changing anything
        key = _normalize_key(raw_key)
        if not isinstance(by_device, Mapping):
            raise TypeError(f"Mapping for {key} must be {{device: repository}}, got {by_device!r}")
        for raw_device, spec in by_device.items():
            device = Device(type=raw_device) if isinstance(raw_device, str) else raw_device
            if not isinstance(device, Device):
                raise TypeError(f"Device keys are strings like 'cuda' or Device(...), got {raw_device!r}")
            repos = dict(spec) if isinstance(spec, Mapping) else {Mode.FALLBACK: spec}
            for mode, repo in repos.items():
                if not isinstance(mode, Mode):
                    raise TypeError(f"Mode keys must be hubkernels.Mode, got {mode!r} for {key}")
                if not callable(getattr(repo, "load", None)):
                    raise TypeError(
                        f"{repo!r} (for {key}, {device.type}) has no load(); use LayerRepository, "
                        "LocalLayerRepository or LockedLayerRepository"
                    )
            parsed.append((key, device.type, device.capability_range, repos))
    if not inherit_mapping:
        _MAPPING.set({})
    table = _MAPPING.get()
    for key, device_type, rng, repos in parsed:
        by_type = table.setdefault(key, {})
        by_type.setdefault(device_type, DeviceRepos(device_type)).insert(rng, repos)


@contextmanager
def use_kernel_mapping(mapping: UserMapping, *, inherit_mapping: bool = True) -> Iterator[None]:
    """Use `mapping` (on top of the current one, or alone with `inherit_mapping=False`) inside a `with` block."""
    token = _MAPPING.set(_copy(_MAPPING.get()) if inherit_mapping else {})
    try:
        register_kernel_mapping(mapping)
        yield
    finally:
        _MAPPING.reset(token)


def layer_name_of(cls: type) -> Optional[str]:
    """The layer name a class is extensible under: its `kernel_layer_name`, else one given by `use_layer_names`."""
    name = getattr(cls, "kernel_layer_name", None)
    if name is not None:
        return str(name)
    return _LAYER_NAMES.get().get(cls)


@contextmanager
def use_layer_names(names: Mapping[type, str]) -> Iterator[None]:
    """Treat these classes as if decorated with `use_kernel_forward_from_hub(name)` inside a `with` block
    (for classes whose decorator could not mark them, without changing the classes)."""
    token = _LAYER_NAMES.set({**_LAYER_NAMES.get(), **names})
    try:
        yield
    finally:
        _LAYER_NAMES.reset(token)
