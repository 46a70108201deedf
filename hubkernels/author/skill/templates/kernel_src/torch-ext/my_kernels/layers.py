"""Kernel layers for `kernelize`: drop-in forwards for the modules these ops can replace.

A layer is stateless: kernelize binds its ``forward`` to an existing module instance, so it reads that
module's attributes and must compute exactly what the module's own forward computes. Where the kernel
does not cover a configuration it falls back to the module's own math. Map layers to exact classes
(``LayerMatch(torch.nn.RMSNorm)``), never to class names: other classes named RMSNorm differ.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._ops import ops

__all__ = ["RMSNorm"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class RMSNorm(nn.Module):
    """``torch.nn.RMSNorm``: reads ``normalized_shape``, ``eps`` (None means float32's machine
    epsilon, as torch computes it) and ``weight`` (None without elementwise_affine)."""

    has_backward = True  # the op has a registered backward (_autograd.py)
    can_torch_compile = True  # the op has a fake implementation (_fake.py)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if (
            len(self.normalized_shape) != 1
            or x.dtype not in _DTYPES
            or (weight is not None and weight.dtype != x.dtype)
        ):
            return F.rms_norm(x, self.normalized_shape, weight, self.eps)
        eps = self.eps if self.eps is not None else torch.finfo(torch.float32).eps
        return ops.rms_norm(x.contiguous(), weight, float(eps))
