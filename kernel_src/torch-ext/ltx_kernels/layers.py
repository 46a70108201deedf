"""Drop-in forwards for the modules LTX-Video (and transformers models) use, for `kernelize`.

Each layer is stateless: it reads the attributes of the module it is bound to (with
``types.MethodType(Layer.forward, module)``) and matches that module's own forward. Where a module is
in a configuration the kernels do not cover (weight dtype different from the input, GELU without the
tanh approximation), the layer computes exactly what the original module computes, in eager torch.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ._linear import linear_gelu_tanh
from ._ops import ops

__all__ = ["DiffusersGELU", "GeluTanh", "LlamaRMSNorm", "RMSNorm", "TorchRMSNorm"]


def _rms_normalize_fp32(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) in fp32, as the eager RMSNorm implementations compute it."""
    xf = x.to(torch.float32)
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)


class RMSNorm(nn.Module):
    """``diffusers.models.normalization.RMSNorm``: uses ``eps``, ``weight`` (None without
    elementwise_affine) and ``bias`` (optional)."""

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        weight: Optional[torch.Tensor] = self.weight
        bias: Optional[torch.Tensor] = getattr(self, "bias", None)
        if weight is not None and weight.dtype != hidden_states.dtype:
            # diffusers normalises in fp32, casts to a half-precision weight's dtype, then multiplies.
            out = hidden_states * torch.rsqrt(hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True) + self.eps)
            if weight.dtype in (torch.float16, torch.bfloat16):
                out = out.to(weight.dtype)
            out = out * weight
        else:
            out = ops.rms_norm(hidden_states.contiguous(), weight, float(self.eps))
        if bias is not None:
            out = out + bias
        return out


class TorchRMSNorm(nn.Module):
    """``torch.nn.RMSNorm``: uses ``normalized_shape``, ``eps`` (None = machine epsilon of the
    accumulation dtype, as torch does) and ``weight`` (None without elementwise_affine)."""

    has_backward = True
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight: Optional[torch.Tensor] = self.weight
        if weight is not None and weight.dtype != x.dtype:
            return F.rms_norm(x, self.normalized_shape, weight, self.eps)
        eps = self.eps
        if eps is None:
            eps = torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps
        dims = len(self.normalized_shape)
        if dims == 1:
            return ops.rms_norm(x.contiguous(), weight, float(eps))
        # Normalising over several trailing dims = over one flattened dim.
        flat = x.contiguous().flatten(-dims)
        out = ops.rms_norm(flat, weight.flatten() if weight is not None else None, float(eps))
        return out.view(x.shape)


class LlamaRMSNorm(nn.Module):
    """transformers' ``LlamaRMSNorm`` family: ``weight * normalize(x)``, eps in ``variance_epsilon``."""

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        weight: torch.Tensor = self.weight
        if weight.dtype != hidden_states.dtype:
            input_dtype = hidden_states.dtype
            return weight * _rms_normalize_fp32(hidden_states, self.variance_epsilon).to(input_dtype)
        return ops.rms_norm(hidden_states.contiguous(), weight, float(self.variance_epsilon))


class GeluTanh(nn.Module):
    """GELU with the tanh approximation: ``torch.nn.GELU(approximate="tanh")``, transformers'
    ``GELUTanh`` / ``NewGELUActivation``. A ``torch.nn.GELU`` with another ``approximate`` keeps
    torch's GELU."""

    has_backward = True
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        approximate = getattr(self, "approximate", "tanh")
        if approximate != "tanh":
            return F.gelu(input, approximate=approximate)
        return ops.gelu_tanh(input.contiguous())


class DiffusersGELU(nn.Module):
    """``diffusers.models.activations.GELU``: ``proj`` (Linear) then GELU; the kernel when
    ``approximate == "tanh"`` (LTX-Video's feed-forward), torch's GELU otherwise."""

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        proj = self.proj
        if (self.approximate == "tanh" and hidden_states.is_cuda and proj.bias is not None
                and hidden_states.dtype in (torch.bfloat16, torch.float16) and not torch.is_grad_enabled()):
            # Inference on CUDA: bias + tanh-GELU run in the matmul's cuBLASLt epilogue, so the [.., 4D]
            # activation is written once instead of written, read and written again (LTX: ~100 us a block).
            return linear_gelu_tanh(hidden_states, proj.weight, proj.bias)
        hidden_states = proj(hidden_states)
        if self.approximate != "tanh":
            return F.gelu(hidden_states, approximate=self.approximate)
        return ops.gelu_tanh(hidden_states.contiguous())
