"""`residual_add`: ATen's ``x + y`` as an opaque op, for torch.compile graphs.

An LTX block's cross-attention residual sits between two extern kernels (the output projection's
matmul and the next AdaLN op), so Inductor cannot fuse it with anything; it emits a kernel of its own,
which on the H200 took 48 us per block where ATen's add takes 35 us (bf16 [2, 6144, 2048]). Behind a
custom op, the compiled graph runs ATen's add. Eager code should just write ``x + y``.
"""

from __future__ import annotations

import torch

from ._ops import add_op_namespace_prefix


def _check(x: torch.Tensor, y: torch.Tensor) -> None:
    if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
        raise RuntimeError(f"ltx_kernels.residual_add: x and y must have the same shape, dtype and device, got "
                           f"{list(x.shape)} {x.dtype} {x.device} and {list(y.shape)} {y.dtype} {y.device}")


@torch.library.custom_op(add_op_namespace_prefix("residual_add"), mutates_args=())
def residual_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x + y`` for tensors of one shape, dtype and device."""
    _check(x, y)
    return torch.add(x, y, out=torch.empty_like(x))  # the fake's layout, whatever x's strides


@residual_add.register_fake
def _(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    _check(x, y)
    return torch.empty_like(x)


def _backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return grad, grad


residual_add.register_autograd(_backward)
