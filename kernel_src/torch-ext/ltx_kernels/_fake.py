"""Fake (meta) implementations of the ops, for torch.compile and meta tensors.

They check arguments with the same rules as torch_binding.cpp, so a mistake is reported
while tracing (and for mixed-device calls, which dispatch here) instead of deep inside a compiled
graph, and they return empty tensors of the shapes and (contiguous) strides the kernels produce.
Strided inputs are fine: the kernels copy what they cannot read in place.
"""

from __future__ import annotations

from typing import Optional

import torch

from ._ops import add_op_namespace_prefix

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _fail(op: str, message: str) -> None:
    raise RuntimeError(f"ltx_kernels.{op}: {message}")


def _check_given(op: str, t: Optional[torch.Tensor], name: str) -> None:
    if t is None:
        _fail(op, f"{name} is None but must be a tensor")


def _check_input(op: str, x: torch.Tensor, name: str) -> None:
    _check_given(op, x, name)
    if x.dim() < 1:
        _fail(op, f"{name} must have at least one dimension (the hidden size), got a 0-d tensor")
    cpu_like = x.device.type in ("cpu", "meta")
    if not (x.dtype in _DTYPES or (cpu_like and x.dtype == torch.float64)):
        supported = "float32, float16, bfloat16 (and float64 on CPU)" if cpu_like else "float32, float16 and bfloat16"
        _fail(op, f"{name} has dtype {x.dtype}; supported are {supported}")


