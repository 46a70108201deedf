"""Self-attention on Hopper: the sm_90a kernel where it runs, torch's SDPA everywhere else."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ._ops import ops


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: Optional[float] = None) -> torch.Tensor:
    """Self-attention ``softmax(q k^T * scale) v`` over [B, S, H, D] q, k, v (the projections' layout, no
    transposes); ``scale`` defaults to ``D ** -0.5``. This package's wgmma kernel where
    :func:`attention_on_kernel` holds, torch's ``scaled_dot_product_attention`` everywhere else."""
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    if attention_on_kernel(q, k, v):
        return ops.attention(q, k, v, scale)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=scale)
    return out.transpose(1, 2)


def attention_on_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether :func:`attention` runs the kernel: an sm_90 GPU (H100, H200), bfloat16, head dim 64, q, k and v
    of one shape on one device, and a CUDA build of this package."""
    return (
        q.is_cuda
        and q.dtype == torch.bfloat16
        and q.dim() == 4
        and q.shape[-1] == 64
        and k.shape == q.shape == v.shape
        and k.dtype == q.dtype == v.dtype
        and k.device == q.device == v.device
        and _CUDA_BUILD
        and torch.cuda.get_device_capability(q.device) == (9, 0)
    )


# Read once, so torch.compile sees a constant: this build registers the attention kernel for CUDA.
_CUDA_BUILD = ops.attention.default.has_kernel_for_dispatch_key("CUDA")
