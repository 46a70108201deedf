"""`kernelize` (module `swap`): swap the forward of extensible layers for a kernel layer's, per device and mode.

A module is extensible when its class carries `kernel_layer_name` (set by `use_kernel_forward_from_hub`
or `replace_kernel_forward_from_hub`, HF `kernels`' convention that transformers uses), or when the
mapping names its exact class (`LayerMatch`). Kernelize plans every replacement first (find, load and
validate the layer, check it can serve the mode) and only then rebinds forwards, so an error leaves the
model untouched. Rebinding is per instance (`MethodType`); the original is kept, so kernelize can run
again with another mode and a layer that cannot serve it gets its original forward back.
"""

from __future__ import annotations

import inspect
import logging
from collections import Counter
from dataclasses import dataclass
from enum import Flag, auto
from inspect import Parameter, Signature
from types import MethodType
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from .. import settings
from .device import capability_of, mapping_device_type, module_device, target_device
from .mapping import Key, LayerMatch, Table, current_mapping, layer_name_of
from .mode import Mode, check_kernelize_mode
from .repos import RepositoryProtocol, select_repository

if TYPE_CHECKING:
    import torch
    from torch import nn

logger = logging.getLogger(__name__)

_ORIGINAL = "_hubkernels_original_forward"  # instance forward before the first replacement (None: the class's)
_INSTALLED = "_hubkernels_forward"  # the bound forward kernelize installed
_LAYER = "_hubkernels_layer"  # the layer class whose forward is installed
_PREPARED = "_hubkernels_prepared"  # (layer, names prepare added to the module) of the layer that prepared it


class KernelizeFallback(Flag):
    """When kernelize may keep a module's original forward instead of raising (HF `kernels`' flags).

    `DEFAULT` (what `use_fallback=True` means): no mapping for the layer, device, capability or mode.
    `ALL` also covers a layer that cannot be loaded or is incompatible with the module.
    """

    NONE = 0
    NO_LAYER = auto()
    NO_DEVICE = auto()
    NO_COMPATIBLE_PROPERTIES = auto()
    NO_COMPATIBLE_MODE = auto()
    CANNOT_LOAD = auto()
    DEFAULT = NO_LAYER | NO_DEVICE | NO_COMPATIBLE_PROPERTIES | NO_COMPATIBLE_MODE
    ALL = DEFAULT | CANNOT_LOAD


# ---------------------------------------------------------------------------------------------------------
# Marking layers as extensible


def replace_kernel_forward_from_hub(
    cls: type, layer_name: str, condition: Optional[Callable[["nn.Module"], bool]] = None
) -> None:
    """Mark a (third-party) layer class as extensible under `layer_name`, optionally only where
    `condition(module)` holds. Prefer a `LayerMatch` mapping key, which leaves the class untouched."""
    cls.kernel_layer_name = layer_name  # type: ignore[attr-defined]
    cls.kernel_condition = staticmethod(condition if condition is not None else (lambda module: True))  # type: ignore[attr-defined]


def use_kernel_forward_from_hub(layer_name: str, condition: Optional[Callable[["nn.Module"], bool]] = None):
    """Decorator: make a layer class extensible under `layer_name` (the class is otherwise unchanged).

    On a function, returns a module instance calling it (HF `kernels`' behaviour), which kernelize sees
    when attached to a module's `_kernel_funcs`.
    """

    def decorator(obj: Any) -> Any:
        if inspect.isclass(obj):
            replace_kernel_forward_from_hub(obj, layer_name, condition)
            return obj
        if inspect.isfunction(obj):
            func_cls = _function_module(obj)
            replace_kernel_forward_from_hub(func_cls, layer_name, condition)
            return func_cls()
        raise TypeError(f"@use_kernel_forward_from_hub applies to layer classes or functions, not {type(obj).__name__}")

    return decorator


