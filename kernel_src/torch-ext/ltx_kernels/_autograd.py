"""Backward formulas for rms_norm, rms_norm_modulate, add_rms_norm_modulate, gelu_tanh and gated_residual.

Written with plain torch ops in fp32 (fp64 for fp64 inputs), so they run on any device, compose with
torch.compile and are themselves differentiable. Gradients of broadcast modulation/gate tensors are
summed back to the tensor's own shape. The RoPE ops have no backward (inference only).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ._ops import add_op_namespace_prefix


def _acc(t: torch.Tensor) -> torch.Tensor:
    """t in the dtype the math runs in: fp64 stays fp64, everything else becomes fp32."""
    return t if t.dtype == torch.float64 else t.float()


def _rms_norm_backward(grad_n: torch.Tensor, x: torch.Tensor, eps: float) -> torch.Tensor:
    """d/dx of n = x * rsqrt(mean(x^2) + eps), given dL/dn (all in the accumulation dtype)."""
    inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    n = x * inv
    return inv * (grad_n - n * (grad_n * n).mean(-1, keepdim=True))


def _sum_over_rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1]).sum(0)


# rms_norm(x, weight, eps) ---------------------------------------------------------------------------


def _rms_norm_setup(ctx, inputs, output) -> None:
    x, weight, eps = inputs
    ctx.eps = eps
    ctx.save_for_backward(x, weight)


def _rms_norm_bwd(ctx, grad: torch.Tensor):
    x, weight = ctx.saved_tensors
    xf, g = _acc(x), _acc(grad)
    grad_n = g * _acc(weight) if weight is not None else g
    grad_x = _rms_norm_backward(grad_n, xf, ctx.eps).to(x.dtype) if ctx.needs_input_grad[0] else None
    grad_w = None
    if weight is not None and ctx.needs_input_grad[1]:
        n = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps)
        grad_w = _sum_over_rows(g * n).to(weight.dtype)
    return grad_x, grad_w, None


# rms_norm_modulate(x, scale, shift, weight, eps) -----------------------------------------------------


def _rms_norm_modulate_setup(ctx, inputs, output) -> None:
    x, scale, shift, weight, eps = inputs
    ctx.eps = eps
    ctx.shift_meta = (shift.shape, shift.dtype)
    ctx.save_for_backward(x, scale, weight)


def _modulate_grads(
    g: torch.Tensor,
    xf: torch.Tensor,
    scale: torch.Tensor,
    weight: Optional[torch.Tensor],
    eps: float,
    need_x: bool,
    need_scale: bool,
    need_w: bool,
):
    """(dL/dx, dL/dscale, dL/dweight) of ``rms_norm(x, weight, eps) * (1 + scale) + shift`` given g = dL/dout
    (xf and g in the accumulation dtype). dL/dx stays in that dtype; the others are summed to their
    tensor's shape and cast to its dtype. Unneeded ones are None."""
    n = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    wf = _acc(weight) if weight is not None else None
    grad_normed = g * (1 + _acc(scale))
    grad_x = grad_scale = grad_w = None
    if need_x:
        grad_n = grad_normed * wf if wf is not None else grad_normed
        grad_x = _rms_norm_backward(grad_n, xf, eps)
    if need_scale:
        normed = n * wf if wf is not None else n
        grad_scale = (g * normed).sum_to_size(scale.shape).to(scale.dtype)
    if weight is not None and need_w:
        grad_w = _sum_over_rows(grad_normed * n).to(weight.dtype)
    return grad_x, grad_scale, grad_w


def _rms_norm_modulate_bwd(ctx, grad: torch.Tensor):
    x, scale, weight = ctx.saved_tensors
    shift_shape, shift_dtype = ctx.shift_meta
    need_x, need_scale, need_shift, need_w, _ = ctx.needs_input_grad
    g = _acc(grad)
    grad_x, grad_scale, grad_w = _modulate_grads(g, _acc(x), scale, weight, ctx.eps, need_x, need_scale, need_w)
    grad_shift = g.sum_to_size(shift_shape).to(shift_dtype) if need_shift else None
    return (grad_x.to(x.dtype) if grad_x is not None else None), grad_scale, grad_shift, grad_w, None


