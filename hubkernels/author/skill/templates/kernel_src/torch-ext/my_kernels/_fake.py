"""Fake implementations: what torch.compile (and meta tensors) see instead of the kernels.

Each checks its arguments with the rules of torch_binding.cpp, so a mistake is reported while tracing
rather than from inside a compiled graph, and returns empty tensors of the kernel's output shapes.
"""

from __future__ import annotations

from typing import Optional

import torch

from ._ops import add_op_namespace_prefix

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@torch.library.register_fake(add_op_namespace_prefix("rms_norm"))
def _rms_norm_fake(x: torch.Tensor, weight: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    if x.dim() < 1:
        raise RuntimeError("my_kernels.rms_norm: x must have at least one dimension (the normalised one)")
    if x.dtype not in _DTYPES:
        raise RuntimeError(f"my_kernels.rms_norm: x has dtype {x.dtype}; supported are float32, float16 and bfloat16")
    if not x.is_contiguous():
        raise RuntimeError(
            f"my_kernels.rms_norm: x must be contiguous (got shape {list(x.shape)} with strides "
            f"{list(x.stride())}); pass x.contiguous()"
        )
    if weight is not None:
        if weight.device != x.device:
            raise RuntimeError(
                f"my_kernels.rms_norm: weight is on {weight.device} but x is on {x.device}; "
                "move both to the same device"
            )
        if weight.dtype != x.dtype:
            raise RuntimeError(
                f"my_kernels.rms_norm: weight has dtype {weight.dtype} but x has {x.dtype}; pass weight.to(x.dtype)"
            )
        if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
            raise RuntimeError(
                f"my_kernels.rms_norm: weight has shape {list(weight.shape)} but must be "
                f"[{x.shape[-1]}] (the last dimension of x)"
            )
    return torch.empty_like(x)
