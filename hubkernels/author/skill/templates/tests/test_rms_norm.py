"""my_kernels.rms_norm against a float64 reference, plus its errors, torch.compile, autograd and layer.

The kernel is built from this checkout with `hubkernels build` and loaded the way users load it. Each
case draws fresh random inputs from its own seed; a failure prints the seed, and MY_KERNELS_SEED=<seed>
replays it. CPU cases always run; CUDA cases (marked `gpu`) run where torch sees a GPU.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (rtol, atol) against the fp64 reference: fp32 math plus one rounding to the output dtype.
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (1e-2, 1e-2)}
# 1, odd, one 16-byte word of bf16, not a multiple of 8, LTX's width, past the register-resident
# rows (two passes), and odd and long (the element-by-element path).
DIMS = [1, 7, 8, 100, 2048, 2056, 4099]
DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
    ),
]


@pytest.fixture(scope="session")
def kernels():
    """device type -> the my_kernels module of this checkout's build for that backend."""
    import hubkernels
    from hubkernels.builder import build

    loaded = {}

    def get(device: str):
        if device not in loaded:
            result = build(ROOT, backend=device, quiet=True)
            loaded[device] = hubkernels.get_local_kernel(result.path, backend=device)
        return loaded[device]

    return get


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def kernel(kernels, device: str):
    return kernels(device)


@pytest.fixture
def gen() -> torch.Generator:
    seed = int(os.environ.get("MY_KERNELS_SEED") or secrets.randbits(62))
    print(f"seed {seed} (replay with MY_KERNELS_SEED={seed})")
    return torch.Generator().manual_seed(seed)


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype, device: str, std: float = 1.0) -> torch.Tensor:
    """Random normal values made on the CPU (reproducible from the seed), then moved to `device`."""
    return (torch.randn(*shape, generator=gen) * std).to(device=device, dtype=dtype)


def reference(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm in float64, from the definition."""
    x64 = x.double()
    out = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    return out * weight.double() if weight is not None else out


def poison_allocator(like: torch.Tensor) -> None:
    """Free a NaN-filled block the size of the coming output, so that an element the kernel forgets
    to write most likely reads back as NaN and fails the comparison."""
    block = torch.full_like(like, float("nan"))
    del block


def check_close(out: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    assert out.dtype == dtype and out.shape == expected.shape
    rtol, atol = TOLERANCE[dtype]
    torch.testing.assert_close(out.double().cpu(), expected.cpu(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("with_weight", [False, True], ids=["no_weight", "weight"])
def test_matches_float64_reference(kernel, device, gen, dtype, dim, with_weight):
    x = randn(gen, 3, 5, dim, dtype=dtype, device=device, std=3.0)
    weight = randn(gen, dim, dtype=dtype, device=device) if with_weight else None
    poison_allocator(x)
    out = kernel.rms_norm(x, weight, eps=1e-6)
    assert out.data_ptr() != x.data_ptr()  # out-of-place
    check_close(out, reference(x, weight, 1e-6), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_unaligned_rows_take_the_narrow_path(kernel, device, gen, dtype):
    """A contiguous view that starts one element into its buffer: no 16-byte alignment."""
    rows, dim = 6, 2048
    x = randn(gen, rows * dim + 1, dtype=dtype, device=device)[1:].view(rows, dim)
    assert x.is_contiguous() and x.data_ptr() % 16 != 0
    check_close(kernel.rms_norm(x, None, 1e-5), reference(x, None, 1e-5), dtype)


def test_empty_and_large_eps(kernel, device, gen):
    x = torch.empty(0, 64, device=device)
    assert kernel.rms_norm(x).shape == (0, 64)
    x = randn(gen, 4, 64, dtype=torch.float32, device=device)
    check_close(kernel.rms_norm(x, None, 10.0), reference(x, None, 10.0), torch.float32)


def test_errors_say_what_to_do(kernel, device):
    x = torch.randn(4, 8, device=device)
    with pytest.raises(RuntimeError, match="contiguous"):
        kernel.rms_norm(x.t())
    with pytest.raises(RuntimeError, match=r"must be \[8\]"):
        kernel.rms_norm(x, torch.ones(4, device=device))
    with pytest.raises(RuntimeError, match="dtype"):
        kernel.rms_norm(x, torch.ones(8, device=device, dtype=torch.float16))
    with pytest.raises(RuntimeError, match="supported"):
        kernel.rms_norm(x.to(torch.int32))


def test_torch_compile_traces_one_graph(kernel, device, gen):
    """fullgraph=True fails on any graph break, so this proves the op is visible to torch.compile."""
    torch._dynamo.reset()

    def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return kernel.rms_norm(x * 2, w, 1e-6) + 1

    x = randn(gen, 4, 16, 256, dtype=torch.float32, device=device)
    w = randn(gen, 256, dtype=torch.float32, device=device)
    torch.testing.assert_close(torch.compile(block, fullgraph=True)(x, w), block(x, w))


def test_backward_matches_autograd_of_the_reference(kernel, device, gen):
    x = randn(gen, 3, 7, 96, dtype=torch.float32, device=device).requires_grad_()
    w = randn(gen, 96, dtype=torch.float32, device=device).requires_grad_()
    g = randn(gen, 3, 7, 96, dtype=torch.float32, device=device)
    got = torch.autograd.grad(kernel.rms_norm(x, w, 1e-6), (x, w), g)
    want = torch.autograd.grad(reference(x, w, 1e-6), (x, w), g.double())
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-4, atol=1e-5)


def test_layer_replaces_exactly_torch_nn_rmsnorm(kernel, device, gen):
    """kernelize swaps the forward of torch.nn.RMSNorm modules (matched by exact class) and the
    model computes the same; a look-alike class is left alone."""
    import hubkernels

    if device == "cpu" and torch.cuda.is_available():
        pytest.skip("LocalLayerRepository loads the build for this machine's backend (CUDA here)")

    class LookAlike(nn.Module):  # same name as torch's class, different math
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    LookAlike.__name__ = "RMSNorm"
    model = nn.Sequential(nn.Linear(64, 64), nn.RMSNorm(64, eps=1e-5), LookAlike()).to(device)
    with torch.no_grad():
        model[1].weight.copy_(randn(gen, 64, dtype=torch.float32, device=device))
    x = randn(gen, 2, 10, 64, dtype=torch.float32, device=device)
    with torch.no_grad():
        want = model(x)
    variant_dir = Path(kernel.__file__).parent
    layer = hubkernels.LocalLayerRepository(variant_dir, layer_name="RMSNorm")
    mapping = {hubkernels.LayerMatch(nn.RMSNorm): {device: layer}}
    with hubkernels.use_kernel_mapping(mapping):
        hubkernels.kernelize(model, mode=hubkernels.Mode.INFERENCE, device=device)
    assert set(hubkernels.kernelized_layers(model)) == {"1"}
    with torch.no_grad():
        torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-5)
