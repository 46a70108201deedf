"""my_kernels: RMSNorm as a CPU and a CUDA kernel. A template: rename it, then replace the op.

Every op is out-of-place (returns new tensors, never writes its inputs), computes in fp32 and rounds
once. Each has a fake implementation, so ``torch.compile(fullgraph=True)`` traces straight through it,
and a registered backward, so it trains. Imports inside this package are relative: loaded from the
Hub, the package is imported under its build's unique id, not as ``my_kernels``.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _autograd, _fake, layers  # noqa: F401  (register the backward and the fake implementation)
from ._ops import ops

__all__ = ["layers", "rms_norm"]


def rms_norm(x: torch.Tensor, weight: Optional[torch.Tensor] = None, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim: ``x * rsqrt(mean(x^2) + eps)``, times ``weight`` ([D]) if given.

    x must be contiguous, float32, float16 or bfloat16; weight has x's dtype and device.
    """
    return ops.rms_norm(x, weight, float(eps))
