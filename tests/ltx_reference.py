"""Float64 reference implementations of the ltx_kernels ops, written from LTX-Video's math.

Each function takes tensors of any dtype and device, computes in float64 and returns float64, so a
kernel's output can be compared against it with a tolerance that only covers the kernel's own
rounding. Shared by the CPU and GPU correctness tests and by the benchmarks.
"""

from __future__ import annotations

import math
from typing import Iterator, Optional

import torch

__all__ = [
    "GATE_8BIT",
    "K_BLOCK",
    "TOLERANCES",
    "add_rms_norm_modulate",
    "as_accurate_as",
    "attention",
    "attention_int8",
    "errors",
    "gated_residual",
    "gelu_tanh",
    "int8_scores",
    "meets_8bit_gate",
    "qk_rms_norm_rope",
    "quantize_k_int8",
    "quantize_q_int8",
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


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: Optional[float] = None) -> torch.Tensor:
    """softmax(q k^T * scale) v over [B, S, H, D] q, k, v; scale defaults to D ** -0.5. One (batch, head)
    at a time, so S x S scores of one head are all it holds."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q, k, v = (_f64(t).transpose(1, 2) for t in (q, k, v))
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            out[b, h] = torch.softmax(q[b, h] @ k[b, h].T * scale, dim=-1) @ v[b, h]
    return out.transpose(1, 2)


# ---- the attention kernels' quality gates, per call against fp32 attention -------------------------------
# (tests/ltx/test_attention.py and scripts/attn_wgmma/probe.py)

GATE_8BIT = (0.9995, 0.02)  # the 8-bit mode: cosine similarity at least, relative L1 at most


def errors(out: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    """(cosine similarity, relative L1) of out against the reference, in float64."""
    o, r = _f64(out).flatten(), _f64(reference).flatten()
    return torch.nn.functional.cosine_similarity(o, r, dim=0).item(), ((o - r).abs().sum() / r.abs().sum()).item()


def meets_8bit_gate(cos: float, l1: float) -> bool:
    return cos >= GATE_8BIT[0] and l1 <= GATE_8BIT[1]


def as_accurate_as(cos: float, l1: float, cos_peer: float, l1_peer: float) -> bool:
    """The lossless kernel's gate: 1 - cosine within 1.10x the peer's (cuDNN BF16), relative L1 within 1.05x."""
    return 1 - cos <= (1 - cos_peer) * 1.10 + 1e-7 and l1 <= l1_peer * 1.05


# ---- the 8-bit attention's math ----------------------------------------------------------------------
# INT8 q k^T in the spirit of SageAttention: q scaled per token (the softmax scale and log2(e) folded in), k
# smoothed by its mean over tokens (a per-channel shift that cancels in the softmax and takes K's channel
# outliers out of its range) and scaled per block of K_BLOCK tokens, int32 dot products. P and V stay bf16
# with fp32 accumulation: FP8 there costs about 3% relative L1 on its own (docs/kernels.md).

LOG2E = 1.4426950408889634
K_BLOCK = 128  # tokens of k that share one scale: one K tile of the kernel


def _int8_scale(amax: torch.Tensor) -> torch.Tensor:
    """The symmetric INT8 scale of values up to amax: amax / 127 (at least the smallest normal float)."""
    return amax.clamp_min(torch.finfo(torch.float32).tiny) / 127


def _to_int8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (float32) / scale rounded to nearest even, in [-127, 127]."""
    return torch.round(x / scale).clamp(-127, 127).to(torch.int8)