def _out(x: torch.Tensor) -> torch.Tensor:
    """An output of the kernels: x's shape, dtype and device, contiguous (whatever x's strides)."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _check_device(op: str, x: torch.Tensor, t: torch.Tensor, name: str, x_name: str = "x") -> None:
    _check_given(op, t, name)
    if t.device != x.device:
        _fail(op, f"{name} is on {t.device} but {x_name} is on {x.device}; move all arguments to the same device")


def _check_dtype(op: str, x: torch.Tensor, t: torch.Tensor, name: str, x_name: str = "x") -> None:
    if t.dtype != x.dtype:
        _fail(op, f"{name} has dtype {t.dtype} but {x_name} has {x.dtype}; pass {name}.to({x_name}.dtype)")


def _check_weight(op: str, x: torch.Tensor, w: torch.Tensor, name: str, x_name: str = "x") -> None:
    _check_device(op, x, w, name, x_name)
    _check_dtype(op, x, w, name, x_name)
    dim = x.shape[-1]
    if w.dim() != 1 or w.shape[0] != dim:
        _fail(op, f"{name} has shape {list(w.shape)} but must be [{dim}] (the last dimension of {x_name})")


def _check_bsd(op: str, x: torch.Tensor) -> None:
    if x.dim() != 3:
        _fail(op, f"x must be [batch, tokens, hidden], got shape {list(x.shape)}")


def _check_broadcast_rows(op: str, x: torch.Tensor, t: torch.Tensor, name: str) -> None:
    _check_device(op, x, t, name)
    _check_dtype(op, x, t, name)
    ok = t.dim() == 3 and t.shape[0] in (1, x.shape[0]) and t.shape[1] in (1, x.shape[1]) and t.shape[2] == x.shape[2]
    if not ok:
        _fail(
            op,
            f"{name} has shape {list(t.shape)} but x is {list(x.shape)}; {name} must be [B,1,D] "
            "(one row per batch) or [B,S,D] (per token)",
        )


def _check_residual(op: str, x: torch.Tensor, y: torch.Tensor) -> None:
    _check_device(op, x, y, "y")
    _check_dtype(op, x, y, "y")
    if y.shape != x.shape:
        _fail(op, f"y has shape {list(y.shape)} but x is {list(x.shape)}; x and y must have the same shape")
    _check_input(op, y, "y")


def _check_qk(op: str, q: torch.Tensor, k: torch.Tensor) -> None:
    _check_input(op, q, "q")
    _check_input(op, k, "k")
    _check_device(op, q, k, "k", "q")
    _check_dtype(op, q, k, "k", "q")
    if k.shape != q.shape:
        _fail(op, f"q has shape {list(q.shape)} but k has {list(k.shape)}; q and k must have the same shape")
    if q.shape[-1] % 2 != 0:
        _fail(op, f"the hidden size (last dimension) must be even for interleaved RoPE pairs, got {q.shape[-1]}")


def _check_float_table(op: str, q: torch.Tensor, t: torch.Tensor, name: str, shape: list[int], what: str) -> None:
    _check_device(op, q, t, name, "q")
    if t.dtype != torch.float32:
        _fail(op, f"{name} has dtype {t.dtype} but {what} are float32; pass {name}.float()")
    if list(t.shape) != list(shape):
        _fail(op, f"{name} has shape {list(t.shape)} but must be {list(shape)} ({what} for q of shape {list(q.shape)})")


def _check_rope(op: str, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    _check_qk(op, q, k)
    for t, name in ((cos, "cos"), (sin, "sin")):
        _check_float_table(op, q, t, name, list(q.shape), "RoPE tables")


@torch.library.register_fake(add_op_namespace_prefix("rms_norm"))
def _rms_norm_fake(x: torch.Tensor, weight: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    _check_input("rms_norm", x, "x")
    if weight is not None:
        _check_weight("rms_norm", x, weight, "weight")
    return _out(x)


@torch.library.register_fake(add_op_namespace_prefix("rms_norm_modulate"))
def _rms_norm_modulate_fake(
    x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, weight: Optional[torch.Tensor], eps: float
) -> torch.Tensor:
    op = "rms_norm_modulate"
    _check_input(op, x, "x")
    _check_bsd(op, x)
    _check_broadcast_rows(op, x, scale, "scale")
    _check_broadcast_rows(op, x, shift, "shift")
    if weight is not None:
        _check_weight(op, x, weight, "weight")
    return _out(x)


@torch.library.register_fake(add_op_namespace_prefix("rope_interleaved_qk"))
def _rope_interleaved_qk_fake(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    _check_rope("rope_interleaved_qk", q, k, cos, sin)
    return _out(q), _out(k)


@torch.library.register_fake(add_op_namespace_prefix("gelu_tanh"))
def _gelu_tanh_fake(x: torch.Tensor) -> torch.Tensor:
    _check_input("gelu_tanh", x, "x")
    return _out(x)


@torch.library.register_fake(add_op_namespace_prefix("add_rms_norm_modulate"))
def _add_rms_norm_modulate_fake(
    x: torch.Tensor,
    y: torch.Tensor,
    scale: torch.Tensor,
    shift: torch.Tensor,
    gate: Optional[torch.Tensor],
    weight: Optional[torch.Tensor],
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    op = "add_rms_norm_modulate"
    _check_input(op, x, "x")
    _check_bsd(op, x)
    _check_residual(op, x, y)
    _check_broadcast_rows(op, x, scale, "scale")
    _check_broadcast_rows(op, x, shift, "shift")
    if gate is not None:
        _check_broadcast_rows(op, x, gate, "gate")
    if weight is not None:
        _check_weight(op, x, weight, "weight")
    return _out(x), _out(x)


@torch.library.register_fake(add_op_namespace_prefix("gated_residual"))
def _gated_residual_fake(x: torch.Tensor, y: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    op = "gated_residual"
    _check_input(op, x, "x")
    _check_bsd(op, x)
    _check_residual(op, x, y)
    _check_broadcast_rows(op, x, gate, "gate")
    return _out(x)


@torch.library.register_fake(add_op_namespace_prefix("qk_rms_norm_rope"))
def _qk_rms_norm_rope_fake(
    q: torch.Tensor,
    k: torch.Tensor,
    weight_q: torch.Tensor,
    weight_k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    op = "qk_rms_norm_rope"
    _check_rope(op, q, k, cos, sin)
    _check_weight(op, q, weight_q, "weight_q", "q")
    _check_weight(op, q, weight_k, "weight_k", "q")
    return _out(q), _out(k)


@torch.library.register_fake(add_op_namespace_prefix("qk_rms_norm_rope_grid"))
def _qk_rms_norm_rope_grid_fake(
    q: torch.Tensor,
    k: torch.Tensor,
    weight_q: torch.Tensor,
    weight_k: torch.Tensor,
    pos: torch.Tensor,
    freqs: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    op = "qk_rms_norm_rope_grid"
    _check_qk(op, q, k)
    _check_weight(op, q, weight_q, "weight_q", "q")
    _check_weight(op, q, weight_k, "weight_k", "q")
    _check_float_table(op, q, pos, "pos", [*q.shape[:-1], 3], "positions (frame, height, width per token)")
    _check_float_table(op, q, freqs, "freqs", [q.shape[-1] // 6], "RoPE frequencies (hidden size / 6)")
    return _out(q), _out(k)


@torch.library.register_fake(add_op_namespace_prefix("attention"))
def _attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    op = "attention"
    _check_input(op, q, "q")
    if q.dim() != 4 or q.shape[-1] != 64:
        _fail(op, f"q must be [batch, tokens, heads, 64] (the head dimension is 64), got shape {list(q.shape)}")
    if q.dtype != torch.bfloat16:
        _fail(op, f"q has dtype {q.dtype}; the kernel takes bfloat16 (torch's SDPA takes the others)")
    for t, name in ((k, "k"), (v, "v")):
        _check_device(op, q, t, name, "q")
        _check_dtype(op, q, t, name, "q")
        if t.shape != q.shape:
            _fail(op, f"{name} has shape {list(t.shape)} but q has {list(q.shape)}; self-attention takes one shape")
    return _out(q)
