"""LTX-Video's normalisation, modulation, RoPE and activation ops as fused CPU and CUDA kernels.

Every function is out-of-place: it returns new tensors and never writes its inputs. Arithmetic runs
in fp32 (fp64 for fp64 inputs on CPU) with one rounding per output. Any strided input is accepted, as by
PyTorch's own ops: modulation and gate views such as ``ada.unbind(2)`` are read in place, other views
are copied to contiguous memory first; outputs are contiguous. The ops
are registered with fake implementations, so ``torch.compile(fullgraph=True)`` traces them without
graph breaks, and rms_norm, rms_norm_modulate, add_rms_norm_modulate, gelu_tanh and gated_residual
have autograd.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _autograd, _fake, layers  # noqa: F401  (register fake implementations and autograd)
from ._attention import attention, attention_on_kernel  # noqa: F401  (a predicate, not an op: outside __all__)
from ._ops import ops

__all__ = [
    "add_rms_norm_modulate",
    "attention",
    "gated_residual",
    "gelu_tanh",
    "layers",
    "qk_rms_norm_rope",
    "qk_rms_norm_rope_grid",
    "rms_norm",
    "rms_norm_modulate",
    "rope_interleaved_qk",
]


def rms_norm(x: torch.Tensor, weight: Optional[torch.Tensor] = None, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim: ``x * rsqrt(mean(x^2) + eps)``, times ``weight`` ([D]) if given."""
    return ops.rms_norm(x, weight, float(eps))


def rms_norm_modulate(
    x: torch.Tensor,
    scale: torch.Tensor,
    shift: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """AdaLN: ``rms_norm(x, weight, eps) * (1 + scale) + shift``.

    x is [B,S,D]; scale and shift are [B,1,D] (one row per batch) or [B,S,D] (per token), and may be
    views with any batch/token strides as long as the last dim is contiguous.
    """
    return ops.rms_norm_modulate(x, scale, shift, weight, float(eps))


def add_rms_norm_modulate(
    x: torch.Tensor,
    y: torch.Tensor,
    scale: torch.Tensor,
    shift: torch.Tensor,
    gate: Optional[torch.Tensor] = None,
    weight: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add, then AdaLN, in one pass: returns ``(h, out)``.

    ``h = x + y`` (``x + y * gate`` with a gate), rounded once to x's dtype, and
    ``out = rms_norm_modulate(h, scale, shift, weight, eps)`` of that rounded h, so the pair equals the
    two unfused ops. x and y are [B,S,D]; scale, shift and gate are [B,1,D] or [B,S,D] and may be
    strided views (last dim contiguous), as in :func:`rms_norm_modulate` and :func:`gated_residual`.
    """
    h, out = ops.add_rms_norm_modulate(x, y, scale, shift, gate, weight, float(eps))
    return h, out


def rope_interleaved_qk(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """LTX-Video's rotary embedding on interleaved pairs over the whole hidden width, for q and k.

    ``out = x * cos + rot(x) * sin`` with ``rot(x)[2i] = -x[2i+1]``, ``rot(x)[2i+1] = x[2i]`` (diffusers'
    LTX ``apply_rotary_emb``). q and k share shape and dtype; cos and sin are float32 of the same shape;
    D must be even.
    """
    q_out, k_out = ops.rope_interleaved_qk(q, k, cos, sin)
    return q_out, k_out


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh approximation: ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))``."""
    return ops.gelu_tanh(x)


def gated_residual(x: torch.Tensor, y: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """``x + y * gate`` with x, y [B,S,D] and gate [B,1,D] or [B,S,D] (strided views allowed)."""
    return ops.gated_residual(x, y, gate)


def qk_rms_norm_rope(
    q: torch.Tensor,
    k: torch.Tensor,
    weight_q: torch.Tensor,
    weight_k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """LTX attention prologue in one pass: ``rope(rms_norm(q, weight_q, eps))`` and the same for k.

    RMSNorm over the full hidden width with a weight (``torch.nn.RMSNorm`` across heads), then
    :func:`rope_interleaved_qk`.
    """
    q_out, k_out = ops.qk_rms_norm_rope(q, k, weight_q, weight_k, cos, sin, float(eps))
    return q_out, k_out


def qk_rms_norm_rope_grid(
    q: torch.Tensor,
    k: torch.Tensor,
    weight_q: torch.Tensor,
    weight_k: torch.Tensor,
    pos: torch.Tensor,
    freqs: torch.Tensor,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`qk_rms_norm_rope` with the RoPE tables computed in the kernel instead of read.

    ``pos`` is float32 [..., 3] (q's shape with 3 for the hidden size): each token's frame, height and
    width position as diffusers' ``LTXVideoRotaryPosEmbed`` takes them; ``freqs`` is float32 [D // 6]
    (``ltx_kernels._rope_tables.rope_positions`` makes both). Same results as ``qk_rms_norm_rope`` with
    ``rope_tables(pos, D, theta)`` while moving half the bytes: q and k only.
    """
    q_out, k_out = ops.qk_rms_norm_rope_grid(q, k, weight_q, weight_k, pos, freqs, float(eps))
    return q_out, k_out
