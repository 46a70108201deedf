"""Kernelize Diffusers models and pipelines with a kernel that declares its diffusers layers.

Diffusers marks none of its layers for kernels, so the kernel says what it replaces: its `layers`
module has `diffusers_mapping()`, kind -> entry (ltx-kernels: `kernel_src/torch-ext/ltx_kernels/layers.py`).
This module knows no model; it reads those entries:

- `layer: "module:Class"` (+ `when`): a forward swap of the modules of exactly that class (never by class
  name: diffusers' `RMSNorm` and `torch.nn.RMSNorm` share a name, not attributes) through
  `hubkernels.layers.kernelize`, so `Mode`, fallbacks and restoring work as there;
- `processor: "module:Class"` + `on`: the kernel's processor class of that kind replaces that stock
  attention processor on each module of class `on` (custom processors are left alone);
- `link`: after the swap, each module of a ModuleList running that layer is pointed at the next one when it
  runs the same layer (a hand-over between consecutive blocks);
- `serves` / `exclusive_on`: a layer whose output is meant for a processor kind is left out when that kind
  is, and, on the `exclusive_on` device types, when any attention module keeps a custom processor.
"""

from __future__ import annotations

import importlib
import logging
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Optional, Union

from .. import layers as _layers
from ..layers import (
    KernelizeFallback,
    LayerMatch,
    Mode,
    check_kernelize_mode,
    device_type_of,
    kernelized_forward,
    kernelized_layers,
    layer_from_kernel,
    mode_conflict,
    module_device,
    restore_forward,
    use_kernel_mapping,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

logger = logging.getLogger(__name__)

_ORIGINAL_PROCESSOR = "_hubkernels_original_processor"


def kernelize_diffusers(
    obj: Any,
    *,
    repo_id: Optional[str] = None,
    version: Optional[int] = None,
    revision: Optional[str] = None,
    kernel: Optional[ModuleType] = None,
    path: Union[str, Path, None] = None,
    mode: Mode = Mode.INFERENCE,
    device: Union[str, "torch.device", None] = None,
    trust_remote_code: Union[bool, list[str]] = False,
    exclude: Iterable[str] = (),
) -> Any:
    """Kernelize a Diffusers model or every model of a pipeline with one kernel; returns `obj`.

    The kernel comes from exactly one of `repo_id` (+ `version` or `revision`, through `get_kernel`
    and its trust policy), `path` (a local build) or `kernel` (an already loaded module). Call it
    after moving the model to its device and before `enable_model_cpu_offload()`. What was replaced
    is logged and left on the object as `obj._hubkernels_replaced` ({kind: module count}; for a
    pipeline the totals, and each model has its own); `exclude` names kinds to leave alone.
    Running it again with another mode re-decides every module.
    """
    check_kernelize_mode(mode)
    module = _load_kernel(repo_id, version, revision, kernel, path, trust_remote_code)
    entries = declared_kinds(module)
    exclude = set(exclude)
    unknown = exclude - set(entries)
    if unknown:
        raise ValueError(f"Unknown kinds to exclude: {sorted(unknown)}; kinds are {', '.join(entries)}")
    unmapped = set(exclude)
    for kind, entry in entries.items():
        served = entry.get("serves")
        if served is not None and (
            served not in entries or served in exclude or mode_conflict(_layer(module, served), mode)
        ):
            unmapped.add(kind)  # its output is for a processor that will not run
    total: Counter[str] = Counter()
    for name, model in _models_of(obj):
        device_type = _device_type(obj, model, device)
        model_unmapped = set(unmapped)
        for kind, entry in entries.items():
            served = entry.get("serves")
            if (
                served
                and device_type in entry.get("exclusive_on", ())
                and _custom_processors(model, entries[served], _layer(module, served))
            ):
                model_unmapped.add(kind)  # its output would reach processors that cannot read it
        with use_kernel_mapping(kernel_mapping(module, device_type, model_unmapped)):
            _layers.kernelize(model, mode=mode, device=device_type, use_fallback=KernelizeFallback.DEFAULT)
        counts = Counter(layer.__name__ for layer in kernelized_layers(model).values())
        for kind, entry in entries.items():
            if "link" in entry:
                _link(model, _layer(module, kind), entry["link"])
            if "processor" in entry:
                if kind in unmapped:
                    _restore_processors(model)
                else:
                    counts[kind] += _swap_processors(model, entry, _layer(module, kind), mode)
        replaced = {kind: counts[kind] for kind in entries if counts[kind]}
        logger.info(
            "kernelized %s with %s (%s, %s): %s",
            name or type(model).__name__,
            module.__name__,
            mode,
            device_type,
            ", ".join(f"{k} x{n}" for k, n in replaced.items()) or "nothing",
        )
        _set_report(model, replaced)
        total.update(counts)
    _set_report(obj, {kind: total[kind] for kind in entries if total[kind]})
    return obj


#: The name the README and earlier releases use.
kernelize = kernelize_diffusers


def unkernelize(obj: Any) -> Any:
    """Undo `kernelize_diffusers`: original forwards and attention processors everywhere; returns `obj`."""
    for _, model in _models_of(obj):
        for module in model.modules():
            restore_forward(module)
            for attr in module.__dict__.get(_LINK_ATTRS, ()):
                module.__dict__.pop(attr, None)
            module.__dict__.pop(_LINK_ATTRS, None)
        _restore_processors(model)
        _set_report(model, {})
    _set_report(obj, {})
    return obj


def declared_kinds(kernel: ModuleType) -> dict[str, dict[str, Any]]:
    """The kernel's `layers.diffusers_mapping()` (kind -> entry, in report order); {} for a kernel without one."""
    declare = getattr(getattr(kernel, "layers", None), "diffusers_mapping", None)
    if declare is None:
        logger.info(
            "%s declares no diffusers layers (no layers.diffusers_mapping); nothing to replace", kernel.__name__
        )
        return {}
    return dict(declare())


def kernel_mapping(kernel: ModuleType, device_type: str, exclude: Iterable[str] = ()) -> dict:
    """The class-keyed mapping of the kernel's declared forward swaps, for `hubkernels.use_kernel_mapping` and
    `hubkernels.kernelize` (`kernelize_diffusers` does both). Kinds in `exclude`, kinds whose layer the kernel
    lacks and classes this diffusers does not have are left out."""
    mapping: dict = {}
    for kind, entry in declared_kinds(kernel).items():
        if kind in exclude or "layer" not in entry:
            continue
        cls = _class(entry["layer"])
        if cls is None or not hasattr(kernel.layers, kind):
            logger.info(
                "%s: no %s here (or no layer for it in %s); those modules keep their forward",
                kind,
                entry["layer"],
                kernel.__name__,
            )
            continue
        mapping[LayerMatch(cls, entry.get("when"))] = {device_type: KernelModuleLayer(kernel, kind)}
    return mapping


class KernelModuleLayer:
    """A repository over an already-loaded kernel module: `kernel.layers.<name>`. Equality is by kernel
    module and name, so kernelize's memo works across calls."""

    def __init__(self, kernel: ModuleType, name: str) -> None:
        self.kernel = kernel
        self.name = name

    def load(self) -> type:
        return layer_from_kernel(self.kernel, self.name, self.kernel.__name__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KernelModuleLayer) and (self.kernel, self.name) == (other.kernel, other.name)

    def __hash__(self) -> int:
        return hash((id(self.kernel), self.name))

    def __repr__(self) -> str:
        return f"{self.kernel.__name__}:{self.name}"


# ---------------------------------------------------------------------------------------------------------
# Linking consecutive blocks, swapping processors

_LINK_ATTRS = "_hubkernels_link_attrs"  # the attributes a link set on a module, cleared by unkernelize


def _link(model: "nn.Module", layer: type, attrs: tuple[str, str]) -> None:
    """Point each module of a ModuleList that runs `layer` at the next one when that one runs it too (attribute
    `attrs[0]`; None otherwise), and clear any pending hand-over (`attrs[1]`). Stored in __dict__, so the link is
    no submodule: state_dict, .to() and module traversal ignore it."""
    from torch import nn

    def runs_layer(module: Optional["nn.Module"]) -> bool:
        forward = kernelized_forward(module) if module is not None else None
        return getattr(forward, "__func__", None) is getattr(layer, "forward")

    next_attr, pending_attr = attrs
    for blocks in model.modules():
        if not isinstance(blocks, nn.ModuleList):
            continue
        for block, following in zip(blocks, list(blocks)[1:] + [None]):
            if runs_layer(block):
                block.__dict__[next_attr] = following if runs_layer(following) else None
                block.__dict__.pop(pending_attr, None)
                block.__dict__[_LINK_ATTRS] = attrs
            elif _LINK_ATTRS in block.__dict__:
                block.__dict__[next_attr] = None
                block.__dict__.pop(pending_attr, None)


def _swap_processors(model: "nn.Module", entry: dict[str, Any], processor_cls: type, mode: Mode) -> int:
    attention, stock = _class(entry["on"]), _class(entry["processor"])
    if attention is None or stock is None:
        return 0
    conflict = mode_conflict(processor_cls, mode)
    swapped = 0
    for path, attn in model.named_modules():
        if type(attn) is not attention:
            continue
        current: Any = attn.processor
        if type(current) is not processor_cls and type(current) is not stock:
            logger.info("%s uses a custom processor (%s); leaving it", path, type(current).__name__)
            continue
        if conflict is not None:
            logger.warning(
                "%s keeps diffusers' %s: the kernel's processor cannot serve %s: %s",
                path,
                stock.__name__,
                mode,
                conflict,
            )
            _restore_processor(attn)
            continue
        original = attn.__dict__.get(_ORIGINAL_PROCESSOR, current) if type(current) is processor_cls else current
        new = processor_cls()
        # Keep the attention backend and parallel config chosen with set_attention_backend / parallelism.
        _carry_processor_settings(current, new)
        attn.__dict__[_ORIGINAL_PROCESSOR] = original
        attn.set_processor(new)
        swapped += 1
    return swapped


def _custom_processors(model: "nn.Module", entry: dict[str, Any], processor_cls: type) -> bool:
    """Whether an attention module of the entry's class uses a processor other than the stock one or ours."""
    attention, stock = _class(entry["on"]), _class(entry["processor"])
    return any(type(m.processor) not in (stock, processor_cls) for m in model.modules() if type(m) is attention)


def _carry_processor_settings(source: Any, target: Any) -> None:
    """Copy the attention backend and parallel config a processor holds (diffusers versions before 0.36 have
    neither; those that have them set them with set_attention_backend / enable_parallelism)."""
    for name in ("_attention_backend", "_parallel_config"):
        if hasattr(source, name):
            setattr(target, name, getattr(source, name))


def _restore_processor(attn: Any) -> None:
    original = attn.__dict__.pop(_ORIGINAL_PROCESSOR, None)
    if original is not None:
        current: Any = attn.processor
        _carry_processor_settings(current, original)
        attn.set_processor(original)


def _restore_processors(model: "nn.Module") -> None:
    for attn in model.modules():
        _restore_processor(attn)


# ---------------------------------------------------------------------------------------------------------
# Small helpers


def _layer(kernel: ModuleType, kind: str) -> type:
    return getattr(kernel.layers, kind)


def _class(spec: str) -> Any:
    """`"package.module:Class"` (a class) imported, or None when this installation has no such class."""
    module_name, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), name, None)
    except ModuleNotFoundError:
        return None


