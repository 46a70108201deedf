"""Replace layers with kernel layers: HF `kernels`-compatible `kernelize` and its mapping API.

Mark a layer class extensible (`use_kernel_forward_from_hub("RMSNorm")`, or map a third-party class
with `LayerMatch`), map names to repositories per device and mode (`register_kernel_mapping`,
`use_kernel_mapping`), then `kernelize(model, mode=Mode.INFERENCE)`.
"""

from .device import CUDAProperties, Device, ROCMProperties
from .globals import LayerMatch, register_kernel_mapping, use_kernel_mapping
from .kernelize import (
    KernelizeFallback,
    kernelize,
    kernelized_layers,
    replace_kernel_forward_from_hub,
    use_kernel_forward_from_hub,
    validate_layer,
)
from .mode import Mode
from .repos import (
    LayerNotFoundError,
    LayerRepository,
    LocalLayerRepository,
    LockedLayerRepository,
    RepositoryProtocol,
)

__all__ = [
    "CUDAProperties",
    "Device",
    "KernelizeFallback",
    "LayerMatch",
    "LayerNotFoundError",
    "LayerRepository",
    "LocalLayerRepository",
    "LockedLayerRepository",
    "Mode",
    "ROCMProperties",
    "RepositoryProtocol",
    "kernelize",
    "kernelized_layers",
    "register_kernel_mapping",
    "replace_kernel_forward_from_hub",
    "use_kernel_forward_from_hub",
    "use_kernel_mapping",
    "validate_layer",
]
