"""Float64 reference implementations of the ltx_kernels ops, written from LTX-Video's math.

Each function takes tensors of any dtype and device, computes in float64 and returns float64, so a
kernel's output can be compared against it with a tolerance that only covers the kernel's own
rounding. Shared by the CPU and GPU correctness tests and by the benchmarks.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

__all__ = [
    "TOLERANCES",
    "add_rms_norm_modulate",
    "gated_residual",
    "gelu_tanh",
    "qk_rms_norm_rope",
    "rope_tables",
    "rms_norm",
    "rms_norm_modulate",
    "rope_interleaved_qk",
    "tolerance",
]

# (rtol, atol) for comparing a kernel's output in this dtype against the fp64 reference. Inputs are
# exact in their dtype; the tolerances cover fp32 arithmetic plus the final rounding to the output dtype.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-12),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
}


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """``rtol``/``atol`` keyword arguments for ``torch.testing.assert_close`` at this output dtype."""
    rtol, atol = TOLERANCES[dtype]
    return {"rtol": rtol, "atol": atol}


def _f64(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if t is None else t.detach().to(torch.float64)


def rms_norm(x: torch.Tensor, weight: Optional[torch.Tensor] = None, eps: float = 1e-6) -> torch.Tensor:
    """x * rsqrt(mean(x^2 over the last dim) + eps) (* weight)."""
    x = _f64(x)
    out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return out * _f64(weight) if weight is not None else out


def rms_norm_modulate(
    x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, weight: Optional[torch.Tensor] = None, eps: float = 1e-6
) -> torch.Tensor:
    """rms_norm(x, weight) * (1 + scale) + shift, scale/shift broadcast over tokens ([B,1,D]) or not."""
    return rms_norm(x, weight, eps) * (1 + _f64(scale)) + _f64(shift)


def add_rms_norm_modulate(
    x: torch.Tensor,
    y: torch.Tensor,
    scale: torch.Tensor,
    shift: torch.Tensor,
    gate: Optional[torch.Tensor] = None,
    weight: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(h, out): h = x + y (* gate), and rms_norm_modulate of h rounded to x's dtype, as the op returns
    h in x's dtype and normalises that rounded h."""
    h = _f64(x) + (_f64(y) * _f64(gate) if gate is not None else _f64(y))
    return h, rms_norm_modulate(h.to(x.dtype), scale, shift, weight, eps)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """diffusers' LTX apply_rotary_emb on interleaved pairs over the whole last dim."""
    x = _f64(x)
    real, imag = x.unflatten(-1, (-1, 2)).unbind(-1)
    rotated = torch.stack([-imag, real], dim=-1).flatten(-2)
    return x * _f64(cos) + rotated * _f64(sin)


def rope_interleaved_qk(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rope(q), rope(k)) with out = x*cos + rot(x)*sin, rot(x)[2i] = -x[2i+1], rot(x)[2i+1] = x[2i]."""
    return _rope(q, cos, sin), _rope(k, cos, sin)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
    x = _f64(x)
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.pow(3))))


def gated_residual(x: torch.Tensor, y: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """x + y * gate, gate broadcast over tokens ([B,1,D]) or not."""
    return _f64(x) + _f64(y) * _f64(gate)


def qk_rms_norm_rope(
    q: torch.Tensor,
    k: torch.Tensor,
    weight_q: torch.Tensor,
    weight_k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """rope(rms_norm(q, weight_q)), rope(rms_norm(k, weight_k)), without rounding in between."""
    return _rope(rms_norm(q, weight_q, eps), cos, sin), _rope(rms_norm(k, weight_k, eps), cos, sin)


def rope_tables(pos: torch.Tensor, freqs: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """diffusers' LTX-Video RoPE (cos, sin), float64 [..., dim], for positions pos [..., 3] and per-axis
    frequencies freqs [dim // 6]. The angles are rounded in float32 as diffusers computes them; only
    the cos/sin are exact. Channel order: dim % 6 padding channels (cos 1, sin 0), then per frequency f
    and axis a the pair at 2 * (3 f + a)."""
    angles = freqs.float() * (pos.float().unsqueeze(-1) * 2 - 1)  # [..., 3, F], float32 as in diffusers
    angles = angles.transpose(-1, -2).flatten(-2).double()  # [..., 3F]: index 3 f + a
    pad = dim % 6
    cos = angles.cos().repeat_interleave(2, dim=-1)
    sin = angles.sin().repeat_interleave(2, dim=-1)
    ones = torch.ones(*cos.shape[:-1], pad, dtype=torch.float64, device=cos.device)
    return torch.cat([ones, cos], dim=-1), torch.cat([ones * 0, sin], dim=-1)


def rope_freqs(dim: int, theta: float, device: torch.device) -> torch.Tensor:
    """diffusers' LTX-Video per-axis RoPE frequencies (pi/2 included), float32 [dim // 6]."""
    freqs = theta ** torch.linspace(
        math.log(1.0, theta), math.log(theta, theta), dim // 6, device=device, dtype=torch.float32
    )
    return freqs * math.pi / 2.0
