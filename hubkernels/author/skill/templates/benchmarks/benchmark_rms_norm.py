"""The benchmark declaration of my_kernels.rms_norm (kernel-builder's convention: benchmarks/benchmark*.py).

`hubkernels bench` times each workload (`benchmark_<w>`: our op) beside the formula model code writes by hand
(`verify_<w>`, "eager"), `torch.compile` of that formula and the peers below, in one run; `hubkernels verify`
fails the kernel when our op is slower than `torch.compile` of its formula on these shapes. `verify_<w>` on
float64 inputs is also the truth the error column compares with.

    hubkernels bench --dtype bf16                     # this machine's device, the shapes below
    hubkernels bench --device cpu --shape tokens=1024
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hubkernels.author.bench import Benchmark


class RMSNormBenchmark(Benchmark):
    # x is [batch, tokens, hidden]: a transformer's activations. CPUs get fewer tokens.
    shape = {"batch": 2, "tokens": 6144, "hidden": 2048}
    cpu_shape = {"tokens": 256}
    report_shape = ("batch", "tokens", "hidden")
    peers = {"rms_norm": {"F.rms_norm": lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps)}}

    def setup_rms_norm(self) -> tuple[torch.Tensor, torch.Tensor, float]:
        b, t, h = self.shape["batch"], self.shape["tokens"], self.shape["hidden"]
        return self.randn(b, t, h) * 3, 1 + 0.1 * self.randn(h), 1e-6

    def benchmark_rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return self.kernel.rms_norm(x, weight, eps)

    def verify_rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight
