"""Model authors opt in through config.json; users get the author's kernels with `kernelize(model)`.

The entry (see docs/config-opt-in.md):

    "hub_kernels": {
      "RMSNorm":  {"repo_id": "hubkernels/ltx-kernels", "layer": "LlamaRMSNorm", "version": 1},
      "GeluTanh": {"repo_id": "hubkernels/ltx-kernels", "layer": "GeluTanh", "revision": "<commit>",
                   "devices": ["cuda"]}
    }

A key is a layer name (a class's `kernel_layer_name`, e.g. transformers' "RMSNorm"), a class name
("LlamaRMSNorm") or a qualified class name ("diffusers.models.normalization.RMSNorm"). Entries are
hints, never a reason to fail: an entry naming a missing repo or layer, or a layer that does not fit,
logs a warning and the layer keeps its original forward. Loading still goes through `get_kernel`'s
trust policy; a config cannot grant trust (the user passes `trust_remote_code`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

from .. import layers as _layers
from ..errors import HubkernelsError
from ..layers import (
    DEVICE_TYPES,
    KernelizeFallback,
    LayerMatch,
    LayerRepository,
    Mode,
    current_mapping,
    device_type_for,
    layer_name_of,
    load_layer,
    use_kernel_mapping,
    use_layer_names,
    validate_layer,
)
from ..layout import is_repo_id
from . import transformers as _transformers

if TYPE_CHECKING:
    import torch
    from torch import nn

logger = logging.getLogger(__name__)

#: The config keys read, in order ("_hub_kernels" is kept by diffusers without an "unexpected key" warning).
CONFIG_KEYS = ("hub_kernels", "_hub_kernels")
_FIELDS = {"repo_id", "layer", "version", "revision", "devices"}


class ConfigEntryError(HubkernelsError, ValueError):
    """A `hub_kernels` entry is malformed (raised by `declare_hub_kernels`; `kernelize` only warns)."""


@dataclass(frozen=True)
class KernelEntry:
    """One `hub_kernels` entry: which modules (`key`), which kernel layer, at which version or revision."""

    key: str
    repo_id: str
    layer: str
    version: Optional[int] = None
    revision: Optional[str] = None
    devices: Optional[tuple[str, ...]] = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"repo_id": self.repo_id, "layer": self.layer}
        out.update({"version": self.version} if self.version is not None else {"revision": self.revision})
        if self.devices is not None:
            out["devices"] = list(self.devices)
        return out


def parse_entry(key: str, raw: Any) -> KernelEntry:
    """Check one entry and return it; ConfigEntryError says what to fix."""
    where = f"hub_kernels[{key!r}]"
    if not isinstance(key, str) or not key:
        raise ConfigEntryError(f"hub_kernels keys are layer or class names, got {key!r}")
    if not isinstance(raw, Mapping):
        raise ConfigEntryError(
            f"{where} must be an object like "
            '{"repo_id": "org/name", "layer": "LayerName", "version": 1}, got ' + repr(raw)
        )
    unknown = set(raw) - _FIELDS
    if "trust_remote_code" in unknown:
        raise ConfigEntryError(
            f"{where}: trust_remote_code cannot be set in a model's config; trusting a "
            "publisher is the user's decision (kernelize(..., trust_remote_code=...))."
        )
    if unknown:
        raise ConfigEntryError(f"{where} has unknown fields {sorted(unknown)}; allowed: {sorted(_FIELDS)}")
    repo_id, layer = raw.get("repo_id"), raw.get("layer")
    if not is_repo_id(repo_id):
        raise ConfigEntryError(f'{where}: "repo_id" must be "org/name", got {repo_id!r}')
    if not isinstance(layer, str) or not layer:
        raise ConfigEntryError(f'{where}: "layer" must name a layer in the kernel\'s layers module, got {layer!r}')
    version, revision = raw.get("version"), raw.get("revision")
    if (version is None) == (revision is None):
        raise ConfigEntryError(
            f'{where}: give exactly one of "version" (an integer major version) or "revision" '
            "(a branch, tag or commit), so users load what you tested"
        )
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 0):
        raise ConfigEntryError(f'{where}: "version" must be a non-negative integer, got {version!r}')
    if revision is not None and (not isinstance(revision, str) or not revision):
        raise ConfigEntryError(f'{where}: "revision" must be a non-empty string, got {revision!r}')
    devices = raw.get("devices")
    if devices is not None:
        if not isinstance(devices, (list, tuple)) or not devices or any(d not in DEVICE_TYPES for d in devices):
            raise ConfigEntryError(
                f'{where}: "devices" must be a non-empty list of {", ".join(DEVICE_TYPES)}; got {devices!r}'
            )
        devices = tuple(devices)
    return KernelEntry(key, repo_id, layer, version, revision, devices)


def _config_of(obj: Any) -> Any:
    return getattr(obj, "config", obj)


def raw_entries(model_or_config: Any) -> Optional[Mapping[str, Any]]:
    """The raw `hub_kernels` mapping of a model's config (transformers or diffusers) or a config dict."""
    config = _config_of(model_or_config)
    for key in CONFIG_KEYS:
        value = config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)
        if value is not None:
            return value
    return None


