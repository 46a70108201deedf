"""Replace layers with kernel layers: HF `kernels`-compatible `kernelize` and its mapping API.

Mark a layer class extensible (`use_kernel_forward_from_hub("RMSNorm")`, or map a third-party class
with `LayerMatch`), map names to repositories per device and mode (`register_kernel_mapping`,
`use_kernel_mapping`), then `kernelize(model, mode=Mode.INFERENCE)`.
"""

from .device import DEVICE_TYPES, CUDAProperties, Device, ROCMProperties, device_type_for, device_type_of, module_device
from .mapping import (
    LayerMatch,
    current_mapping,
    layer_name_of,
    register_kernel_mapping,
    use_kernel_mapping,
    use_layer_names,
)
from .mode import Mode, check_kernelize_mode
from .repos import (
    LayerNotFoundError,
    LayerRepository,
    LocalLayerRepository,
    LockedLayerRepository,
    RepositoryProtocol,
    layer_from_kernel,
)
from .swap import (
    KernelizeFallback,
    kernelize,
    kernelized_forward,
    kernelized_layers,
    load_layer,
    mode_conflict,
    replace_kernel_forward_from_hub,
    restore_forward,
    use_kernel_forward_from_hub,
    validate_layer,
)

# The surface integrations build on (hubkernels.integrations.*): what a kernelize of their own needs.
INTEGRATION_API = [
    "DEVICE_TYPES",
    "check_kernelize_mode",
    "current_mapping",
    "device_type_for",
    "device_type_of",
    "kernelized_forward",
    "layer_from_kernel",
    "layer_name_of",
    "load_layer",
    "mode_conflict",
    "module_device",
    "restore_forward",
    "use_layer_names",
]

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
    *INTEGRATION_API,
]
