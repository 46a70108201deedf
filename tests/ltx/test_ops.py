"""ltx-kernels correctness: every op against a float64 reference, errors, torch.compile, autograd, layers.

The kernel is this checkout's build, loaded the way users load it (the session fixture `ltx`). Every
correctness case draws fresh random inputs from its own seed; a failure prints the seed, and
LTX_TEST_SEED=<seed> replays it. The same cases run on CUDA under `pytest -m gpu` (the `cuda` device
parameter), against the CUDA build of the kernel.
"""

from __future__ import annotations

import inspect
import os
import platform
import re
import secrets
import shutil
import subprocess
import types
from dataclasses import dataclass
from pathlib import Path

import ltx_reference as ref
import pytest
import torch
from ltx_reference import rope_freqs
from torch import nn

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
HIDDEN = [1, 17, 127, 2048, 2050, 4096]  # 1, odd, below/above a vector, LTX-2B width, + a tail, 13B width
ROPE_HIDDEN = [2, 18, 128, 2048, 2050, 4096]  # RoPE needs even widths
# Modulation / gate layouts: one row per batch, one per token, and both as `ada.unbind(2)` views of
# a [B, T, 6, D] tensor (strided, read in place).
FORMS = ["batch", "token", "unbind_batch", "unbind_token"]

DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
    ),
]

_backend_ok: dict[str, bool] = {}


def _require_backend(ltx, dev: str) -> None:
    """Skip unless the loaded build implements `dev` (a CUDA build has no CPU kernels, and vice versa)."""
    if dev not in _backend_ok:
        try:
            ltx.gelu_tanh(torch.zeros(1, device=dev))
            _backend_ok[dev] = True
        except NotImplementedError:
            _backend_ok[dev] = False
    if not _backend_ok[dev]:
        pytest.skip(f"the loaded ltx-kernels variant has no {dev} implementation")


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest, ltx) -> str:
    _require_backend(ltx, request.param)
    return request.param


@pytest.fixture(autouse=True)
def _cpu_unless_parametrized(request: pytest.FixtureRequest, ltx) -> None:
    """Tests without a `device` parameter (errors, compile, autograd, layers) run the CPU kernels."""
    if "device" not in request.fixturenames:
        _require_backend(ltx, "cpu")


