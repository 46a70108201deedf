"""ltx-kernels' op benchmarks on LTX-Video 2B shapes, run by `hubkernels bench` (see hubkernels.author.bench).

Each op is timed beside diffusers' eager formula (`verify_<op>`, what LTX-Video does today), `torch.compile`
of it and, where it applies, `F.rms_norm`. Default shapes: batch 2, 6144 tokens (a 16 x 16 x 24 latent),
hidden 2048, feed-forward 8192, so three rotated input sets of 50 MB each are past the H200's L2.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from hubkernels.author.bench import Benchmark

EPS6, EPS5 = 1e-6, 1e-5


# ---- eager formulas (what diffusers' LTX-Video does today) ---------------------------------------


def eager_rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """diffusers.models.normalization.RMSNorm.forward."""
    dtype = x.dtype
    var = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(var + eps)
    if weight is not None:
        return x.to(weight.dtype) * weight
    return x.to(dtype)


def eager_modulate(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, eps: float) -> torch.Tensor:
    return eager_rms_norm(x, None, eps) * (1 + scale) + shift


def eager_add_modulate(
    x: torch.Tensor, y: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The LTX block's cross-attention residual, then the feed-forward's AdaLN: (h, modulated h)."""
    h = x + y
    return h, eager_modulate(h, scale, shift, eps)


def eager_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """diffusers' LTX apply_rotary_emb: interleaved pairs over the whole hidden width."""
    x_real, x_imag = x.unflatten(2, (-1, 2)).unbind(-1)
    rotated = torch.stack([-x_imag, x_real], dim=-1).flatten(2)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


def eager_qk_norm_rope(q, k, wq, wk, cos, sin, eps):  # type: ignore[no-untyped-def]
    """LTXVideoAttnProcessor's prologue: torch.nn.RMSNorm on q and k across heads, then RoPE."""
    q = F.rms_norm(q, (q.shape[-1],), wq, eps)
    k = F.rms_norm(k, (k.shape[-1],), wk, eps)
    return eager_rope(q, cos, sin), eager_rope(k, cos, sin)


def rope_freqs(dim: int, theta: float, device: torch.device) -> torch.Tensor:
    """diffusers' LTX-Video per-axis RoPE frequencies (pi/2 included), float32 [dim // 6]."""
    freqs = theta ** torch.linspace(
        math.log(1.0, theta), math.log(theta, theta), dim // 6, device=device, dtype=torch.float32
    )
    return freqs * math.pi / 2.0