def _function_module(func: Callable) -> type:
    from torch import nn

    class Func(nn.Module):
        can_torch_compile = getattr(func, "can_torch_compile", False)
        has_backward = getattr(func, "has_backward", True)

        def forward(self, *args, **kwargs):
            return func(*args, **kwargs)

    sig = inspect.signature(func)
    Func.forward.__signature__ = Signature(  # type: ignore[attr-defined]
        [Parameter("self", Parameter.POSITIONAL_OR_KEYWORD), *sig.parameters.values()],
        return_annotation=sig.return_annotation,
    )
    Func.__name__ = Func.__qualname__ = f"{func.__name__}_module"
    return Func


# ---------------------------------------------------------------------------------------------------------
# Validation


_ALLOWED_MEMBERS = {"can_torch_compile", "has_backward", "prepare"}
_validated: set[tuple[type, type]] = set()
_layer_cache: dict[Any, type] = {}


def validate_layer(layer: type, original: type) -> None:
    """Check a kernel layer can stand in for `original.forward`; raise TypeError saying what is wrong.

    A layer must be an nn.Module subclass with no `__init__` of its own and no members beyond
    `forward`, `has_backward`, `can_torch_compile` and the optional `prepare` classmethod (it runs on the
    host module's state), and its `forward` must take the same number and kinds of parameters as the original's.
    """
    from torch import nn

    if (layer, original) in _validated:
        return
    name = getattr(layer, "__qualname__", repr(layer))
    if not (isinstance(layer, type) and issubclass(layer, nn.Module)):
        raise TypeError(f"Kernel layer {name} is not an nn.Module subclass.")
    if layer.__init__ is not nn.Module.__init__:
        raise TypeError(f"Kernel layer {name} defines __init__; kernel layers must be stateless (forward only).")
    extra = {n for n, _ in inspect.getmembers(layer)} - {n for n, _ in inspect.getmembers(nn.Module)}
    if not extra <= _ALLOWED_MEMBERS:
        raise TypeError(
            f"Kernel layer {name} has members {sorted(extra - _ALLOWED_MEMBERS)}; only forward, "
            "has_backward, can_torch_compile and prepare are allowed."
        )
    if "prepare" in extra and not isinstance(inspect.getattr_static(layer, "prepare"), classmethod):
        raise TypeError(f"Kernel layer {name}.prepare must be a classmethod prepare(cls, module).")
    forward, original_forward = getattr(layer, "forward"), getattr(original, "forward")
    params = list(inspect.signature(forward).parameters.values())
    ref = list(inspect.signature(original_forward).parameters.values())
    if len(params) != len(ref) or any(p.kind != r.kind for p, r in zip(params, ref)):
        raise TypeError(
            f"Forward of kernel layer {name}{inspect.signature(forward)} does not match "
            f"{original.__qualname__}.forward{inspect.signature(original_forward)} "
            "(same number and kinds of parameters required)."
        )
    _validated.add((layer, original))


def _check_registered_mode(layer: type, repo: object, key: Key, repo_mode: Mode) -> None:
    if Mode.TRAINING in repo_mode and not getattr(layer, "has_backward", True):
        raise ValueError(f"Layer from {repo} has no backward but was registered for {key} with mode {repo_mode}.")
    if Mode.TORCH_COMPILE in repo_mode and not getattr(layer, "can_torch_compile", False):
        raise ValueError(
            f"Layer from {repo} is not torch.compile-safe but was registered for {key} with mode {repo_mode}."
        )


def mode_conflict(layer: object, mode: Mode) -> str | None:
    """Why a layer cannot serve `mode` (no backward for TRAINING, not compile-safe for TORCH_COMPILE), or None."""
    if Mode.TORCH_COMPILE in mode and not getattr(layer, "can_torch_compile", False):
        return "it is not torch.compile-safe (can_torch_compile is not True)"
    if Mode.TRAINING in mode and not getattr(layer, "has_backward", True):
        return "it has no backward (has_backward=False)"
    return None


def load_layer(repo: RepositoryProtocol) -> type:
    """`repo.load()`, memoized for the process per repository (repositories compare by value)."""
    try:
        cached = _layer_cache.get(repo)
    except TypeError:  # an unhashable custom repository: no memo
        return repo.load()
    if cached is None:
        cached = _layer_cache[repo] = repo.load()
    return cached