@dataclass
class Rand:
    """Fresh random tensors from one seed, made on the CPU (reproducible) and moved to `device`."""

    seed: int
    device: str

    def __post_init__(self) -> None:
        self.gen = torch.Generator().manual_seed(self.seed)

    def normal(self, *shape: int, dtype: torch.dtype = torch.float32, std: float = 1.0) -> torch.Tensor:
        t = torch.randn(*shape, generator=self.gen, dtype=torch.float32) * std
        return t.to(device=self.device, dtype=dtype)

    def cos_sin(self, *shape: int) -> tuple[torch.Tensor, torch.Tensor]:
        angle = torch.rand(*shape, generator=self.gen, dtype=torch.float64) * 2 * torch.pi
        return angle.cos().float().to(self.device), angle.sin().float().to(self.device)

    def check(self, actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
        """actual (in `dtype`) matches the fp64 reference; NaN anywhere fails."""
        assert actual.dtype == dtype, f"output dtype {actual.dtype}, expected {dtype}"
        assert actual.shape == expected.shape
        torch.testing.assert_close(
            actual.double(),
            expected.to(actual.device),
            **ref.tolerance(dtype),
            msg=lambda m: f"{m}\n(seed {self.seed}; replay with LTX_TEST_SEED={self.seed})",
        )


@pytest.fixture
def rand(device: str) -> Rand:
    seed = int(os.environ.get("LTX_TEST_SEED") or secrets.randbits(62))
    return Rand(seed, device)


def rows_for(dim: int) -> tuple[int, int]:
    """(batch, tokens): a few rows, fewer when the rows are long."""
    return (2, 2) if dim > 2048 else (2, 4) if dim == 2048 else (2, 5)


def poison(*likes: torch.Tensor) -> None:
    """Allocate and free NaN-filled blocks the size of the coming outputs, so an output element the
    kernel forgets to write most likely reads back as NaN (and fails the comparison)."""
    blocks = [torch.full_like(t, float("nan")) for t in likes]
    del blocks


def fresh(out: torch.Tensor, *inputs: torch.Tensor) -> None:
    """out is a new tensor: no input's memory is reused or written."""
    for t in inputs:
        assert out.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()


def modulation(rand: Rand, form: str, b: int, s: int, d: int, dtype: torch.dtype, count: int) -> list[torch.Tensor]:
    """`count` modulation tensors for x of shape [b, s, d], laid out as `form`."""
    if form == "batch":
        return [rand.normal(b, 1, d, dtype=dtype, std=0.5) for _ in range(count)]
    if form == "token":
        return [rand.normal(b, s, d, dtype=dtype, std=0.5) for _ in range(count)]
    t = 1 if form == "unbind_batch" else s
    ada = rand.normal(b, t, 6, d, dtype=dtype, std=0.5)
    views = list(ada.unbind(2))[:count]
    assert d == 1 or not views[0].is_contiguous()
    return views


# ---------------------------------------------------------------------------------------------------
# Correctness against the fp64 reference


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", HIDDEN)
@pytest.mark.parametrize("with_weight", [False, True], ids=["no_weight", "weight"])
def test_rms_norm_matches_reference(ltx, rand: Rand, dtype, dim, with_weight):
    b, s = rows_for(dim)
    x = rand.normal(b, s, dim, dtype=dtype, std=3.0)
    weight = rand.normal(dim, dtype=dtype) if with_weight else None
    poison(x)
    out = ltx.rms_norm(x, weight, eps=1e-6)
    fresh(out, x)
    rand.check(out, ref.rms_norm(x, weight, 1e-6), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", HIDDEN)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("with_weight", [False, True], ids=["no_weight", "weight"])
def test_rms_norm_modulate_matches_reference(ltx, rand: Rand, dtype, dim, form, with_weight):
    b, s = rows_for(dim)
    x = rand.normal(b, s, dim, dtype=dtype, std=2.0)
    scale, shift = modulation(rand, form, b, s, dim, dtype, 2)
    weight = rand.normal(dim, dtype=dtype) if with_weight else None
    poison(x)
    out = ltx.rms_norm_modulate(x, scale, shift, weight, eps=1e-6)
    fresh(out, x, scale, shift)
    rand.check(out, ref.rms_norm_modulate(x, scale, shift, weight, 1e-6), dtype)


# The gate of add_rms_norm_modulate: none (h = x + y), one row per batch, or per token as a strided
# view with strides of its own (scale/shift use others).
GATES = [None, "batch", "unbind_token"]


def _gate(rand: Rand, form, b: int, s: int, d: int, dtype: torch.dtype):
    return None if form is None else modulation(rand, form, b, s, d, dtype, 1)[0]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", HIDDEN)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("gate_form", GATES, ids=lambda g: f"gate_{g}")
@pytest.mark.parametrize("with_weight", [False, True], ids=["no_weight", "weight"])
def test_add_rms_norm_modulate_matches_reference(ltx, rand: Rand, dtype, dim, form, gate_form, with_weight):
    b, s = rows_for(dim)
    x = rand.normal(b, s, dim, dtype=dtype, std=2.0)
    y = rand.normal(b, s, dim, dtype=dtype, std=2.0)
    scale, shift = modulation(rand, form, b, s, dim, dtype, 2)
    gate = _gate(rand, gate_form, b, s, dim, dtype)
    weight = rand.normal(dim, dtype=dtype) if with_weight else None
    poison(x, y)
    h, out = ltx.add_rms_norm_modulate(x, y, scale, shift, gate, weight, eps=1e-6)
    fresh(h, x, y, scale, shift)
    fresh(out, x, y, scale, shift, h)
    h_ref, out_ref = ref.add_rms_norm_modulate(x, y, scale, shift, gate, weight, 1e-6)
    rand.check(h, h_ref, dtype)
    rand.check(out, out_ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [17, 2048, 2050])
@pytest.mark.parametrize("gate_form", GATES, ids=lambda g: f"gate_{g}")
@pytest.mark.parametrize("with_weight", [False, True], ids=["no_weight", "weight"])
def test_add_rms_norm_modulate_equals_the_unfused_ops_bit_for_bit(ltx, rand: Rand, dtype, dim, gate_form, with_weight):
    """The fused op is a drop-in for `x + y` (or gated_residual) followed by rms_norm_modulate on the
    same device: h is rounded once as they round it, and the norm reads the rounded h in the same order."""
    b, s = rows_for(dim)
    x = rand.normal(b, s, dim, dtype=dtype, std=2.0)
    y = rand.normal(b, s, dim, dtype=dtype, std=2.0)
    shift, scale = modulation(rand, "unbind_batch", b, s, dim, dtype, 2)
    gate = _gate(rand, gate_form, b, s, dim, dtype)
    weight = rand.normal(dim, dtype=dtype) if with_weight else None
    h, out = ltx.add_rms_norm_modulate(x, y, scale, shift, gate, weight, eps=1e-6)
    h_unfused = x + y if gate is None else ltx.gated_residual(x, y, gate)
    out_unfused = ltx.rms_norm_modulate(h_unfused, scale, shift, weight, eps=1e-6)
    assert torch.equal(h, h_unfused), f"seed {rand.seed}"
    assert torch.equal(out, out_unfused), f"seed {rand.seed}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", ROPE_HIDDEN)
def test_rope_interleaved_qk_matches_reference(ltx, rand: Rand, dtype, dim):
    b, s = rows_for(dim)
    q = rand.normal(b, s, dim, dtype=dtype, std=2.0)
    k = rand.normal(b, s, dim, dtype=dtype, std=2.0)
    cos, sin = rand.cos_sin(b, s, dim)
    poison(q, k)
    q_out, k_out = ltx.rope_interleaved_qk(q, k, cos, sin)
    fresh(q_out, q, k, cos, sin)
    fresh(k_out, q, k, cos, sin, q_out)
    q_ref, k_ref = ref.rope_interleaved_qk(q, k, cos, sin)
    rand.check(q_out, q_ref, dtype)
    rand.check(k_out, k_ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", HIDDEN)
def test_gelu_tanh_matches_reference(ltx, rand: Rand, dtype, dim):
    b, s = rows_for(dim)
    x = rand.normal(b, s, dim, dtype=dtype, std=3.0)
    poison(x)
    out = ltx.gelu_tanh(x)
    fresh(out, x)
    rand.check(out, ref.gelu_tanh(x), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gelu_tanh_over_the_whole_range(ltx, device, dtype):
    """Zeros, tiny, saturated and large inputs of both signs (the exp/tanh tails)."""
    values = [0.0, -0.0, 1e-6, -1e-6, 0.5, -0.5, 3.0, -3.0, 6.0, -6.0, 10.0, -10.0, 20.0, -20.0, 60.0, -60.0]
    if dtype != torch.float16:
        values += [1e4, -1e4, 3e38 if dtype == torch.float32 else 1e38, -1e30]
    x = torch.tensor(values, dtype=torch.float64).to(device=device, dtype=dtype)
    out = ltx.gelu_tanh(x)
    torch.testing.assert_close(out.double(), ref.gelu_tanh(x), **ref.tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gelu_tanh_of_infinities_and_nan(ltx, device, dtype):
    """gelu's limits: -inf gives 0 (not -inf * 0 = NaN), +inf gives +inf, NaN stays NaN."""
    x = torch.tensor(
        [-float("inf"), float("inf"), float("nan"), -1e4 if dtype != torch.float16 else -6e4],
        dtype=dtype,
        device=device,
    )
    out = ltx.gelu_tanh(x).double().cpu()
    assert out[0] == 0 and out[1] == float("inf") and out[2].isnan() and out[3] == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", HIDDEN)
@pytest.mark.parametrize("form", FORMS)
def test_gated_residual_matches_reference(ltx, rand: Rand, dtype, dim, form):
    b, s = rows_for(dim)
    x = rand.normal(b, s, dim, dtype=dtype, std=2.0)
    y = rand.normal(b, s, dim, dtype=dtype, std=2.0)
    (gate,) = modulation(rand, form, b, s, dim, dtype, 1)
    poison(x)
    out = ltx.gated_residual(x, y, gate)
    fresh(out, x, y, gate)
    rand.check(out, ref.gated_residual(x, y, gate), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", ROPE_HIDDEN)
def test_qk_rms_norm_rope_matches_reference(ltx, rand: Rand, dtype, dim):
    b, s = rows_for(dim)
    q = rand.normal(b, s, dim, dtype=dtype, std=3.0)
    k = rand.normal(b, s, dim, dtype=dtype, std=3.0)
    weight_q = rand.normal(dim, dtype=dtype)
    weight_k = rand.normal(dim, dtype=dtype)
    cos, sin = rand.cos_sin(b, s, dim)
    poison(q, k)
    q_out, k_out = ltx.qk_rms_norm_rope(q, k, weight_q, weight_k, cos, sin, eps=1e-5)
    fresh(q_out, q, k)
    fresh(k_out, q, k, q_out)
    q_ref, k_ref = ref.qk_rms_norm_rope(q, k, weight_q, weight_k, cos, sin, 1e-5)
    rand.check(q_out, q_ref, dtype)
    rand.check(k_out, k_ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", ROPE_HIDDEN + [12, 14, 16])  # dim % 6 = 0, 2, 4: padding channels or none
def test_qk_rms_norm_rope_grid_matches_reference(ltx, rand: Rand, dtype, dim):
    b, s = rows_for(dim)
    q = rand.normal(b, s, dim, dtype=dtype, std=3.0)
    k = rand.normal(b, s, dim, dtype=dtype, std=3.0)
    weight_q = rand.normal(dim, dtype=dtype)
    weight_k = rand.normal(dim, dtype=dtype)
    # Positions as LTX pipelines make them (frame / base frames, ...), spread past [0, 1) for larger angles.
    pos = (torch.rand(b, s, 3, generator=rand.gen) * 3 - 1).to(rand.device)
    freqs = rope_freqs(dim, 10000.0, torch.device(rand.device))
    poison(q, k)
    q_out, k_out = ltx.qk_rms_norm_rope_grid(q, k, weight_q, weight_k, pos, freqs, eps=1e-5)
    fresh(q_out, q, k)
    fresh(k_out, q, k, q_out)
    cos, sin = ref.rope_tables(pos, freqs, dim)
    q_ref, k_ref = ref.qk_rms_norm_rope(q, k, weight_q, weight_k, cos, sin, 1e-5)
    rand.check(q_out, q_ref, dtype)
    rand.check(k_out, k_ref, dtype)


@pytest.mark.parametrize("dim", [2048, 2050])
def test_qk_rms_norm_rope_grid_equals_the_table_op(ltx, rand: Rand, dim):
    """Angles computed in the kernel give what the prologue gives with diffusers' tables (rope_tables)."""
    import importlib

    rope = importlib.import_module(f"{ltx.__name__}._rope_tables")
    b, s = rows_for(dim)
    q, k = rand.normal(b, s, dim, std=3.0), rand.normal(b, s, dim, std=3.0)
    weight_q, weight_k = rand.normal(dim), rand.normal(dim)
    grid = (torch.rand(b, s, 3, generator=rand.gen) * 2).to(rand.device)
    pos, freqs = rope.rope_positions(grid, dim, 10000.0)
    assert torch.equal(pos, grid) and pos.data_ptr() != grid.data_ptr()
    cos, sin = rope.rope_tables(grid, dim, 10000.0)
    grid_out = ltx.qk_rms_norm_rope_grid(q, k, weight_q, weight_k, pos, freqs, eps=1e-5)
    table_out = ltx.qk_rms_norm_rope(q, k, weight_q, weight_k, cos, sin, eps=1e-5)
    for got, want in zip(grid_out, table_out):
        torch.testing.assert_close(got, want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dev", ["cpu", "meta"])
def test_qk_rms_norm_rope_grid_rejects_bad_positions(ltx, dev):
    x, w = _t(2, 3, 12, device=dev), _t(12, device=dev)
    freqs = _t(2, device=dev)
    with pytest.raises(RuntimeError, match=r"pos has shape \[2, 3, 2\] but must be \[2, 3, 3\] \(positions"):
        ltx.qk_rms_norm_rope_grid(x, x, w, w, _t(2, 3, 2, device=dev), freqs)
    with pytest.raises(
        RuntimeError, match=r"pos has dtype torch.float16 but positions .* are float32; pass pos.float\(\)"
    ):
        ltx.qk_rms_norm_rope_grid(x, x, w, w, _t(2, 3, 3, dtype=torch.float16, device=dev), freqs)
    with pytest.raises(RuntimeError, match=r"freqs has shape \[3\] but must be \[2\] \(RoPE frequencies"):
        ltx.qk_rms_norm_rope_grid(x, x, w, w, _t(2, 3, 3, device=dev), _t(3, device=dev))
    with pytest.raises(RuntimeError, match=r"must be even"):
        ltx.qk_rms_norm_rope_grid(
            _t(2, 3, 13, device=dev),
            _t(2, 3, 13, device=dev),
            _t(13, device=dev),
            _t(13, device=dev),
            _t(2, 3, 3, device=dev),
            freqs,
        )


def test_qk_rms_norm_rope_grid_compiles_with_its_positions_op(ltx):
    """rope_positions + qk_rms_norm_rope_grid in one fullgraph torch.compile graph: eager's results."""
    import importlib

    rope = importlib.import_module(f"{ltx.__name__}._rope_tables")

    def prologue(grid, q, k, wq, wk):
        pos, freqs = rope.rope_positions(grid, q.shape[-1], 10000.0)
        return ltx.qk_rms_norm_rope_grid(q, k, wq, wk, pos, freqs)

    r = Rand(secrets.randbits(62), "cpu")
    args = (torch.rand(2, 8, 3, generator=r.gen), r.normal(2, 8, 64), r.normal(2, 8, 64), r.normal(64), r.normal(64))
    torch._dynamo.reset()
    for got, want in zip(torch.compile(prologue, fullgraph=True)(*args), prologue(*args)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_modulation_layouts_that_need_a_copy(ltx, rand: Rand, dtype):
    """scale and shift in different layouts, or with a strided last dim, still give the right answer."""
    b, s, d = 2, 5, 40
    x = rand.normal(b, s, d, dtype=dtype)
    per_batch = rand.normal(b, 1, d, dtype=dtype, std=0.5)
    per_token = rand.normal(b, s, d, dtype=dtype, std=0.5)
    every_other = rand.normal(b, 1, 2 * d, dtype=dtype, std=0.5)[..., ::2]
    for scale, shift in (
        (per_batch, per_token),
        (per_token, per_batch),
        (every_other, per_batch),
        (per_token, every_other),
    ):
        rand.check(ltx.rms_norm_modulate(x, scale, shift), ref.rms_norm_modulate(x, scale, shift), dtype)
    rand.check(ltx.gated_residual(x, x, every_other), ref.gated_residual(x, x, every_other), dtype)
    for gate in (every_other, per_token):
        for got, want in zip(
            ltx.add_rms_norm_modulate(x, per_token, every_other, per_batch, gate),
            ref.add_rms_norm_modulate(x, per_token, every_other, per_batch, gate),
        ):
            rand.check(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unaligned_inputs(ltx, rand: Rand, dtype):
    """Contiguous tensors that start one element into their storage (no 16-byte alignment)."""
    b, s, d = 2, 3, 256

    def shifted(*shape: int, dtype: torch.dtype = dtype) -> torch.Tensor:
        n = 1
        for k in shape:
            n *= k
        return rand.normal(n + 1, dtype=dtype)[1:].view(*shape)

    x, y, q, k = (shifted(b, s, d) for _ in range(4))
    scale, shift, gate, w = shifted(b, 1, d), shifted(b, 1, d), shifted(b, s, d), shifted(d)
    cos, sin = shifted(b, s, d, dtype=torch.float32), shifted(b, s, d, dtype=torch.float32)
    rand.check(ltx.rms_norm(x, w), ref.rms_norm(x, w), dtype)
    rand.check(ltx.rms_norm_modulate(x, scale, shift, w), ref.rms_norm_modulate(x, scale, shift, w), dtype)
    rand.check(ltx.gelu_tanh(x), ref.gelu_tanh(x), dtype)
    rand.check(ltx.gated_residual(x, y, gate), ref.gated_residual(x, y, gate), dtype)
    for got, want in zip(
        ltx.add_rms_norm_modulate(x, y, scale, shift, gate, w), ref.add_rms_norm_modulate(x, y, scale, shift, gate, w)
    ):
        rand.check(got, want, dtype)
    for got, want in zip(ltx.rope_interleaved_qk(q, k, cos, sin), ref.rope_interleaved_qk(q, k, cos, sin)):
        rand.check(got, want, dtype)
    for got, want in zip(ltx.qk_rms_norm_rope(q, k, w, w, cos, sin), ref.qk_rms_norm_rope(q, k, w, w, cos, sin)):
        rand.check(got, want, dtype)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_ltx_video_shapes_on_gpu(ltx):
    """LTX-Video 2B at 768x512, 121 frames, with guidance: [2, 6144, 2048] bf16, FF width 8192."""
    _require_backend(ltx, "cuda")
    rand = Rand(int(os.environ.get("LTX_TEST_SEED") or secrets.randbits(62)), "cuda")
    b, s, d, dt = 2, 6144, 2048, torch.bfloat16
    x, y, q, k = (rand.normal(b, s, d, dtype=dt) for _ in range(4))
    shift, scale, gate = rand.normal(b, 1, 6, d, dtype=dt, std=0.5).unbind(2)[:3]
    w = rand.normal(d, dtype=dt)
    cos, sin = rand.cos_sin(b, s, d)
    rand.check(ltx.rms_norm(x), ref.rms_norm(x), dt)
    rand.check(ltx.rms_norm_modulate(x, scale, shift), ref.rms_norm_modulate(x, scale, shift), dt)
    rand.check(ltx.gated_residual(x, y, gate), ref.gated_residual(x, y, gate), dt)
    h, out = ltx.add_rms_norm_modulate(x, y, scale, shift)
    h_ref, out_ref = ref.add_rms_norm_modulate(x, y, scale, shift)
    rand.check(h, h_ref, dt)
    rand.check(out, out_ref, dt)
    assert torch.equal(h, x + y) and torch.equal(out, ltx.rms_norm_modulate(x + y, scale, shift))
    for got, want in zip(ltx.rope_interleaved_qk(q, k, cos, sin), ref.rope_interleaved_qk(q, k, cos, sin)):
        rand.check(got, want, dt)
    for got, want in zip(ltx.qk_rms_norm_rope(q, k, w, w, cos, sin), ref.qk_rms_norm_rope(q, k, w, w, cos, sin)):
        rand.check(got, want, dt)
    h = rand.normal(b, s, 4 * d, dtype=dt, std=3.0)
    rand.check(ltx.gelu_tanh(h), ref.gelu_tanh(h), dt)


def test_nan_stays_in_its_row(ltx, rand: Rand):
    """A NaN poisons its own row of a row reduction (or its own element), never a neighbour."""
    x = rand.normal(2, 3, 64)
    x[0, 1, 5] = float("nan")
    out = ltx.rms_norm(x)
    assert out[0, 1].isnan().all()
    nan_free = torch.ones(2, 3, dtype=torch.bool)
    nan_free[0, 1] = False
    assert not out[nan_free].isnan().any()
    g = ltx.gelu_tanh(x)
    assert g.isnan().sum() == 1 and g[0, 1, 5].isnan()


def test_empty_inputs_give_empty_outputs(ltx, device):
    x = torch.empty(2, 0, 16, device=device)
    assert ltx.rms_norm(x).shape == x.shape
    assert ltx.gelu_tanh(x).shape == x.shape
    assert ltx.gated_residual(x, x, torch.empty(2, 1, 16, device=device)).shape == x.shape
    h, out = ltx.add_rms_norm_modulate(x, x, torch.empty(2, 1, 16, device=device), torch.empty(2, 1, 16, device=device))
    assert h.shape == out.shape == x.shape
    cos = torch.empty(2, 0, 16, device=device)
    q_out, k_out = ltx.rope_interleaved_qk(x, x, cos, cos)
    assert q_out.shape == k_out.shape == x.shape
    # a per-batch scale beside a per-token shift of no tokens: nothing to broadcast (the fuzzer found a copy_ error)
    row, none = torch.empty(2, 1, 16, device=device), torch.empty(2, 0, 16, device=device)
    assert ltx.rms_norm_modulate(x, row, none).shape == x.shape
    h, out = ltx.add_rms_norm_modulate(x, x, none, row, row)
    assert h.shape == out.shape == x.shape


def test_thread_count_does_not_change_results(ltx, rand: Rand):
    """Rows are independent: one thread or several give bit-identical outputs."""
    if rand.device != "cpu":
        pytest.skip("CPU threading")
    x = rand.normal(64, 2048, dtype=torch.bfloat16)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = (ltx.rms_norm(x), ltx.gelu_tanh(x))
        torch.set_num_threads(max(2, before))
        many = (ltx.rms_norm(x), ltx.gelu_tanh(x))
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, many):
        assert torch.equal(a, b)


CPU_OPS = (
    "rms_norm",
    "rms_norm_modulate",
    "add_rms_norm_modulate",
    "rope_interleaved_qk",
    "gelu_tanh",
    "gated_residual",
    "qk_rms_norm_rope",
    "qk_rms_norm_rope_grid",
)
_RUNNER = re.compile(
    r"ltx_cpu::run_(avx512bf16|avx512|avx2|baseline)<ltx_cpu::(\w+)\(.*?operator\(\)<(?:ltx_cpu::)?(\w+)>"
)


def test_cpu_ops_are_compiled_once_per_isa(ltx):
    """Every ltx_cpu op and storage type has one compilation per ISA (vec.h's run_avx512 / run_avx2 /
    run_baseline, and run_avx512bf16 for bf16) with everything it calls inlined: a helper left out of line
    would be compiled once, for baseline x86-64 only (about 2x slower, silently)."""
    nm = shutil.which("nm")
    if nm is None or platform.machine() != "x86_64":
        pytest.skip("needs binutils' nm on x86_64")
    (so,) = Path(ltx.__file__).parent.glob("*.so")
    symbols = subprocess.run([nm, "-C", "--defined-only", str(so)], capture_output=True, text=True, check=True).stdout
    text = [
        line.split(" ", 2)[2]
        for line in symbols.splitlines()
        if "ltx_cpu::" in line and line.split(" ", 2)[1] in "tTwW"
    ]
    runners = {m.groups() for m in map(_RUNNER.search, text) if m}
    assert runners == (
        {
            (isa, op, t)
            for isa in ("avx512", "avx2", "baseline")
            for op in CPU_OPS
            for t in ("float", "BFloat16", "Half", "double")
        }
        | {("avx512bf16", op, "BFloat16") for op in CPU_OPS}
    )
    entry = set(CPU_OPS) | {"prefer_huge_pages", "stream_outputs", "cpu_has_avx512bf16"}
    functions = [(name, re.match(r"(?:\w+ )?ltx_cpu::(\w+)\(", name)) for name in text if not _RUNNER.search(name)]
    out_of_line = [name for name, m in functions if m is None or m.group(1) not in entry]
    assert not out_of_line, "\n".join(out_of_line)


def _last_level_cache_bytes() -> int:
    """cpu0's largest cache, read from sysfs as the kernel's memory.cpp reads it (0 when unknown)."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip()
        sizes.append(int(text[:-1]) << {"K": 10, "M": 20}[text[-1]] if text[-1] in "KM" else int(text))
    return max(sizes, default=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_streamed_outputs_equal_small_unstreamed_calls_bit_for_bit(ltx, dtype):
    """Past half the last-level cache the CPU ops store their outputs non-temporally from each row's first 64-byte
    boundary on. Rows of 2049 elements start at every alignment: each must come out exactly as in a small
    call of 32 rows, which stays in cache."""
    cache = _last_level_cache_bytes()
    if not 0 < cache <= 256 << 20:
        pytest.skip(f"last-level cache {cache} bytes: unknown, or too large to pass in a test")
    dim, gen = 2049, torch.Generator().manual_seed(7)
    rows = cache // (2 * dim * dtype.itemsize) + 1  # in + out alone reach half the cache
    x = torch.randn(1, rows, dim, generator=gen).to(dtype)
    y = torch.randn(1, rows, dim, generator=gen).to(dtype)
    row = (0.1 * torch.randn(1, 1, dim, generator=gen)).to(dtype)
    w = (1 + 0.1 * torch.randn(dim, generator=gen)).to(dtype)
    ops = {
        "rms_norm": lambda a, b: ltx.rms_norm(a, w, 1e-6),
        "rms_norm_modulate": lambda a, b: ltx.rms_norm_modulate(a, row, row, None, 1e-6),
        "add_rms_norm_modulate": lambda a, b: ltx.add_rms_norm_modulate(a, b, row, row, row, w, 1e-6),
        "gelu_tanh": lambda a, b: ltx.gelu_tanh(a),
        "gated_residual": lambda a, b: ltx.gated_residual(a, b, row),
    }

    def outputs(got):  # type: ignore[no-untyped-def]
        return got if isinstance(got, tuple) else (got,)

    for name, op in ops.items():
        big = outputs(op(x, y))
        small = [outputs(op(x[:, i : i + 32].contiguous(), y[:, i : i + 32].contiguous())) for i in range(0, rows, 32)]
        for n, b in enumerate(big):
            assert torch.equal(b, torch.cat([s[n] for s in small], dim=1)), name


def test_every_isa_compilation_converts_like_the_scalar_code(tmp_path):
    """The ops run only the best ISA this CPU has, so their tests never reach the AVX2 or baseline code on an
    AVX-512 machine. tests/ltx/cpp/vec_isa_check.cpp runs each compilation of vec.h this CPU can execute: every
    fp16/bf16 pattern widened, 65k+ floats narrowed, map_row at every offset (streamed or not) and inv_rms,
    against convert.h's scalar conversions, bit for bit."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("needs a C++ compiler")
    root = Path(__file__).resolve().parents[2]
    exe = tmp_path / "vec_isa_check"
    subprocess.run(
        [
            cxx,
            "-std=c++20",
            "-O2",
            "-fno-trapping-math",
            "-Wno-psabi",
            f"-I{root / 'kernel_src/ltx_cpu'}",
            str(root / "tests/ltx/cpp/vec_isa_check.cpp"),
            "-o",
            str(exe),
        ],
        check=True,
        capture_output=True,
    )
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "ok baseline" in run.stdout and "FAIL" not in run.stdout, run.stdout
    if platform.machine() == "x86_64":
        assert "ok avx2" in run.stdout or "skip avx2" in run.stdout, run.stdout


# ---------------------------------------------------------------------------------------------------
# Clear errors before any work. "meta" is what torch.compile traces with: the fake implementations
# must reject the same mistakes with the same advice.

ERROR_DEVICES = ["cpu", "meta"]


def _t(*shape: int, dtype: torch.dtype = torch.float32, device: str = "cpu") -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype).to(device)


@pytest.mark.parametrize("dev", ERROR_DEVICES)
def test_dtype_mismatch_says_how_to_fix(ltx, dev):
    x = _t(2, 3, 16, dtype=torch.bfloat16, device=dev)
    with pytest.raises(
        RuntimeError, match=r"ltx_kernels.rms_norm: weight has dtype .* but x has .*pass weight.to\(x.dtype\)"
    ):
        ltx.rms_norm(x, _t(16, device=dev))
    with pytest.raises(RuntimeError, match=r"ltx_kernels.gated_residual: gate has dtype"):
        ltx.gated_residual(x, x, _t(2, 1, 16, device=dev))
    row = _t(2, 1, 16, dtype=torch.bfloat16, device=dev)
    with pytest.raises(RuntimeError, match=r"ltx_kernels.add_rms_norm_modulate: y has dtype .*pass y.to\(x.dtype\)"):
        ltx.add_rms_norm_modulate(x, x.float(), row, row)
    with pytest.raises(RuntimeError, match=r"ltx_kernels.add_rms_norm_modulate: gate has dtype"):
        ltx.add_rms_norm_modulate(x, x, row, row, row.float())
    with pytest.raises(RuntimeError, match=r"ltx_kernels.add_rms_norm_modulate: weight has dtype"):
        ltx.add_rms_norm_modulate(x, x, row, row, None, _t(16, device=dev))
    with pytest.raises(RuntimeError, match=r"cos has dtype .* RoPE tables are float32; pass cos.float\(\)"):
        ltx.rope_interleaved_qk(x, x, x, x.float())
    with pytest.raises(RuntimeError, match=r"supported are float32, float16"):
        ltx.gelu_tanh(_t(4, device=dev).to(torch.int32))


@pytest.mark.parametrize("dev", ERROR_DEVICES)
def test_shape_mismatch_is_rejected(ltx, dev):
    x = _t(2, 3, 16, device=dev)
    with pytest.raises(RuntimeError, match=r"weight has shape \[17\] but must be \[16\]"):
        ltx.rms_norm(x, _t(17, device=dev))
    with pytest.raises(
        RuntimeError, match=r"scale has shape \[2, 2, 16\] but x is \[2, 3, 16\]; scale must be \[B,1,D\]"
    ):
        ltx.rms_norm_modulate(x, _t(2, 2, 16, device=dev), _t(2, 1, 16, device=dev))
    with pytest.raises(RuntimeError, match=r"x must be \[batch, tokens, hidden\]"):
        ltx.gated_residual(_t(6, 16, device=dev), _t(6, 16, device=dev), _t(6, 16, device=dev))
    with pytest.raises(RuntimeError, match=r"y has shape"):
        ltx.gated_residual(x, _t(2, 4, 16, device=dev), _t(2, 1, 16, device=dev))
    row = _t(2, 1, 16, device=dev)
    with pytest.raises(RuntimeError, match=r"add_rms_norm_modulate: y has shape \[2, 4, 16\] but x is \[2, 3, 16\]"):
        ltx.add_rms_norm_modulate(x, _t(2, 4, 16, device=dev), row, row)
    with pytest.raises(
        RuntimeError, match=r"add_rms_norm_modulate: gate has shape \[2, 2, 16\] .* gate must be \[B,1,D\]"
    ):
        ltx.add_rms_norm_modulate(x, x, row, row, _t(2, 2, 16, device=dev))
    with pytest.raises(RuntimeError, match=r"add_rms_norm_modulate: shift has shape \[2, 1, 8\]"):
        ltx.add_rms_norm_modulate(x, x, row, _t(2, 1, 8, device=dev))
    with pytest.raises(RuntimeError, match=r"add_rms_norm_modulate: x must be \[batch, tokens, hidden\]"):
        ltx.add_rms_norm_modulate(_t(6, 16, device=dev), _t(6, 16, device=dev), row, row)
    with pytest.raises(RuntimeError, match=r"q and k must have the same shape"):
        ltx.rope_interleaved_qk(x, _t(2, 4, 16, device=dev), _t(2, 3, 16, device=dev), _t(2, 3, 16, device=dev))
    with pytest.raises(RuntimeError, match=r"sin has shape \[2, 3, 8\] but must be \[2, 3, 16\] \(RoPE tables for q"):
        ltx.rope_interleaved_qk(x, x, _t(2, 3, 16, device=dev), _t(2, 3, 8, device=dev))


@pytest.mark.parametrize("dev", ERROR_DEVICES)
def test_odd_hidden_size_for_rope_is_rejected(ltx, dev):
    x = _t(2, 3, 17, device=dev)
    with pytest.raises(RuntimeError, match=r"must be even for interleaved RoPE pairs, got 17"):
        ltx.rope_interleaved_qk(x, x, x, x)
    w = _t(17, device=dev)
    with pytest.raises(RuntimeError, match=r"must be even"):
        ltx.qk_rms_norm_rope(x, x, w, w, x, x)


@pytest.mark.parametrize("dev", ERROR_DEVICES)
def test_transposed_inputs_give_the_contiguous_result(ltx, dev):
    """A transposed x, y, q or k is read as its values, like any PyTorch op; outputs are contiguous.
    (tests/reliability/test_op_args.py covers every op and argument with odd strides.)"""
    x = _t(2, 16, 3, device=dev).transpose(1, 2)
    xc = x.contiguous()
    row = _t(2, 1, 16, device=dev)
    c = _t(2, 3, 16, device=dev)
    pairs = [
        (ltx.rms_norm(x), ltx.rms_norm(xc)),
        (ltx.gelu_tanh(x), ltx.gelu_tanh(xc)),
        (ltx.rms_norm_modulate(x, row, row), ltx.rms_norm_modulate(xc, row, row)),
        (ltx.add_rms_norm_modulate(x, x, row, row)[1], ltx.add_rms_norm_modulate(xc, xc, row, row)[1]),
        (ltx.rope_interleaved_qk(x, x, c, c)[0], ltx.rope_interleaved_qk(xc, xc, c, c)[0]),
    ]
    for got, want in pairs:
        assert got.is_contiguous() and got.shape == want.shape
        if dev != "meta":
            assert torch.equal(got, want)


def test_mixed_devices_are_rejected(ltx):
    x = _t(2, 3, 16)
    with pytest.raises(RuntimeError, match=r"weight is on meta but x is on cpu; move all arguments to the same device"):
        ltx.rms_norm(x, _t(16, device="meta"))
    with pytest.raises(RuntimeError, match=r"gate is on meta but x is on cpu"):
        ltx.gated_residual(x, x, _t(2, 1, 16, device="meta"))
    with pytest.raises(RuntimeError, match=r"add_rms_norm_modulate: y is on meta but x is on cpu"):
        ltx.add_rms_norm_modulate(x, _t(2, 3, 16, device="meta"), _t(2, 1, 16), _t(2, 1, 16))
    with pytest.raises(RuntimeError, match=r"cos is on meta but q is on cpu"):
        ltx.rope_interleaved_qk(x, x, _t(2, 3, 16, device="meta"), _t(2, 3, 16))


def test_meta_tensors_give_shapes(ltx):
    """On meta tensors (shape inference, torch.compile tracing) every op returns outputs of the kernel's shape."""
    x = _t(2, 3, 16, device="meta")
    w = _t(16, device="meta")
    assert ltx.rms_norm(x, w).shape == x.shape
    assert ltx.rms_norm_modulate(x, _t(2, 1, 16, device="meta"), _t(2, 1, 16, device="meta")).device.type == "meta"
    q, k = ltx.qk_rms_norm_rope(x, x, w, w, x, x)
    assert q.shape == k.shape == x.shape
    row = _t(2, 1, 16, device="meta")
    h, out = ltx.add_rms_norm_modulate(x, x, row, row, row, w)
    assert h.shape == out.shape == x.shape and h.device.type == out.device.type == "meta"


# ---------------------------------------------------------------------------------------------------
# torch.compile: all the ops in one graph, no break, no recompilation


def test_torch_compile_fullgraph_matches_eager_without_recompiling(ltx):
    def block(x, scale, shift, gate, q, k, wq, wk, cos, sin, h):
        normed = ltx.rms_norm(x)
        modulated = ltx.rms_norm_modulate(x, scale, shift)
        q1, k1 = ltx.rope_interleaved_qk(q, k, cos, sin)
        q2, k2 = ltx.qk_rms_norm_rope(q, k, wq, wk, cos, sin)
        act = ltx.gelu_tanh(h)
        res = ltx.gated_residual(x, modulated, gate)
        h, fused = ltx.add_rms_norm_modulate(x, res, scale, shift)
        return normed, modulated, q1, k1, q2, k2, act, res, h, fused

    def inputs(seed: int):
        r = Rand(seed, "cpu")
        ada = r.normal(2, 1, 6, 64, std=0.5)
        shift, scale, gate = ada.unbind(2)[:3]
        cos, sin = r.cos_sin(2, 8, 64)
        return (
            r.normal(2, 8, 64),
            scale,
            shift,
            gate,
            r.normal(2, 8, 64),
            r.normal(2, 8, 64),
            r.normal(64),
            r.normal(64),
            cos,
            sin,
            r.normal(2, 8, 256),
        )

    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True)
    seed = secrets.randbits(62)
    first = inputs(seed)
    for got, want in zip(compiled(*first), block(*first)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    second = inputs(seed + 1)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for got, want in zip(compiled(*second), block(*second)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_torch_compile_backward_matches_eager(ltx):
    """Training under torch.compile: the registered backward traces too, and gives eager's gradients."""

    def block(x, ada, w):
        shift, scale, gate = ada.unbind(2)[:3]
        h = ltx.gelu_tanh(ltx.rms_norm_modulate(x, scale, shift, w))
        res, normed = ltx.add_rms_norm_modulate(x, h, scale, shift, gate, w)
        return ltx.gated_residual(x, h, gate).square().sum() + ltx.rms_norm(x, w).sum() + (res * normed).sum()

    r = Rand(secrets.randbits(62), "cpu")
    args = [
        r.normal(2, 4, 32).requires_grad_(),
        r.normal(2, 1, 6, 32, std=0.5).requires_grad_(),
        r.normal(32).requires_grad_(),
    ]
    torch._dynamo.reset()
    want = torch.autograd.grad(block(*args), args)
    got = torch.autograd.grad(torch.compile(block, fullgraph=True)(*args), args)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------
# Autograd (fp64 gradcheck on CPU)


def _grad_inputs(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(secrets.randbits(62))
    return [torch.randn(*s, generator=gen, dtype=torch.float64).requires_grad_() for s in shapes]


@pytest.mark.parametrize("with_weight", [False, True], ids=["no_weight", "weight"])
def test_rms_norm_gradcheck(ltx, with_weight):
    x, w = _grad_inputs((2, 3, 7), (7,))
    assert torch.autograd.gradcheck(lambda x, w: ltx.rms_norm(x, w if with_weight else None, eps=1e-6), (x, w))


@pytest.mark.parametrize("form", ["batch", "token"])
@pytest.mark.parametrize("with_weight", [False, True], ids=["no_weight", "weight"])
def test_rms_norm_modulate_gradcheck(ltx, form, with_weight):
    t = 1 if form == "batch" else 3
    x, scale, shift, w = _grad_inputs((2, 3, 7), (2, t, 7), (2, t, 7), (7,))

    def fn(x, scale, shift, w):
        return ltx.rms_norm_modulate(x, scale, shift, w if with_weight else None, eps=1e-6)

    assert torch.autograd.gradcheck(fn, (x, scale, shift, w))


def test_rms_norm_modulate_gradcheck_through_unbind_views(ltx):
    x, ada = _grad_inputs((2, 3, 7), (2, 1, 6, 7))
    assert torch.autograd.gradcheck(lambda x, ada: ltx.rms_norm_modulate(x, ada[:, :, 1], ada[:, :, 0]), (x, ada))


@pytest.mark.parametrize("gate_form", [None, "batch", "token"], ids=lambda g: f"gate_{g}")
@pytest.mark.parametrize("with_weight", [False, True], ids=["no_weight", "weight"])
def test_add_rms_norm_modulate_gradcheck(ltx, gate_form, with_weight):
    """Gradients of both outputs (h and out) for x, y, scale, shift, gate and weight."""
    t = 1 if gate_form == "batch" else 3
    x, y, scale, shift, gate, w = _grad_inputs((2, 3, 7), (2, 3, 7), (2, 1, 7), (2, 3, 7), (2, t, 7), (7,))

    def fn(x, y, scale, shift, gate, w):
        return ltx.add_rms_norm_modulate(
            x, y, scale, shift, gate if gate_form else None, w if with_weight else None, eps=1e-6
        )

    assert torch.autograd.gradcheck(fn, (x, y, scale, shift, gate, w))


def test_add_rms_norm_modulate_gradcheck_through_unbind_views(ltx):
    x, y, ada = _grad_inputs((2, 3, 7), (2, 3, 7), (2, 1, 6, 7))
    assert torch.autograd.gradcheck(
        lambda x, y, ada: ltx.add_rms_norm_modulate(x, y, ada[:, :, 1], ada[:, :, 0], ada[:, :, 2]), (x, y, ada)
    )


def test_gelu_tanh_gradcheck(ltx):
    (x,) = _grad_inputs((3, 11))
    assert torch.autograd.gradcheck(ltx.gelu_tanh, (x * 3,))


@pytest.mark.parametrize("form", ["batch", "token"])
def test_gated_residual_gradcheck(ltx, form):
    t = 1 if form == "batch" else 3
    x, y, gate = _grad_inputs((2, 3, 7), (2, 3, 7), (2, t, 7))
    assert torch.autograd.gradcheck(ltx.gated_residual, (x, y, gate))


# ---------------------------------------------------------------------------------------------------
# Layers: bound onto the module they replace, they compute what the module computes


def _bind(layer: type[nn.Module], module: nn.Module):
    return types.MethodType(layer.forward, module)


def _assert_kernelizable(layer: type[nn.Module], target: type[nn.Module]) -> None:
    """The rules HF `kernels` checks before swapping a forward: stateless, forward-only, same arity."""
    assert layer.__init__ is nn.Module.__init__
    extra = {n for n, _ in inspect.getmembers(layer)} - {n for n, _ in inspect.getmembers(nn.Module)}
    assert extra <= {"has_backward", "can_torch_compile"}, extra
    params = inspect.signature(layer.forward).parameters.values()
    target_params = inspect.signature(target.forward).parameters.values()
    assert [p.kind for p in params] == [p.kind for p in target_params]


def _layer_case(ltx, layer_name: str, module: nn.Module, x: torch.Tensor) -> None:
    layer = getattr(ltx.layers, layer_name)
    _assert_kernelizable(layer, type(module))
    with torch.no_grad():
        want = module(x)
        got = _bind(layer, module)(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.double(), want.double(), **ref.tolerance(want.dtype))


def _randomize(module: nn.Module, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5 + 1)
    return module


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("affine", [False, True], ids=["no_weight", "weight"])
def test_diffusers_rmsnorm_layer(ltx, dtype, affine):
    from diffusers.models.normalization import RMSNorm

    seed = secrets.randbits(62)
    module = _randomize(RMSNorm(127, eps=1e-6, elementwise_affine=affine), seed).to(dtype)
    x = Rand(seed, "cpu").normal(2, 5, 127, dtype=dtype, std=2.0)
    _layer_case(ltx, "RMSNorm", module, x)


def test_diffusers_rmsnorm_layer_keeps_mixed_precision_semantics(ltx):
    """fp32 weight on bf16 activations: diffusers returns fp32; so does the layer."""
    from diffusers.models.normalization import RMSNorm

    seed = secrets.randbits(62)
    module = _randomize(RMSNorm(64, eps=1e-6), seed)
    _layer_case(ltx, "RMSNorm", module, Rand(seed, "cpu").normal(2, 3, 64, dtype=torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("eps", [None, 1e-5], ids=["eps_none", "eps_1e-5"])
@pytest.mark.parametrize("shape", [(127,), (4, 32)], ids=["1d", "2d"])
def test_torch_rmsnorm_layer(ltx, dtype, eps, shape):
    seed = secrets.randbits(62)
    module = _randomize(nn.RMSNorm(shape, eps=eps), seed).to(dtype)
    x = Rand(seed, "cpu").normal(2, 5, *shape, dtype=dtype, std=2.0)
    _layer_case(ltx, "TorchRMSNorm", module, x)


def test_torch_rmsnorm_layer_without_weight(ltx):
    seed = secrets.randbits(62)
    module = nn.RMSNorm(64, eps=None, elementwise_affine=False)
    _layer_case(ltx, "TorchRMSNorm", module, Rand(seed, "cpu").normal(3, 64) * 1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_llama_rmsnorm_layer(ltx, dtype):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    seed = secrets.randbits(62)
    module = _randomize(LlamaRMSNorm(127, eps=1e-6), seed).to(dtype)
    _layer_case(ltx, "LlamaRMSNorm", module, Rand(seed, "cpu").normal(2, 5, 127, dtype=dtype, std=2.0))


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_torch_gelu_layer(ltx, approximate):
    x = Rand(secrets.randbits(62), "cpu").normal(4, 127, std=3.0)
    _layer_case(ltx, "GeluTanh", nn.GELU(approximate=approximate), x)


@pytest.mark.parametrize("cls_name", ["GELUTanh", "NewGELUActivation"])
def test_transformers_gelu_tanh_layers(ltx, cls_name):
    from transformers import activations

    x = Rand(secrets.randbits(62), "cpu").normal(4, 127, std=3.0)
    _layer_case(ltx, "GeluTanh", getattr(activations, cls_name)(), x)


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_diffusers_gelu_layer(ltx, approximate):
    from diffusers.models.activations import GELU

    seed = secrets.randbits(62)
    torch.manual_seed(seed)
    module = GELU(64, 256, approximate=approximate)
    _layer_case(ltx, "DiffusersGELU", module, Rand(seed, "cpu").normal(2, 5, 64))


def test_rmsnorm_layer_backward_matches_module(ltx):
    """has_backward = True: gradients through the swapped forward equal the module's."""
    from diffusers.models.normalization import RMSNorm

    seed = secrets.randbits(62)
    module = _randomize(RMSNorm(33, eps=1e-6), seed)
    x = Rand(seed, "cpu").normal(2, 4, 33).requires_grad_()
    g = Rand(seed + 1, "cpu").normal(2, 4, 33)
    (gx_want, gw_want) = torch.autograd.grad(module(x), (x, module.weight), g)
    (gx_got, gw_got) = torch.autograd.grad(_bind(ltx.layers.RMSNorm, module)(x), (x, module.weight), g)
    torch.testing.assert_close(gx_got, gx_want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw_got, gw_want, rtol=1e-5, atol=1e-5)


def test_layers_trace_under_torch_compile(ltx):
    """can_torch_compile = True: a model whose norms and activations run the layers compiles as one graph."""
    from diffusers.models.activations import GELU
    from diffusers.models.normalization import RMSNorm

    seed = secrets.randbits(62)
    torch.manual_seed(seed)
    model = nn.Sequential(
        RMSNorm(32, eps=1e-6, elementwise_affine=False),
        GELU(32, 64, approximate="tanh"),
        nn.RMSNorm(64, eps=None),
        nn.GELU(approximate="tanh"),
    )
    x = Rand(seed, "cpu").normal(2, 3, 32)
    with torch.no_grad():
        want = model(x)
        for module, layer in zip(model, ("RMSNorm", "DiffusersGELU", "TorchRMSNorm", "GeluTanh")):
            assert getattr(ltx.layers, layer).can_torch_compile
            module.forward = _bind(getattr(ltx.layers, layer), module)
        torch._dynamo.reset()
        got = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_linear_gelu_tanh_matches_linear_then_gelu(ltx, device: str) -> None:
    """The fused Linear + bias + tanh-GELU (cuBLASLt epilogue on CUDA) computes F.gelu(F.linear(...), 'tanh')."""
    import importlib

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    fused = importlib.import_module(f"{ltx.__name__}._linear").linear_gelu_tanh
    dtype = torch.float32  # fp32 tells the tanh GELU from the erf one (1.7e-4 apart here)
    x = torch.randn(2, 7, 64, device=device, dtype=dtype)
    w = torch.randn(96, 64, device=device, dtype=dtype) / 8
    b = torch.randn(96, device=device, dtype=dtype)
    ref = torch.nn.functional.gelu(torch.nn.functional.linear(x.double(), w.double(), b.double()), approximate="tanh")
    out = fused(x, w, b)
    assert out.shape == (2, 7, 96) and out.dtype == dtype
    assert float((out.double() - ref).norm() / ref.norm()) < 2e-5
    compiled = torch.compile(fused, fullgraph=True)
    assert torch.allclose(compiled(x, w, b), out)
