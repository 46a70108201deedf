"""The backward of rms_norm, written with plain torch ops in fp32.

Plain torch ops run on every device, compose with torch.compile and are themselves differentiable.
An op without a registered backward raises when a gradient reaches it; leave it out only for
inference-only ops, and give their layers ``has_backward = False``.
"""

from __future__ import annotations

import torch

from ._ops import add_op_namespace_prefix


def _rms_norm_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    x, weight, eps = inputs
    ctx.eps = eps
    ctx.save_for_backward(x, weight)


def _rms_norm_backward(ctx, grad: torch.Tensor):  # type: ignore[no-untyped-def]
    x, weight = ctx.saved_tensors
    xf, g = x.float(), grad.float()
    inv_rms = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps)
    n = xf * inv_rms  # the normalised x
    grad_x = grad_weight = None
    if ctx.needs_input_grad[0]:
        grad_n = g * weight.float() if weight is not None else g
        grad_x = (inv_rms * (grad_n - n * (grad_n * n).mean(-1, keepdim=True))).to(x.dtype)
    if weight is not None and ctx.needs_input_grad[1]:
        grad_weight = (g * n).reshape(-1, n.shape[-1]).sum(0).to(weight.dtype)
    return grad_x, grad_weight, None


torch.library.register_autograd(add_op_namespace_prefix("rms_norm"), _rms_norm_backward, setup_context=_rms_norm_setup)
