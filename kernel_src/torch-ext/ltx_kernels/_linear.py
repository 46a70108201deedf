"""`linear_gelu_tanh`: a Linear layer whose bias + tanh-GELU run in the matmul epilogue.

On CUDA this is one cuBLASLt call (`_addmm_activation`, epilogue GELU_BIAS), so the [.., out] activation is
written once instead of written, read back and written again. It is a custom op of this build's namespace, so
torch.compile keeps it whole (Inductor would otherwise split it into a matmul and a separate GELU kernel).
"""

from __future__ import annotations

import torch

from ._ops import add_op_namespace_prefix


@torch.library.custom_op(add_op_namespace_prefix("linear_gelu_tanh"), mutates_args=())
def linear_gelu_tanh(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(x @ weight.T + bias) for x [..., in], weight [out, in], bias [out]."""
    flat = x.reshape(-1, x.shape[-1])
    out = torch._addmm_activation(bias, flat, weight.t(), use_gelu=True)
    return out.view(*x.shape[:-1], weight.shape[0])


@torch.library.register_kernel(add_op_namespace_prefix("linear_gelu_tanh"), "cpu")  # kernel-builder's form
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    # ATen's CPU `_addmm_activation` applies the erf GELU (its cuBLASLt path the tanh one): be explicit.
    return torch.nn.functional.gelu(torch.nn.functional.linear(x, weight, bias), approximate="tanh")


@linear_gelu_tanh.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], weight.shape[0])
