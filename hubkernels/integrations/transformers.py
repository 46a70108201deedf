"""Transformers models: their `@use_kernel_forward_from_hub("RMSNorm")`-style layers, as they are.

Transformers marks layer classes through HF `kernels`' decorator (setting `kernel_layer_name`), but
only when a `kernels` version it accepts is installed; otherwise its decorator is a no-op and the
classes carry no name (transformers 5.23+ wants kernels >= 0.18.2, for instance). `layer_names(model)`
recovers the names the modeling code declares, from the decorator lines in its source, so
`hubkernels.kernelize` maps the same layers either way. Mapping names to hubkernels repositories is
the usual `register_kernel_mapping({"RMSNorm": {"cuda": LayerRepository(...)}})`.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import re
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from torch import nn

logger = logging.getLogger(__name__)

# `@use_kernel_forward_from_hub("Name")`, possibly followed by other decorators, then `class X(`.
_DECORATED = re.compile(
    r"^@use_kernel_forward_from_hub\(\s*[\"']([^\"']+)[\"']\s*\)\s*\n(?:@[^\n]*\n)*class\s+(\w+)\b", re.MULTILINE
)


@functools.lru_cache(maxsize=None)
def declared_in_module(module_name: str) -> dict[str, str]:
    """{class name: layer name} for the classes a transformers module decorates (read from its source)."""
    spec = importlib.util.find_spec(module_name)
    origin = getattr(spec, "origin", None) if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return {}
    try:
        with open(origin, encoding="utf-8") as f:
            source = f.read()
    except OSError:
        return {}
    return {cls: name for name, cls in _DECORATED.findall(source)}


def declared_layer_name(cls: type) -> Optional[str]:
    """The layer name transformers' modeling code gives `cls` (or a base class), marked or not."""
    marked = getattr(cls, "kernel_layer_name", None)
    if marked is not None:
        return str(marked)
    for klass in cls.__mro__:
        module = getattr(klass, "__module__", "") or ""
        if module.startswith("transformers."):
            name = declared_in_module(module).get(klass.__name__)
            if name is not None:
                return name
    return None


def layer_names(model: "nn.Module") -> dict[type, str]:
    """{class: layer name} for the module classes of `model` that transformers decorates but that carry
    no `kernel_layer_name` (because transformers' decorator was a no-op). Marked classes are left out:
    kernelize reads their mark directly."""
    found: dict[type, str] = {}
    seen: set[type] = set()
    for module in model.modules():
        cls = type(module)
        if cls in seen:
            continue
        seen.add(cls)
        if getattr(cls, "kernel_layer_name", None) is not None:
            continue
        name = declared_layer_name(cls)
        if name is not None:
            found[cls] = name
    if found:
        logger.debug(
            "transformers layers named from their decorators: %s",
            ", ".join(f"{c.__name__}={n}" for c, n in found.items()),
        )
    return found


def is_transformers_model(model: object) -> bool:
    """Whether `model` is a transformers PreTrainedModel (without importing transformers)."""
    return any(getattr(k, "__module__", "").startswith("transformers.") for k in type(model).__mro__)


#: transformers' layer names that an ltx-kernels layer computes exactly (GELUTanh, NewGELU and FastGELU are
#: all 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))).
LTX_KERNELS_LAYERS = {"RMSNorm": "LlamaRMSNorm", "GeluTanh": "GeluTanh", "NewGELU": "GeluTanh", "FastGELU": "GeluTanh"}


def ltx_kernels_mapping(
    repo_id: str,
    *,
    version: Optional[int] = None,
    revision: Optional[str] = None,
    devices: tuple[str, ...] = ("cuda", "cpu"),
    trust_remote_code: bool | list[str] = False,
) -> dict:
    """A kernel mapping of transformers' RMSNorm and GELU-tanh layer names to an ltx-kernels repo, for
    `hubkernels.use_kernel_mapping` / `register_kernel_mapping`."""
    from ..layers import LayerRepository

    return {
        name: {
            device: LayerRepository(
                repo_id, layer_name=layer, version=version, revision=revision, trust_remote_code=trust_remote_code
            )
            for device in devices
        }
        for name, layer in LTX_KERNELS_LAYERS.items()
    }
