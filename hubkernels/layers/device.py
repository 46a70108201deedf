"""`Device`: the device key of a kernel mapping (a type, optionally a compute-capability range), and where a
model computes (`module_device`, `device_type_for`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union

if TYPE_CHECKING:
    import torch
    from torch import nn

#: Device types a mapping may name (HF `kernels`' list).
DEVICE_TYPES = ("cpu", "cuda", "mps", "neuron", "npu", "rocm", "tpu", "xpu")


@dataclass(frozen=True)
class CUDAProperties:
    """An inclusive CUDA compute-capability range, written major*10+minor (sm_90 -> 90)."""

    min_capability: int
    max_capability: int

    def __post_init__(self) -> None:
        _check_range(self.min_capability, self.max_capability)


@dataclass(frozen=True)
class ROCMProperties:
    """An inclusive ROCm capability range, as torch reports it (gfx942 -> 94)."""

    min_capability: int
    max_capability: int

    def __post_init__(self) -> None:
        _check_range(self.min_capability, self.max_capability)


@dataclass(frozen=True)
class Device:
    """Where a mapped layer runs: `Device("cuda", CUDAProperties(80, 90))` or just `Device("cpu")`."""

    type: str
    properties: Union[CUDAProperties, ROCMProperties, None] = None

    def __post_init__(self) -> None:
        if self.type not in DEVICE_TYPES:
            raise ValueError(f"Unsupported device type {self.type!r}; use one of {', '.join(DEVICE_TYPES)}.")
        if isinstance(self.properties, CUDAProperties) and self.type != "cuda":
            raise ValueError("CUDAProperties is only supported for 'cuda' devices.")
        if isinstance(self.properties, ROCMProperties) and self.type != "rocm":
            raise ValueError("ROCMProperties is only supported for 'rocm' devices.")
        if self.properties is not None and not isinstance(self.properties, (CUDAProperties, ROCMProperties)):
            raise TypeError(f"properties must be CUDAProperties or ROCMProperties, got {self.properties!r}")

    @property
    def capability_range(self) -> tuple[int, int] | None:
        """(min, max) inclusive, or None when any capability matches."""
        if self.properties is None:
            return None
        return self.properties.min_capability, self.properties.max_capability


def _check_range(lo: int, hi: int) -> None:
    if not isinstance(lo, int) or not isinstance(hi, int):
        raise TypeError(f"capabilities are integers like 90 for sm_90, got {lo!r}, {hi!r}")
    if lo > hi:
        raise ValueError(f"min_capability ({lo}) must be <= max_capability ({hi})")


def device_type_of(device: "torch.device") -> str:
    """The mapping's device type for a torch device: CUDA devices of a ROCm torch are 'rocm'."""
    import torch

    if device.type == "cuda" and torch.version.hip is not None:
        return "rocm"
    return device.type


def capability_of(device: "torch.device | None") -> int | None:
    """Compute capability (major*10+minor) of this CUDA/ROCm device, read now; None without a GPU.

    Read per device index on every call (not cached for the process), so a model spread over
    different GPUs gets each module's own capability.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    index = (
        device.index
        if device is not None and device.type == "cuda" and device.index is not None
        else torch.cuda.current_device()
    )
    major, minor = torch.cuda.get_device_capability(index)
    return major * 10 + minor


def module_device(module: "nn.Module") -> Optional["torch.device"]:
    """Where a module computes: its accelerate hook's execution device, else its first non-meta
    parameter or buffer; None if it has neither."""
    hook = module.__dict__.get("_hf_hook")
    execution = getattr(hook, "execution_device", None)
    if execution is not None:
        import torch

        return torch.device(execution) if not isinstance(execution, int) else torch.device("cuda", execution)
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        if tensor.device.type != "meta":
            return tensor.device
    return None


def target_device(model: "nn.Module", device: Union[str, "torch.device", None]) -> Optional["torch.device"]:
    """The torch device kernelize targets: `device` when given (a string or a torch device), else the model's."""
    import torch

    if isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        if device.split(":")[0] == "rocm":
            return torch.device(device.replace("rocm", "cuda", 1))
        try:
            return torch.device(device)
        except RuntimeError:
            return None
    return module_device(model)


def device_type_for(model: "nn.Module", device: Union[str, "torch.device", None] = None) -> str:
    """The mapping device type kernelize uses for `model` (explicit `device`, else where the model computes)."""
    return mapping_device_type(target_device(model, device), device)


def mapping_device_type(model_device: Optional["torch.device"], device: Union[str, "torch.device", None]) -> str:
    """The mapping's device type: the one `device` names when it is a string, else that of `model_device`."""
    if isinstance(device, str):
        base = device.split(":")[0]
        if base not in DEVICE_TYPES:
            raise ValueError(f"Unsupported device type {device!r}; use one of {', '.join(DEVICE_TYPES)}.")
        return base
    if model_device is None:
        raise ValueError(
            "Cannot tell which device the model runs on (it has no parameters or buffers); "
            "pass device='cuda' (or 'cpu', ...) to kernelize."
        )
    if device is not None:
        return model_device.type  # an explicit torch.device is taken as given (HF `kernels`' rule)
    return device_type_of(model_device)