def _load_kernel(
    repo_id: Optional[str],
    version: Optional[int],
    revision: Optional[str],
    kernel: Optional[ModuleType],
    path: Union[str, Path, None],
    trust_remote_code: Union[bool, list[str]],
) -> ModuleType:
    given = [name for name, v in (("repo_id", repo_id), ("kernel", kernel), ("path", path)) if v is not None]
    if len(given) != 1:
        raise ValueError(
            "Pass exactly one of repo_id=<org/name> (with version= or revision=), path=<local "
            f"kernel build> or kernel=<loaded module>; got {', '.join(given) or 'none'}."
        )
    if kernel is not None:
        return kernel
    if path is not None:
        from ..fetch import get_local_kernel

        return get_local_kernel(path)
    from ..fetch import get_kernel

    assert repo_id is not None  # the caller passes a path or a repo id
    return get_kernel(repo_id, version=version, revision=revision, trust_remote_code=trust_remote_code)


def _models_of(obj: Any) -> list[tuple[str, "nn.Module"]]:
    from torch import nn

    if isinstance(obj, nn.Module):
        return [("", obj)]
    components = getattr(obj, "components", None)
    if isinstance(components, dict):
        return [(name, m) for name, m in components.items() if isinstance(m, nn.Module)]
    raise TypeError(f"Expected a Diffusers model (nn.Module) or pipeline, got {type(obj).__name__}")


def _device_type(obj: Any, model: "nn.Module", device: Union[str, "torch.device", None]) -> str:
    """The device the model computes on: explicit, else the pipeline's execution device (which sees
    offload hooks), else the model's hook or parameters."""
    import torch

    if isinstance(device, str):
        return device.split(":")[0]
    if isinstance(device, torch.device):
        return device.type
    execution = getattr(obj, "_execution_device", None) if obj is not model else None
    found = execution if isinstance(execution, torch.device) else module_device(model)
    if found is None:
        raise ValueError(f"Cannot tell which device {type(model).__name__} runs on; pass device='cuda' or 'cpu'.")
    return device_type_of(found)


def _set_report(obj: Any, replaced: dict[str, int]) -> None:
    try:
        object.__setattr__(obj, "_hubkernels_replaced", dict(replaced))
    except (AttributeError, TypeError):  # objects without a __dict__: the log line is the report
        pass
