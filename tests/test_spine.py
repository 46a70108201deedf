"""The spine, end to end on this checkout: build.toml → `hubkernels build` → build/<variant>/ → loaded.

`hubkernels.get_local_kernel(".")` must give an rms_norm that matches a float64 reference on fresh inputs,
and the real HF `kernels` package must load the very same build and return identical outputs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import ROOT

import hubkernels

DIMS = [1, 17, 2048, 4095]
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _reference(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    x64 = x.double()
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    return y * weight.double() if weight is not None else y


@pytest.mark.parametrize("with_weight", [False, True], ids=["no-weight", "weight"])
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_local_build_rms_norm_matches_float64(ltx_build, dtype: torch.dtype, dim: int, with_weight: bool) -> None:
    ltx = hubkernels.get_local_kernel(ROOT, backend="cpu")
    seed = torch.seed()  # fresh inputs every run; the seed is in the message if it fails
    x = torch.randn(3, 5, dim, dtype=dtype) * 3
    weight = (torch.rand(dim, dtype=dtype) + 0.5) if with_weight else None
    out = ltx.rms_norm(x, weight, 1e-6)
    ref = _reference(x, weight, 1e-6)
    assert out.dtype == dtype and out.shape == x.shape
    err = float((out.double() - ref).norm() / ref.norm())
    assert err < TOL[dtype], f"relative error {err:.2e} (seed {seed})"


def test_hf_kernels_loads_the_same_ltx_build_with_identical_outputs(ltx_build) -> None:
    kernels = pytest.importorskip("kernels")
    ours = hubkernels.get_local_kernel(ROOT, backend="cpu")
    theirs = kernels.get_local_kernel(ROOT, backend="cpu")
    # two imports of the one build/<variant>/ directory, not one module handed back twice
    assert theirs is not ours
    assert Path(theirs.__file__).parent.resolve() == Path(ours.__file__).parent.resolve()
    assert Path(ours.__file__).resolve().is_relative_to((ROOT / "build").resolve())
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(4, 7, 2048, dtype=dtype)
        w = torch.rand(2048, dtype=dtype) + 0.5
        out = theirs.rms_norm(x, w, 1e-6)
        err = float((out.double() - _reference(x, w, 1e-6)).norm() / _reference(x, w, 1e-6).norm())
        assert err < TOL[dtype], f"HF kernels' load of the build is wrong: relative error {err:.2e}"
        assert torch.equal(out, ours.rms_norm(x, w, 1e-6))
        assert torch.equal(theirs.gelu_tanh(x), ours.gelu_tanh(x))