# ---------------------------------------------------------------------------------------------------------
# Forward replacement


def replace_forward(module: "nn.Module", layer: type) -> None:
    """Bind `layer.forward` to this module instance, remembering the original (idempotent across modes), after
    running the layer's `prepare` on the module once (see `prepare_module`)."""
    state = module.__dict__
    bound = MethodType(getattr(layer, "forward"), module)
    if _ORIGINAL not in state:
        state[_ORIGINAL] = state.get("forward")
    prepare_module(module, layer)
    _set_forward(module, bound)
    state[_INSTALLED] = bound
    state[_LAYER] = layer


def prepare_module(module: "nn.Module", layer: type) -> None:
    """Run `layer.prepare(module)`, once per kernelize call, after undoing the previous preparation.

    `prepare` is a kernel layer's optional classmethod for work that should happen once rather than per forward,
    such as stacking Llama's `gate_proj` and `up_proj` weights into one matrix. What it adds to the module
    (buffers, parameters, submodules, attributes) is removed again by `restore_forward` (unkernelize, or
    kernelize without a mapping for the module). It runs on the module as it is: memory it allocates stays
    allocated while kernelized, and a later `load_state_dict(assign=True)` or `.to()` that replaces the weights
    leaves what it derived stale until kernelize runs again (which prepares afresh).
    """
    state = module.__dict__
    _unprepare(module)
    prepare = getattr(layer, "prepare", None)
    if prepare is None:
        return
    before = _names(module)
    prepare(module)
    state[_PREPARED] = (layer, sorted(_names(module) - before))


def _names(module: "nn.Module") -> set[str]:
    return {*module.__dict__, *module._buffers, *module._parameters, *module._modules}


def _unprepare(module: "nn.Module") -> None:
    """Remove what the layer's `prepare` added to the module."""
    done = module.__dict__.pop(_PREPARED, None)
    if done is None:
        return
    for name in done[1]:
        for where in (module._buffers, module._parameters, module._modules, module.__dict__):
            where.pop(name, None)


def kernelized_forward(module: "nn.Module") -> Optional[Callable]:
    """The bound kernel-layer forward kernelize installed on this module (None if not kernelized); it
    stays the one that runs when a hook added later wraps `forward`."""
    return module.__dict__.get(_INSTALLED)


def restore_forward(module: "nn.Module") -> bool:
    """Give a kernelized module its original forward back; False if it was not kernelized."""
    state = module.__dict__
    if _ORIGINAL not in state:
        return False
    original = state.pop(_ORIGINAL)
    state.pop(_LAYER, None)
    _set_forward(module, original)
    state.pop(_INSTALLED, None)
    _unprepare(module)
    return True


def _set_forward(module: "nn.Module", forward: Optional[Callable]) -> None:
    state = module.__dict__
    installed = state.get(_INSTALLED)
    # A hook added after kernelize (accelerate's add_hook_to_module) wraps our forward and keeps it in
    # `_old_forward`; swap it there so the hook stays in place.
    if installed is not None and state.get("forward") is not installed and state.get("_old_forward") == installed:
        state["_old_forward"] = forward if forward is not None else MethodType(type(module).forward, module)
        return
    if installed is not None and state.get("forward") not in (installed, None):
        logger.warning(
            "%s.forward was replaced by someone else after kernelize; overwriting it. Kernelize "
            "before adding hooks (e.g. before enable_model_cpu_offload).",
            type(module).__name__,
        )
    if forward is None:
        state.pop("forward", None)
    else:
        module.forward = forward


def kernelized_layers(model: "nn.Module") -> dict[str, type]:
    """Module path -> kernel layer class, for every module of `model` whose forward is kernelize's now (directly,
    or under a hook that wrapped it)."""
    return {path: m.__dict__[_LAYER] for path, m in model.named_modules() if _in_place(m)}