# add_rms_norm_modulate(x, y, scale, shift, gate, weight, eps) -> (h, out) --------------------------------
# h = x + y (* gate); out = rms_norm_modulate(h, ...): dL/dh collects both outputs' gradients.


def _add_rms_norm_modulate_setup(ctx, inputs, output) -> None:
    x, y, scale, shift, gate, weight, eps = inputs
    h, _ = output
    ctx.eps = eps
    ctx.meta = (x.dtype, shift.shape, shift.dtype)
    ctx.save_for_backward(h, y, scale, gate, weight)


def _add_rms_norm_modulate_bwd(ctx, grad_h: torch.Tensor, grad_out: torch.Tensor):
    h, y, scale, gate, weight = ctx.saved_tensors
    x_dtype, shift_shape, shift_dtype = ctx.meta
    need_x, need_y, need_scale, need_shift, need_gate, need_w, _ = ctx.needs_input_grad
    need_gate = need_gate and gate is not None
    g = _acc(grad_out)
    need_h = need_x or need_y or need_gate
    grad_hf, grad_scale, grad_w = _modulate_grads(g, _acc(h), scale, weight, ctx.eps, need_h, need_scale, need_w)
    if need_h:
        grad_hf = grad_hf + _acc(grad_h)
    grad_x = grad_hf.to(x_dtype) if need_x else None
    grad_y = grad_gate = None
    if need_y:
        grad_y = (grad_hf * _acc(gate) if gate is not None else grad_hf).to(y.dtype)
    if need_gate:
        grad_gate = (grad_hf * _acc(y)).sum_to_size(gate.shape).to(gate.dtype)
    grad_shift = g.sum_to_size(shift_shape).to(shift_dtype) if need_shift else None
    return grad_x, grad_y, grad_scale, grad_shift, grad_gate, grad_w, None


# gelu_tanh(x) ------------------------------------------------------------------------------------------

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715


def _gelu_tanh_setup(ctx, inputs, output) -> None:
    (x,) = inputs
    ctx.save_for_backward(x)


def _gelu_tanh_bwd(ctx, grad: torch.Tensor):
    (x,) = ctx.saved_tensors
    xf = _acc(x)
    t = torch.tanh(_SQRT_2_OVER_PI * (xf + _CUBIC * xf.pow(3)))
    dy_dx = 0.5 * (1 + t) + 0.5 * xf * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * _CUBIC * xf * xf)
    return (_acc(grad) * dy_dx).to(x.dtype)


# gated_residual(x, y, gate) ----------------------------------------------------------------------------


def _gated_residual_setup(ctx, inputs, output) -> None:
    x, y, gate = inputs
    ctx.x_dtype = x.dtype
    ctx.save_for_backward(y, gate)


def _gated_residual_bwd(ctx, grad: torch.Tensor):
    y, gate = ctx.saved_tensors
    need_x, need_y, need_gate = ctx.needs_input_grad
    g = _acc(grad)
    grad_x = grad.to(ctx.x_dtype) if need_x else None
    grad_y = (g * _acc(gate)).to(y.dtype) if need_y else None
    grad_gate = (g * _acc(y)).sum_to_size(gate.shape).to(gate.dtype) if need_gate else None
    return grad_x, grad_y, grad_gate


torch.library.register_autograd(add_op_namespace_prefix("rms_norm"), _rms_norm_bwd, setup_context=_rms_norm_setup)
torch.library.register_autograd(
    add_op_namespace_prefix("rms_norm_modulate"), _rms_norm_modulate_bwd, setup_context=_rms_norm_modulate_setup
)
torch.library.register_autograd(
    add_op_namespace_prefix("add_rms_norm_modulate"),
    _add_rms_norm_modulate_bwd,
    setup_context=_add_rms_norm_modulate_setup,
)
torch.library.register_autograd(add_op_namespace_prefix("gelu_tanh"), _gelu_tanh_bwd, setup_context=_gelu_tanh_setup)
torch.library.register_autograd(
    add_op_namespace_prefix("gated_residual"), _gated_residual_bwd, setup_context=_gated_residual_setup
)