def eager_rope_tables(pos: torch.Tensor, freqs: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """LTXVideoRotaryPosEmbed's (cos, sin) from positions [B,S,3] and frequencies, as diffusers computes them."""
    angles = (freqs * (pos.unsqueeze(-1) * 2 - 1)).transpose(-1, -2).flatten(2)
    cos, sin = angles.cos().repeat_interleave(2, dim=-1), angles.sin().repeat_interleave(2, dim=-1)
    pad = dim % 6
    if pad:
        ones = torch.ones(*cos.shape[:-1], pad, dtype=cos.dtype, device=cos.device)
        cos, sin = torch.cat([ones, cos], dim=-1), torch.cat([ones * 0, sin], dim=-1)
    return cos, sin


def ltx_positions(batch: int, tokens: int, device: torch.device) -> torch.Tensor:
    """float32 [batch, tokens, 3] (frame, height, width) / (20, 2048, 2048) * (8/25, 32, 32), as the LTX
    pipelines pass them for a 16 x 16 x 24 latent, repeated or cut to `tokens`."""
    f, h, w = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), torch.arange(24.0), indexing="ij")
    grid = torch.stack([f * 8 / 25 / 20, h * 32 / 2048, w * 32 / 2048], dim=-1).reshape(-1, 3)
    grid = grid.repeat((tokens + grid.shape[0] - 1) // grid.shape[0], 1)[:tokens]
    return grid.expand(batch, tokens, 3).contiguous().to(device)


def rope64(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The rotation in x's own precision (float64 for the references)."""
    x_real, x_imag = x.unflatten(2, (-1, 2)).unbind(-1)
    return x * cos + torch.stack([-x_imag, x_real], dim=-1).flatten(2) * sin


@functools.cache
def _flash_attn_func():  # type: ignore[no-untyped-def]
    """flash-attn-4's entry point, looked up once (its CuTe DSL import is slow); None where it is not installed."""
    try:
        from flash_attn.cute import flash_attn_func
    except ImportError:
        return None
    return flash_attn_func


def flash_attn_4(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):  # type: ignore[no-untyped-def]
    """flash-attn-4 (FlashAttention in the CuTe DSL), the attention peer, on [B, S, H, D] as the kernel takes
    them: NotImplemented (left out of the report) unless it is installed and q is bf16 on an sm_90+ GPU."""
    if not flash_attn_4_runs(q):
        return NotImplemented
    out = _flash_attn_func()(q, k, v)
    return out[0] if isinstance(out, tuple) else out


def flash_attn_4_runs(q: torch.Tensor) -> bool:
    """Whether flash-attn-4 is installed and takes q: bf16 on an sm_90+ GPU."""
    ok = q.is_cuda and q.dtype == torch.bfloat16 and torch.cuda.get_device_capability(q.device) >= (9, 0)
    return ok and _flash_attn_func() is not None


def _double(*args):  # type: ignore[no-untyped-def]
    return tuple(a.double() if isinstance(a, torch.Tensor) else a for a in args)


class LtxOps(Benchmark):
    """Every ltx-kernels op on the LTX-Video 2B shapes (on a CPU: 1024 tokens, the eager peers are slow there)."""

    shape = {"batch": 2, "tokens": 6144, "hidden": 2048, "ff": 8192}
    cpu_shape = {"tokens": 1024}
    report_shape = ("batch", "tokens", "hidden")
    peers = {
        "rms_norm": {"F.rms_norm": lambda x: F.rms_norm(x, (x.shape[-1],), None, EPS6)},
        "attention": {"flash-attn-4": flash_attn_4},
        "attention_with_prologue": {"ours + flash-attn-4": "prologue_then_flash_attn_4"},
    }
    # torch.nn.RMSNorm's eager forward *is* F.rms_norm: timed once, under that name.
    eager_name = {"rms_norm_weight": "F.rms_norm"}
    kernel_ops = {"rms_norm_weight": "rms_norm", "attention_with_prologue": "attention"}

    def _bsd(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        s = self.shape
        return self.randn(s["batch"], s["tokens"], s["hidden"], dtype=dtype)

    def _row(self) -> torch.Tensor:
        return 0.1 * self.randn(self.shape["batch"], 1, self.shape["hidden"])

    def _weight(self) -> torch.Tensor:
        return 1 + 0.1 * self.randn(self.shape["hidden"])

    # rms_norm: diffusers' weightless RMSNorm (LTX norm1/norm2)
    def setup_rms_norm(self):  # type: ignore[no-untyped-def]
        return (self._bsd(),)

    def benchmark_rms_norm(self, x):  # type: ignore[no-untyped-def]
        return self.kernel.rms_norm(x, None, EPS6)

    def verify_rms_norm(self, x):  # type: ignore[no-untyped-def]
        return eager_rms_norm(x, None, EPS6)

    # rms_norm_modulate: AdaLN
    def setup_rms_norm_modulate(self):  # type: ignore[no-untyped-def]
        return self._bsd(), self._row(), self._row()

    def benchmark_rms_norm_modulate(self, x, scale, shift):  # type: ignore[no-untyped-def]
        return self.kernel.rms_norm_modulate(x, scale, shift, None, EPS6)

    def verify_rms_norm_modulate(self, x, scale, shift):  # type: ignore[no-untyped-def]
        return eager_modulate(x, scale, shift, EPS6)

    # add_rms_norm_modulate: the cross-attention residual + the feed-forward's AdaLN
    def setup_add_rms_norm_modulate(self):  # type: ignore[no-untyped-def]
        return self._bsd(), self._bsd(), self._row(), self._row()

    def benchmark_add_rms_norm_modulate(self, x, y, scale, shift):  # type: ignore[no-untyped-def]
        return self.kernel.add_rms_norm_modulate(x, y, scale, shift, None, None, EPS6)

    def verify_add_rms_norm_modulate(self, x, y, scale, shift):  # type: ignore[no-untyped-def]
        return eager_add_modulate(x, y, scale, shift, EPS6)

    # rms_norm_weight: torch.nn.RMSNorm with weight (the q/k norms of cross-attention)
    def setup_rms_norm_weight(self):  # type: ignore[no-untyped-def]
        return self._bsd(), self._weight()

    def benchmark_rms_norm_weight(self, x, w):  # type: ignore[no-untyped-def]
        return self.kernel.rms_norm(x, w, EPS5)

    def verify_rms_norm_weight(self, x, w):  # type: ignore[no-untyped-def]
        return F.rms_norm(x, (x.shape[-1],), w, EPS5)

    # rope_interleaved_qk
    def setup_rope_interleaved_qk(self):  # type: ignore[no-untyped-def]
        return self._bsd(), self._bsd(), self._bsd(torch.float32).cos(), self._bsd(torch.float32).sin()

    def benchmark_rope_interleaved_qk(self, q, k, cos, sin):  # type: ignore[no-untyped-def]
        return self.kernel.rope_interleaved_qk(q, k, cos, sin)

    def verify_rope_interleaved_qk(self, q, k, cos, sin):  # type: ignore[no-untyped-def]
        return eager_rope(q, cos, sin), eager_rope(k, cos, sin)

    def reference_rope_interleaved_qk(self, q, k, cos, sin):  # type: ignore[no-untyped-def]
        q, k, cos, sin = _double(q, k, cos, sin)
        return rope64(q, cos, sin), rope64(k, cos, sin)

    # gelu_tanh: the feed-forward activation
    def setup_gelu_tanh(self):  # type: ignore[no-untyped-def]
        s = self.shape
        return (self.randn(s["batch"], s["tokens"], s["ff"]),)

    def benchmark_gelu_tanh(self, x):  # type: ignore[no-untyped-def]
        return self.kernel.gelu_tanh(x)

    def verify_gelu_tanh(self, x):  # type: ignore[no-untyped-def]
        return F.gelu(x, approximate="tanh")

    # gated_residual
    def setup_gated_residual(self):  # type: ignore[no-untyped-def]
        return self._bsd(), self._bsd(), self._row()

    def benchmark_gated_residual(self, x, y, gate):  # type: ignore[no-untyped-def]
        return self.kernel.gated_residual(x, y, gate)

    def verify_gated_residual(self, x, y, gate):  # type: ignore[no-untyped-def]
        return x + y * gate

    # qk_rms_norm_rope: the self-attention prologue, RoPE from tables
    def setup_qk_rms_norm_rope(self):  # type: ignore[no-untyped-def]
        return (
            self._bsd(),
            self._bsd(),
            self._weight(),
            self._weight(),
            self._bsd(torch.float32).cos(),
            self._bsd(torch.float32).sin(),
        )

    def benchmark_qk_rms_norm_rope(self, q, k, wq, wk, cos, sin):  # type: ignore[no-untyped-def]
        return self.kernel.qk_rms_norm_rope(q, k, wq, wk, cos, sin, EPS5)

    def verify_qk_rms_norm_rope(self, q, k, wq, wk, cos, sin):  # type: ignore[no-untyped-def]
        return eager_qk_norm_rope(q, k, wq, wk, cos, sin, EPS5)

    def reference_qk_rms_norm_rope(self, q, k, wq, wk, cos, sin):  # type: ignore[no-untyped-def]
        q, k, wq, wk, cos, sin = _double(q, k, wq, wk, cos, sin)
        q = F.rms_norm(q, (q.shape[-1],), wq, EPS5)
        k = F.rms_norm(k, (k.shape[-1],), wk, EPS5)
        return rope64(q, cos, sin), rope64(k, cos, sin)

    # qk_rms_norm_rope_grid: the prologue with the angles computed from positions (a 16 x 16 x 24 latent)
    def setup_qk_rms_norm_rope_grid(self):  # type: ignore[no-untyped-def]
        s = self.shape
        return (
            self._bsd(),
            self._bsd(),
            self._weight(),
            self._weight(),
            ltx_positions(s["batch"], s["tokens"], self.device),
            rope_freqs(s["hidden"], 10000.0, self.device),
        )

    def benchmark_qk_rms_norm_rope_grid(self, q, k, wq, wk, pos, freqs):  # type: ignore[no-untyped-def]
        return self.kernel.qk_rms_norm_rope_grid(q, k, wq, wk, pos, freqs, EPS5)

    def verify_qk_rms_norm_rope_grid(self, q, k, wq, wk, pos, freqs):  # type: ignore[no-untyped-def]
        """The prologue with the tables built from positions first (diffusers builds them once per forward)."""
        cos, sin = eager_rope_tables(pos, freqs, q.shape[-1])
        return eager_qk_norm_rope(q, k, wq, wk, cos, sin, EPS5)

    def reference_qk_rms_norm_rope_grid(self, q, k, wq, wk, pos, freqs):  # type: ignore[no-untyped-def]
        cos, sin = eager_rope_tables(pos, freqs, q.shape[-1])  # float32 angles, as diffusers
        return self.reference_qk_rms_norm_rope(q, k, wq, wk, cos, sin)

    # attention: LTX self-attention, [B, S, hidden / 64, 64] in the projections' layout (the kernel on sm_90 in
    # bf16, torch's SDPA elsewhere). On a CPU a quarter of the tokens: the peers' cost grows with their square.
    def setup_attention(self):  # type: ignore[no-untyped-def]
        s = self.shape
        tokens = s["tokens"] if str(self.device).startswith("cuda") else max(s["tokens"] // 4, 1)
        return tuple(self.randn(s["batch"], tokens, s["hidden"] // 64, 64) for _ in range(3))

    def benchmark_attention(self, q, k, v):  # type: ignore[no-untyped-def]
        return self.kernel.attention(q, k, v)

    def verify_attention(self, q, k, v):  # type: ignore[no-untyped-def]
        """diffusers' path: torch's SDPA over [B, H, S, D] views."""
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)

    # attention_with_prologue: LTX self-attention from the projections as the kernel's attention processor runs it,
    # qk_rms_norm_rope_grid then attention ([B, S, hidden] in and out, hidden / 64 heads), timed as one call: what
    # a forward pays per call, the prologue's outputs read by the attention while the L2 still holds part of them
    # (on a CPU a quarter of the tokens, as for attention)
    def setup_attention_with_prologue(self):  # type: ignore[no-untyped-def]
        s = self.shape
        tokens = s["tokens"] if str(self.device).startswith("cuda") else max(s["tokens"] // 4, 1)
        q, k, v = (self.randn(s["batch"], tokens, s["hidden"]) for _ in range(3))
        pos = ltx_positions(s["batch"], tokens, self.device)
        return q, k, v, self._weight(), self._weight(), pos, rope_freqs(s["hidden"], 10000.0, self.device)

    def benchmark_attention_with_prologue(self, q, k, v, wq, wk, pos, freqs):  # type: ignore[no-untyped-def]
        return self.prologue_then_attention(q, k, v, wq, wk, pos, freqs)

    def prologue_then_attention(self, q, k, v, wq, wk, pos, freqs, attention=None):  # type: ignore[no-untyped-def]
        """The prologue op, then `attention` (this kernel's by default) on [B, S, H, 64] views."""
        q, k = self.kernel.qk_rms_norm_rope_grid(q, k, wq, wk, pos, freqs, EPS5)
        heads = [t.unflatten(-1, (_heads(q), -1)) for t in (q, k, v)]
        return (attention or self.kernel.attention)(*heads).flatten(-2)

    def prologue_then_flash_attn_4(self, *inputs):  # type: ignore[no-untyped-def]
        """The prologue op, then flash-attn-4: the peer a user could swap in for the attention."""
        if not flash_attn_4_runs(inputs[0]):
            return NotImplemented
        return self.prologue_then_attention(*inputs, attention=flash_attn_4)

    def verify_attention_with_prologue(self, q, k, v, wq, wk, pos, freqs):  # type: ignore[no-untyped-def]
        """diffusers' path: the q/k norms and RoPE in eager torch (tables from the positions), then SDPA."""
        q, k = self.verify_qk_rms_norm_rope_grid(q, k, wq, wk, pos, freqs)
        heads = [t.unflatten(-1, (_heads(q), -1)) for t in (q, k, v)]
        return self.verify_attention(*heads).flatten(-2)

    def reference_attention_with_prologue(self, q, k, v, wq, wk, pos, freqs):  # type: ignore[no-untyped-def]
        q, k = self.reference_qk_rms_norm_rope_grid(q, k, wq, wk, pos, freqs)
        heads = [t.unflatten(-1, (_heads(q), -1)) for t in (q, k, v.double())]
        return self.verify_attention(*heads).flatten(-2)


def _heads(x: torch.Tensor) -> int:
    """Heads of 64 where the hidden size allows (LTX-Video's), else one head."""
    return x.shape[-1] // 64 if x.shape[-1] % 64 == 0 else 1