def quantize_q_int8(q: torch.Tensor, scale: Optional[float] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(q8 [B, S, H, D] int8, q_scale [B, H, S] float32) of q * scale * log2(e): one scale per token and head."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    x = q.float() * (scale * LOG2E)
    s = _int8_scale(x.abs().amax(-1, keepdim=True))
    return _to_int8(x, s), s[..., 0].transpose(1, 2).contiguous()


def quantize_k_int8(
    k: torch.Tensor, *, smooth: bool = True, block: int = K_BLOCK
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(k8 [B, S, H, D] int8, k_scale [B, H, ceil(S / block)] float32, k_mean [B, H, D] float32): k minus
    its mean over tokens (zero without smoothing), one scale per head and block of tokens (the kernel's: K_BLOCK)."""
    x = k.float()
    mean = x.mean(1, keepdim=True) if smooth else torch.zeros_like(x[:, :1])
    x = x - mean
    s, blocks = x.shape[1], -(-x.shape[1] // block)
    padded = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, blocks * block - s))
    k_scale = _int8_scale(padded.abs().unflatten(1, (blocks, block)).amax(dim=(2, 4)))  # [B, blocks, H]
    k8 = _to_int8(x, k_scale.repeat_interleave(block, dim=1)[:, :s, :, None])
    return k8, k_scale.transpose(1, 2).contiguous(), mean[:, 0].contiguous()


def int8_scores(
    q: torch.Tensor, k: torch.Tensor, scale: Optional[float] = None, *, smooth_k: bool = True, k_block: int = K_BLOCK
) -> Iterator[tuple[int, int, torch.Tensor]]:
    """(b, h, scores) per batch and head: the 8-bit attention's exp2-domain scores, float64 [S, S], from INT8 q
    and k (quantize_q_int8, quantize_k_int8 with k_block tokens per k scale)."""
    q8, q_scale = quantize_q_int8(q, scale)
    k8, k_scale, _ = quantize_k_int8(k, smooth=smooth_k, block=k_block)
    k_scale = k_scale.repeat_interleave(k_block, dim=-1)[..., : k.shape[1]].double()
    q8, k8 = (t.transpose(1, 2).double() for t in (q8, k8))
    for b in range(q8.shape[0]):
        for h in range(q8.shape[1]):
            yield b, h, (q8[b, h] @ k8[b, h].T) * q_scale[b, h, :, None].double() * k_scale[b, h]


def attention_int8(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: Optional[float] = None,
    *,
    smooth_k: bool = True,
    k_block: int = K_BLOCK,
) -> torch.Tensor:
    """What the 8-bit attention computes: int8_scores, fp32 softmax, P rounded to bf16 times bf16 v with exact
    accumulation; float64 out, [B, S, H, D]."""
    v = v.to(torch.bfloat16).transpose(1, 2).double()
    out = torch.empty_like(v)
    for b, h, s2 in int8_scores(q, k, scale, smooth_k=smooth_k, k_block=k_block):
        p = torch.exp2(s2.float() - s2.float().amax(-1, keepdim=True))
        out[b, h] = (p.to(torch.bfloat16).double() @ v[b, h]) / p.double().sum(-1, keepdim=True)
    return out.transpose(1, 2)


# ---- the bf16 kernel's softmax, tile by tile ---------------------------------------------------------------
# The kernel walks the keys in tiles of K_BLOCK: exponentials in the exp2 domain against a per-row offset, P
# rounded to bf16 for P V, fp32 sums. The running maximum (FlashAttention's online softmax) makes the offset each
# tile's new maximum and rescales O and l when it moves. A fixed offset (FlashDecoding++'s unified maximum) keeps
# tile 0's maximum for every tile: bf16 P and fp32 sums keep their relative precision at any scale, so the offset
# only has to keep exp2 inside fp32's range; a row whose tile sum reaches `refit_below` (a score 64 above the
# offset at the default; also inf and NaN) takes that tile the online way. What the running maximum gives that a
# fixed offset does not: every row's largest P is exactly 1, so where one key dominates a row, its weight is
# exact; against a fixed offset it is rounded to bf16 like the rest. P and V in fp16 (8 times finer) make up
# for it, with the offset kept where fp16 holds P (a refit below 2^15).


def attention_tiles(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: Optional[float] = None,
    *,
    fixed_offset: bool,
    refit_below: float = 2.0**64,
    k_block: int = K_BLOCK,
    pv_dtype: torch.dtype = torch.bfloat16,
    v_range: Optional[tuple[float, float]] = None,
    o_check: bool = False,
) -> tuple[torch.Tensor, int]:
    """(the tile algorithm's bf16 output [B, S, H, D] as float64, how many row tiles were refit) for bf16 q, k, v:
    fp32 scores, the online softmax (fixed_offset=False) or a fixed offset with refits; P and V rounded to
    pv_dtype for P V. With v_range (lo, hi), a head one of whose V tiles has its largest |v| outside [lo, hi)
    (and not 0) goes the online way in bf16 (a range check measured and not taken). With o_check, a head one of
    whose output rows is not finite (V past fp16's range is inf in fp16) or has a mean |o| under 2^-12 (where
    fp16's subnormals cost V precision) goes that way, as the sm_90a kernel's second pass does per CTA."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q, k, v = (t.to(torch.bfloat16).transpose(1, 2) for t in (q, k, v))
    out = torch.empty(q.shape, dtype=torch.float64)
    refits = 0
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            if v_range is not None:
                tops = [v[b, h, j : j + k_block].float().abs().amax().item() for j in range(0, v.shape[2], k_block)]
                if not all(x == 0 or v_range[0] <= x < v_range[1] for x in tops):
                    one = (t[b : b + 1, h : h + 1].transpose(1, 2) for t in (q, k, v))
                    out[b, h] = attention_tiles(*one, scale, fixed_offset=False, k_block=k_block)[0][0, :, 0]
                    continue
            s2 = (q[b, h].float() @ k[b, h].float().T) * (scale * LOG2E)  # fp32 scores, exp2 domain
            rows = s2.shape[0]
            m = torch.full((rows, 1), -math.inf)
            l_sum = torch.zeros(rows, 1)
            o = torch.zeros(rows, v.shape[-1])
            for j in range(0, s2.shape[1], k_block):
                t, vt = s2[:, j : j + k_block], v[b, h, j : j + k_block].to(pv_dtype).float()
                online = torch.ones(rows, 1, dtype=torch.bool)
                if fixed_offset and j > 0:
                    p = torch.exp2(t - m)
                    tile_sum = p.sum(-1, keepdim=True)
                    online = ~(tile_sum < refit_below)  # nonfinite sums too
                    refits += int(online.sum())
                    keep = ~online
                    l_sum = torch.where(keep, l_sum + tile_sum, l_sum)
                    o = torch.where(keep, o + p.to(pv_dtype).float() @ vt, o)
                m_new = torch.where(online, torch.maximum(m, t.amax(-1, keepdim=True)), m)
                alpha = torch.exp2(m - m_new)
                p = torch.exp2(t - m_new)
                l_sum = torch.where(online, l_sum * alpha + p.sum(-1, keepdim=True), l_sum)
                o = torch.where(online, o * alpha + p.to(pv_dtype).float() @ vt, o)
                m = m_new
            a = o.abs().sum(-1, keepdim=True)  # not finite, or a mean |o| under 2^-12: the kernel's check
            if o_check and not ((a < math.inf) & (a >= v.shape[-1] * 2.0**-12 * l_sum)).all():
                one = (t[b : b + 1, h : h + 1].transpose(1, 2) for t in (q, k, v))
                out[b, h] = attention_tiles(*one, scale, fixed_offset=False, k_block=k_block)[0][0, :, 0]
                continue
            out[b, h] = (o / l_sum).to(torch.bfloat16).double()
    return out.transpose(1, 2), refits