def _in_place(module: "nn.Module") -> bool:
    state = module.__dict__
    installed = state.get(_INSTALLED)
    return _LAYER in state and installed is not None and installed in (state.get("forward"), state.get("_old_forward"))


def reinstall_forwards(model: "nn.Module") -> int:
    """Put back the kernel-layer forwards someone else replaced since kernelize (transformers' `use_kernels`
    re-runs HF `kernels`' kernelize on every `train()`/`eval()`); returns how many."""
    count = 0
    for module in model.modules():
        state = module.__dict__
        if _LAYER in state and not _in_place(module):
            module.forward = state[_INSTALLED]
            count += 1
    return count


def _train_keeping_kernels(self: "nn.Module", mode: bool = True) -> "nn.Module":
    """`model.train(mode)` (and so `eval()`), then the kernelized forwards put back where a hook replaced them."""
    out = type(self).train(self, mode)
    reinstall_forwards(self)
    return out


def _keep_across_mode_switches(model: "nn.Module") -> None:
    """Make `model.train()`/`model.eval()` keep kernelize's forwards (an instance method: deepcopy rebinds it)."""
    if model.__dict__.get("train") is None:
        model.__dict__["train"] = MethodType(_train_keeping_kernels, model)


# ---------------------------------------------------------------------------------------------------------
# kernelize


@dataclass
class _Decision:
    module: "nn.Module"
    path: str
    label: str
    layer: Optional[type] = None
    reason: Optional[str] = None
    quiet: bool = False  # an expected outcome (no mapping, mapping disabled): logged at INFO, not WARNING


def kernelize(
    model: "nn.Module",
    *,
    mode: Optional[Mode] = None,
    device: Union[str, "torch.device", None] = None,
    use_fallback: Union[bool, KernelizeFallback] = True,
) -> "nn.Module":
    """Replace the forward of every mapped extensible layer of `model` with its kernel layer's; returns `model`.

    mode: default `Mode.TRAINING` if `model.training` else `Mode.INFERENCE`. device: the device type to
    pick kernels for; default from the model's parameters (or its accelerate hook's execution device).
    CUDA/ROCm capability is read per module from its parameters' device index. use_fallback: True
    keeps the original forward (with a logged reason) where no mapping, device, capability or mode fits,
    or the layer cannot serve the mode; False raises instead; a `KernelizeFallback` picks the cases.
    """
    if mode is None:
        mode = Mode.TRAINING if getattr(model, "training", False) else Mode.INFERENCE
    check_kernelize_mode(mode)
    fallback = (
        use_fallback
        if isinstance(use_fallback, KernelizeFallback)
        else (KernelizeFallback.DEFAULT if use_fallback else KernelizeFallback.NONE)
    )
    model_device = target_device(model, device)
    device_type = mapping_device_type(model_device, device)
    table = current_mapping()
    disabled = settings.disable_kernel_mapping()
    class_keys = [k for k in table if isinstance(k, LayerMatch)]
    capabilities: dict[Any, Optional[int]] = {}

    decisions: list[_Decision] = []
    seen: set[int] = set()
    for path, module in model.named_modules():
        targets = [
            (f"{path}.{name}" if path else name, fn)
            for name, fn in (getattr(module, "_kernel_funcs", None) or {}).items()
        ]
        targets.append((path, module))
        for target_path, target in targets:
            if id(target) in seen:
                continue
            seen.add(id(target))
            key = _key_for(target, class_keys)
            if key is None:
                if _ORIGINAL in target.__dict__:  # kernelized before, unmapped now: back to the original
                    decisions.append(
                        _Decision(
                            target,
                            target_path,
                            type(target).__qualname__,
                            reason="no kernel mapping for it any more",
                            quiet=True,
                        )
                    )
                continue
            label = key if isinstance(key, str) else str(key)
            decision = _Decision(target, target_path or type(target).__name__, label)
            if disabled:
                decision.reason, decision.quiet = "DISABLE_KERNEL_MAPPING is set", True
            else:
                _plan(decision, key, table, mode, device_type, model_device, fallback, capabilities)
            decisions.append(decision)

    replaced: Counter[str] = Counter()
    kept: Counter[tuple[str, str, bool]] = Counter()
    for d in decisions:  # every layer is loaded and validated: now change the model
        if d.layer is not None:
            replace_forward(d.module, d.layer)
            replaced[f"{d.label} -> {d.layer.__qualname__}"] += 1
        else:
            restore_forward(d.module)
            kept[(d.label, d.reason or "", d.quiet)] += 1
    if replaced:
        _keep_across_mode_switches(model)
        logger.info(
            "kernelize (%s, %s): replaced %s", mode, device_type, ", ".join(f"{k} x{n}" for k, n in replaced.items())
        )
    for (label, reason, quiet), n in kept.items():
        # Most marked layers of a model have no mapping: that is normal, not worth a warning.
        logger.log(
            logging.INFO if quiet else logging.WARNING,
            "kernelize (%s, %s): %d module(s) of layer %s keep their original forward: %s",
            mode,
            device_type,
            n,
            label,
            reason,
        )
    return model


