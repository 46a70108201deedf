"""Self-attention on Hopper: the sm_90a kernel where it runs, torch's SDPA everywhere else; and LTX-Video's
self-attention from its projections, the q/k prologue and the attention as one op there."""

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


def qk_rms_norm_rope_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    weight_q: torch.Tensor,
    weight_k: torch.Tensor,
    pos: torch.Tensor,
    freqs: torch.Tensor,
    heads: int,
    eps: float = 1e-5,
    scale: Optional[float] = None,
) -> torch.Tensor:
    """LTX-Video's self-attention from its projections, [B, S, hidden] q, k, v in ``heads`` heads:
    :func:`~ltx_kernels.qk_rms_norm_rope_grid` on q and k, then :func:`attention`; returns [B, S, hidden].
    Where the kernel runs (:func:`attention_on_kernel` of the heads' views) one op, which runs batches 1.. of
    the memory-bound prologue on a second stream under batch 0's attention: the same results, bit for bit."""
    views = [t.unflatten(-1, (heads, -1)) for t in (q, k, v)]
    scale = views[0].shape[-1] ** -0.5 if scale is None else float(scale)
    if attention_on_kernel(*views):
        return ops.qk_rms_norm_rope_attention(q, k, v, weight_q, weight_k, pos, freqs, float(eps), scale)
    q, k = ops.qk_rms_norm_rope_grid(q, k, weight_q, weight_k, pos, freqs, float(eps))
    return attention(q.unflatten(-1, (heads, -1)), k.unflatten(-1, (heads, -1)), views[2], scale).flatten(-2)


# Read once, so torch.compile sees a constant: this build registers the attention kernel for CUDA.
_CUDA_BUILD = ops.attention.default.has_kernel_for_dispatch_key("CUDA")