def config_entries(model_or_config: Any) -> list[KernelEntry]:
    """The valid entries of a config's `hub_kernels`; malformed ones are skipped with a warning."""
    raw = raw_entries(model_or_config)
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        logger.warning("config hub_kernels must be an object {layer: entry}; ignoring %r", raw)
        return []
    entries = []
    for key, value in raw.items():
        try:
            entries.append(parse_entry(key, value))
        except ConfigEntryError as e:
            logger.warning("ignoring a config entry: %s", e)
    return entries


def declare_hub_kernels(model: Any, entries: Mapping[str, Mapping[str, Any]]) -> None:
    """For model authors: validate `entries` and store them in the model's config, so `save_pretrained`
    writes them to config.json (transformers: `config.hub_kernels`; diffusers: `_hub_kernels`)."""
    parsed = [parse_entry(k, v) for k, v in entries.items()]
    value = {e.key: e.to_json() for e in parsed}
    if hasattr(model, "register_to_config") and not hasattr(getattr(model, "config", None), "to_json_string"):
        model.register_to_config(_hub_kernels=value)  # diffusers ConfigMixin (FrozenDict config)
    else:
        setattr(_config_of(model), "hub_kernels", value)


def mapping_from_config(
    model: "nn.Module", device_type: str, *, trust_remote_code: Union[bool, list[str]] = False
) -> dict:
    """The kernel mapping the model's config asks for on `device_type`, keeping only entries that load and
    fit (each problem is a warning). Entries for names the current mapping already covers are left to it."""
    entries = [e for e in config_entries(model) if e.devices is None or device_type in e.devices]
    if not entries:
        return {}
    classes = {type(m) for m in model.modules()}
    user = current_mapping()
    mapping: dict = {}
    for entry in entries:
        targets = _targets(entry.key, classes)
        if targets is None:
            continue
        key, target_classes = targets
        if key in user:
            logger.info("config entry %s: a mapping registered in code already covers it; using that", entry.key)
            continue
        repo = LayerRepository(
            entry.repo_id,
            layer_name=entry.layer,
            version=entry.version,
            revision=entry.revision,
            trust_remote_code=trust_remote_code,
        )
        try:
            layer = load_layer(repo)
            for cls in target_classes:
                validate_layer(layer, cls)
        except Exception as e:  # noqa: BLE001 - a model's config must never make loading it fail
            logger.warning(
                "config.json hub_kernels[%r] (%s): cannot use it, keeping the original layer: %s: %s",
                entry.key,
                repo,
                type(e).__name__,
                e,
            )
            continue
        mapping[key] = {device_type: repo}
    return mapping


def _targets(key: str, classes: set[type]) -> Optional[tuple[Union[str, LayerMatch], list[type]]]:
    by_layer_name = [c for c in classes if layer_name_of(c) == key]
    if by_layer_name:
        return key, by_layer_name
    by_class = (
        [c for c in classes if f"{c.__module__}.{c.__qualname__}" == key]
        if "." in key
        else [c for c in classes if c.__name__ == key]
    )
    if not by_class:
        logger.info("config entry %s matches no module of this model", key)
        return None
    if len(by_class) > 1:
        logger.warning(
            "config entry %r matches several classes (%s); qualify it (module.Class) to pick one",
            key,
            ", ".join(f"{c.__module__}.{c.__qualname__}" for c in by_class),
        )
        return None
    return LayerMatch(by_class[0]), by_class


def kernelize_with_config(
    model: "nn.Module",
    *,
    mode: Optional[Mode] = None,
    device: Union[str, "torch.device", None] = None,
    use_fallback: Union[bool, KernelizeFallback] = True,
    trust_remote_code: Union[bool, list[str]] = False,
) -> "nn.Module":
    """`hubkernels.layers.kernelize`, plus the kernels the model's config declares and the layer names
    of transformers' decorated layers; returns `model`.

    Mappings registered in code take precedence over the config for the names they cover. Config
    entries that cannot be used only warn. `trust_remote_code` applies to the config's repositories.
    """
    names = _transformers.layer_names(model) if _transformers.is_transformers_model(model) else {}
    with use_layer_names(names):
        mapping = {}
        if raw_entries(model) is not None:
            device_type = device_type_for(model, device)
            mapping = mapping_from_config(model, device_type, trust_remote_code=trust_remote_code)
        with use_kernel_mapping(mapping):
            return _layers.kernelize(model, mode=mode, device=device, use_fallback=use_fallback)


def from_pretrained(
    cls: Any,
    path: Union[str, Path],
    *,
    mode: Optional[Mode] = None,
    device: Union[str, "torch.device", None] = None,
    kernel_trust_remote_code: Union[bool, list[str]] = False,
    **kwargs: Any,
) -> Any:
    """`cls.from_pretrained(path, **kwargs)` then `kernelize` with the kernels its config declares.

    `kernel_trust_remote_code` is `kernelize`'s `trust_remote_code` (named apart from transformers'
    own `trust_remote_code`, which `kwargs` pass through).
    """
    model = cls.from_pretrained(path, **kwargs)
    return kernelize_with_config(model, mode=mode, device=device, trust_remote_code=kernel_trust_remote_code)