def _key_for(module: "nn.Module", class_keys: list[LayerMatch]) -> Optional[Key]:
    for key in reversed(class_keys):  # the latest registration wins
        if key.matches(module):
            return key
    cls = type(module)
    name = layer_name_of(cls)
    if name is None:
        return None
    condition = getattr(cls, "kernel_condition", None)
    if condition is not None and not condition(module):
        logger.debug("skipping %s: its kernel_condition is false", cls.__name__)
        return None
    return name


def _plan(
    d: _Decision,
    key: Key,
    table: Table,
    mode: Mode,
    device_type: str,
    model_device: Any,
    fallback: KernelizeFallback,
    capabilities: dict[Any, Optional[int]],
) -> None:
    def keep(flag: KernelizeFallback, reason: str) -> None:
        if flag not in fallback:
            raise ValueError(f"Cannot kernelize {d.path} ({d.label}): {reason}.")
        d.reason, d.quiet = reason, flag == KernelizeFallback.NO_LAYER

    by_device = table.get(key)
    if by_device is None:
        return keep(KernelizeFallback.NO_LAYER, f"no kernel mapping for layer {d.label!r}")
    device_repos = by_device.get(device_type)
    if device_repos is None:
        return keep(
            KernelizeFallback.NO_DEVICE,
            f"no kernel mapped for device type {device_type!r} (mapped: {', '.join(sorted(by_device))})",
        )
    capability = None
    if device_type in ("cuda", "rocm"):
        dev = module_device(d.module) or model_device
        cache_key = getattr(dev, "index", None)
        if cache_key not in capabilities:
            capabilities[cache_key] = capability_of(dev)
        capability = capabilities[cache_key]
    repos = device_repos.for_capability(capability)
    if repos is None:
        return keep(
            KernelizeFallback.NO_COMPATIBLE_PROPERTIES, f"no kernel mapped for {device_type} capability {capability}"
        )
    selected = select_repository(repos, mode)
    if selected is None:
        return keep(
            KernelizeFallback.NO_COMPATIBLE_MODE,
            f"no kernel registered for mode {mode} (registered: {', '.join(str(m) for m in repos)})",
        )
    repo, repo_mode = selected
    try:
        layer = load_layer(repo)
        validate_layer(layer, type(d.module))
    except Exception as e:  # noqa: BLE001 - which failures fall back is the caller's choice (CANNOT_LOAD)
        if KernelizeFallback.CANNOT_LOAD not in fallback:
            raise
        return keep(KernelizeFallback.CANNOT_LOAD, f"{repo} could not be used: {type(e).__name__}: {e}")
    _check_registered_mode(layer, repo, key, repo_mode)
    conflict = mode_conflict(layer, mode)
    if conflict is not None:
        return keep(KernelizeFallback.NO_COMPATIBLE_MODE, f"{repo} cannot serve {mode}: {conflict}")
    logger.debug("%s: %s from %s (registered for %s)", d.path, d.label, repo, repo_mode)
    d.layer = layer
