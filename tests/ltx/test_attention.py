"""ltx_kernels.attention: torch's SDPA on the CPU, the sm_90a kernel on an H100/H200, both traceable.

The GPU half is the kernel's quality gate: on LTX-Video 2B's self-attention shape and on token counts that
fill no tile, with Gaussian inputs and with channel outliers in K as real checkpoints have, the kernel's error
against fp32 attention must be no worse than cuDNN's BF16 attention on the same inputs.

The 8-bit mode's math (ltx_reference.attention_int8, which its kernel is to compute) is held to the 8-bit
gate here on the CPU, and the gate is shown to catch the precision bug it exists for: K left unsmoothed.
Both gates also run on q, k, v captured from LTX-Video's own forward (seeded random weights, the 2B model's
widths), as the kernel's attention processor hands them over.
"""

from __future__ import annotations

import importlib.util
import math
import re
import shutil
import subprocess
from pathlib import Path

import ltx_reference as ref
import pytest
import torch
import torch.nn.functional as F
from ltx_tiny import LTX_2B_CONFIG, capture_self_attention, ltx_inputs, tiny_ltx
from torch.nn.attention import SDPBackend, sdpa_kernel

# the tests that build LTX-Video's transformer (diffusers' model) skip where diffusers is not installed
needs_diffusers = pytest.mark.skipif(
    importlib.util.find_spec("diffusers") is None, reason="builds LTX-Video's transformer: needs diffusers"
)


def _qkv(b: int, s: int, h: int, d: int = 64, *, dtype=torch.bfloat16, device="cpu", seed=0, k_outliers=False):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, s, h, d, generator=gen) for _ in range(3))
    if k_outliers:
        k = k + 6.0 * torch.randn(1, 1, h, d, generator=gen)  # a per-channel bias in K, as trained models have
    return tuple(t.to(dtype).to(device) for t in (q, k, v))


def _sdpa(q, k, v, backend=None, scale=None):
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    if backend is None:
        return F.scaled_dot_product_attention(qt, kt, vt, scale=scale).transpose(1, 2)
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(qt, kt, vt, scale=scale).transpose(1, 2)


def test_on_the_cpu_attention_is_torchs_sdpa_in_the_projection_layout(ltx):
    q, k, v = _qkv(2, 50, 3)
    assert not ltx.attention_on_kernel(q, k, v)
    assert torch.equal(ltx.attention(q, k, v), _sdpa(q, k, v))
    assert torch.equal(ltx.attention(q, k, v, scale=0.3), _sdpa(q, k, v, scale=0.3))


def test_the_op_has_a_fake_implementation_that_checks_like_the_kernel(ltx):
    q, k, v = (t.to("meta") for t in _qkv(2, 300, 4))
    out = ltx.ops.attention(q, k, v, 0.125)
    assert out.shape == q.shape and out.dtype == torch.bfloat16 and out.is_contiguous()
    with pytest.raises(RuntimeError, match=r"ltx_kernels.attention: q must be \[batch, tokens, heads, 64\]"):
        ltx.ops.attention(q[..., :32], k[..., :32], v[..., :32], 0.125)
    with pytest.raises(RuntimeError, match="ltx_kernels.attention: q has dtype torch.float16; the kernel takes bf"):
        ltx.ops.attention(q.half(), k.half(), v.half(), 0.125)
    with pytest.raises(RuntimeError, match="ltx_kernels.attention: v has shape .* self-attention takes one shape"):
        ltx.ops.attention(q, k, v[:, :10], 0.125)


def test_attention_traces_whole_under_torch_compile(ltx):
    q, k, v = _qkv(1, 40, 2, dtype=torch.float32)
    compiled = torch.compile(lambda q, k, v: ltx.attention(q, k, v) * 2, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(q, k, v), ltx.attention(q, k, v) * 2)


@pytest.mark.parametrize("k_outliers", [False, True], ids=["gaussian", "k-outliers"])
def test_the_8bit_math_meets_the_8bit_gate(k_outliers):
    q, k, v = _qkv(1, 1000, 4, k_outliers=k_outliers)
    cos, l1 = ref.errors(ref.attention_int8(q, k, v), ref.attention(q, k, v))
    assert ref.meets_8bit_gate(cos, l1), (cos, l1)


def test_the_8bit_gate_fails_k_left_unsmoothed_on_channel_outliers():
    q, k, v = _qkv(1, 1000, 4, k_outliers=True)
    cos, l1 = ref.errors(ref.attention_int8(q, k, v, smooth_k=False), ref.attention(q, k, v))
    assert cos < ref.GATE_8BIT[0] and l1 > ref.GATE_8BIT[1], (cos, l1)  # both measures fail


@needs_diffusers
def test_on_qkv_from_an_ltx_2b_block_the_8bit_math_meets_the_8bit_gate(ltx):
    """One block at the 2B model's widths (32 heads of 64), 384 tokens, fp32 on the CPU (bf16 matmuls are slow
    here): the logits its q/k norms and RoPE give, q, k, v rounded to bf16 as the GPU forward has them."""
    config = dict(LTX_2B_CONFIG, num_layers=1)
    calls, _ = capture_self_attention(ltx, config, (4, 8, 12), device="cpu", dtype=torch.float32)
    assert len(calls) == 1
    q, k, v = (t.to(torch.bfloat16) for t in calls[0])
    assert q.shape == (2, 384, 32, 64)
    cos, l1 = ref.errors(ref.attention_int8(q, k, v), ref.attention(q, k, v))
    assert ref.meets_8bit_gate(cos, l1), (cos, l1)


def test_smoothing_k_shifts_every_score_of_a_query_alike():
    """The mean taken out of K moves all of a query's scores by one amount, which the softmax cancels: the
    smoothing costs no accuracy, it only narrows K's range for INT8."""
    q, k, v = _qkv(1, 130, 2, k_outliers=True)
    k8, k_scale, k_mean = ref.quantize_k_int8(k)
    assert k_scale.shape == (1, 2, 2) and k_mean.shape == (1, 2, 64)  # 130 tokens: two blocks of 128
    shifted = k.double() - k_mean[:, None].double()
    torch.testing.assert_close(ref.attention(q, shifted, v), ref.attention(q, k, v))
    assert k8.dtype == torch.int8 and k8.abs().amax() == 127  # the largest |k - mean| maps to 127


# ---- a fixed softmax offset (FlashDecoding++'s unified maximum): the math of the kernel change measured in
# BENCHMARKS.md §8, on the CPU. Every tile's exponentials against tile 0's maximum instead of a running maximum:
# no maximum per tile and no rescale of O, while a row whose tile sum leaves the offset's range takes that tile
# the exact way.


@pytest.mark.parametrize("k_outliers", [False, True], ids=["gaussian", "k-outliers"])
def test_a_fixed_softmax_offset_is_as_accurate_as_the_running_maximum(k_outliers):
    """bf16 P, fp32 sums, bf16 out as the kernel rounds them: within the lossless gate of the online softmax with
    the same roundings (the offset's fraction costs the largest P some precision: about 4 % more relative L1)."""
    q, k, v = _qkv(1, 1000, 4, k_outliers=k_outliers)
    exact = ref.attention(q, k, v)
    online, _ = ref.attention_tiles(q, k, v, fixed_offset=False)
    fixed, refits = ref.attention_tiles(q, k, v, fixed_offset=True)
    assert refits == 0  # no score of these rows rises 64 (log2) past its first tile's
    assert ref.as_accurate_as(*ref.errors(fixed, exact), *ref.errors(online, exact))


def test_on_peaked_attention_a_fixed_offset_needs_fp16_p_to_stay_as_accurate():
    """q three times longer: rows whose weight sits on a few keys. The running maximum keeps each row's largest P
    exactly 1; a fixed offset rounds it to bf16 and falls outside the lossless gate. With P and V in fp16 (kept
    below 2^15 by the refit) the fixed offset is more accurate than the running maximum in bf16."""
    q, k, v = _qkv(1, 1000, 2, seed=7)
    q = (q.float() * 3).to(torch.bfloat16)
    exact = ref.attention(q, k, v)
    online = ref.errors(ref.attention_tiles(q, k, v, fixed_offset=False)[0], exact)
    fixed_bf16 = ref.errors(ref.attention_tiles(q, k, v, fixed_offset=True)[0], exact)
    fixed_fp16, refits = ref.attention_tiles(q, k, v, fixed_offset=True, pv_dtype=torch.float16, refit_below=2.0**15)
    fixed_fp16 = ref.errors(fixed_fp16, exact)
    assert not ref.as_accurate_as(*fixed_bf16, *online), (fixed_bf16, online)
    assert 1 - fixed_fp16[0] < 1 - online[0] and fixed_fp16[1] < online[1], (fixed_fp16, online, refits)


@pytest.mark.parametrize(
    "check",
    [{"v_range": (2.0**-10, 2.0**16)}, {"o_check": True}],
    ids=["v-range", "output"],  # V's range as it is converted (measured, not taken), the output (the kernel's)
)
def test_fp16_p_v_leaves_a_head_whose_v_fp16_cannot_hold_to_the_bf16_pass(check):
    """A token of head 0's V past fp16's largest (inf in fp16), head 1's V 2^-20 small (fp16 keeps it in
    subnormals), head 2 plain. Checked by V's range, or by the fp16 pass's own output (rows not finite, or a mean
    |o| under 2^-12), heads 0 and 1 take the online softmax in bf16, head 2 keeps the fp16 pass, and every head is
    as accurate as the online softmax; without a check (the planted bug) head 0 overflows and head 1 loses its
    precision."""
    q, k, v = _qkv(1, 512, 3, seed=5)
    v = v.float()
    v[:, 200, 0] *= 2.0**17
    v[:, :, 1] *= 2.0**-20
    v = v.to(torch.bfloat16)
    exact = ref.attention(q, k, v)
    online, _ = ref.attention_tiles(q, k, v, fixed_offset=False)
    fp16 = {"fixed_offset": True, "pv_dtype": torch.float16, "refit_below": 2.0**15}
    checked, _ = ref.attention_tiles(q, k, v, **fp16, **check)

    def as_accurate(out, h):  # head by head: relative errors at the head's own scale
        return ref.as_accurate_as(
            *ref.errors(out[:, :, h], exact[:, :, h]), *ref.errors(online[:, :, h], exact[:, :, h])
        )

    assert all(as_accurate(checked, h) for h in range(3))
    assert torch.equal(checked[:, :, :2], online[:, :, :2])  # the bf16 pass is the online softmax
    assert not torch.equal(checked[:, :, 2], online[:, :, 2])  # the plain head keeps the fp16 pass
    planted, _ = ref.attention_tiles(q, k, v, **fp16)
    assert not torch.isfinite(planted[:, :, 0]).all()
    assert not as_accurate(planted, 1)


def test_a_row_that_rises_past_its_offset_takes_that_tile_the_exact_way():
    """Keys of the third tile 40 times longer: every row's scores there rise far past tile 0's maximum. With the
    refit the output is the online softmax's; without it (the planted bug) exp2 overflows."""
    q, k, v = _qkv(1, 512, 2, seed=3)
    k = k.clone()
    k[:, 256:384] = (k[:, 256:384].float() * 40).to(torch.bfloat16)
    exact = ref.attention(q, k, v)
    online, _ = ref.attention_tiles(q, k, v, fixed_offset=False)
    fixed, refits = ref.attention_tiles(q, k, v, fixed_offset=True)
    assert refits == 2 * 512  # every row of both heads, once
    assert ref.as_accurate_as(*ref.errors(fixed, exact), *ref.errors(online, exact))
    planted, _ = ref.attention_tiles(q, k, v, fixed_offset=True, refit_below=math.inf)
    assert not torch.isfinite(planted).all()


# ---- on the GPU -----------------------------------------------------------------------------------------

ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_sm90 = pytest.mark.skipif(not ON_SM90, reason="the attention kernel is built for sm_90a (H100, H200)")

# LTX-Video 2B's self-attention (768x512, 121 frames latent: 6144 tokens: whole query blocks, then the last round
# in narrow CTAs), and token counts that fill no tile (every CTA narrow; at 300 tokens the last has one consumer)
SHAPES = [(2, 6144, 32), (1, 1000, 3), (2, 77, 4), (1, 193, 1), (1, 300, 2)]


@pytest.mark.parametrize("k_outliers", [False, True], ids=["gaussian", "k-outliers"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.gpu
@needs_sm90
def test_the_kernel_is_as_accurate_as_cudnn_bf16(ltx, shape, k_outliers, seed):
    q, k, v = _qkv(*shape, device="cuda", seed=seed, k_outliers=k_outliers)
    assert ltx.attention_on_kernel(q, k, v)
    out = ltx.attention(q, k, v)
    assert out.shape == q.shape and not out.isnan().any()
    fp32 = _sdpa(
        q.float(), k.float(), v.float(), SDPBackend.MATH if shape[1] < 2000 else SDPBackend.EFFICIENT_ATTENTION
    )
    cos, l1 = ref.errors(out, fp32)
    cos_cudnn, l1_cudnn = ref.errors(_sdpa(q, k, v, SDPBackend.CUDNN_ATTENTION), fp32)
    assert ref.as_accurate_as(cos, l1, cos_cudnn, l1_cudnn), (cos, l1, cos_cudnn, l1_cudnn)


def _hard(case: str, seed: int):
    """Inputs on which the kernel's first pass (V in fp16, one softmax offset per row) alone would lose: a token's
    V past fp16's range in heads 0-1 (v-wide), V 2^-20 small in heads 2-3 (v-tiny), rows whose weight sits on a
    few keys (peaked), a tile of keys 40 times longer than the first (rising)."""
    q, k, v = (t.float() for t in _qkv(1, 2048, 4, seed=seed))
    if case == "v-wide":
        v[:, 700, :2] *= 2.0**17
    elif case == "v-tiny":
        v[:, :, 2:] *= 2.0**-20
    elif case == "peaked":
        q *= 3
    else:
        k[:, 1024:1152] *= 40
    return tuple(t.to(torch.bfloat16).cuda() for t in (q, k, v))


@pytest.mark.parametrize("case", ["v-wide", "v-tiny", "peaked", "rising"])
@pytest.mark.gpu
@needs_sm90
def test_where_fp16_v_or_one_offset_per_row_would_lose_the_kernel_stays_as_accurate_as_cudnn(ltx, case):
    """Head by head (each at its own scale), as accurate as cuDNN: the CTAs whose output says the fp16 pass lost
    ran again in bf16, and rows that rose past their offset took that tile the exact way."""
    q, k, v = _hard(case, seed=4)
    assert ltx.attention_on_kernel(q, k, v)
    out, cudnn = ltx.attention(q, k, v), _sdpa(q, k, v, SDPBackend.CUDNN_ATTENTION)
    fp32 = _sdpa(q.float(), k.float(), v.float(), SDPBackend.EFFICIENT_ATTENTION)
    for h in range(q.shape[2]):
        errors, errors_cudnn = ref.errors(out[:, :, h], fp32[:, :, h]), ref.errors(cudnn[:, :, h], fp32[:, :, h])
        assert ref.as_accurate_as(*errors, *errors_cudnn), (h, errors, errors_cudnn)


@pytest.mark.gpu
@needs_sm90
@needs_diffusers
def test_on_qkv_captured_from_the_ltx_2b_forward_the_kernel_is_as_accurate_as_cudnn(ltx):
    """All 28 self-attention calls of the 2B forward at 6,144 tokens (768x512, 121 frames); and the 8-bit math
    on every call, a quarter of the heads each (the fp64 reference's time)."""
    calls, _ = capture_self_attention(ltx, LTX_2B_CONFIG, (16, 16, 24), device="cuda")
    assert len(calls) == LTX_2B_CONFIG["num_layers"]
    for q, k, v in calls:
        assert ltx.attention_on_kernel(q, k, v)
        fp32 = _sdpa(q.float(), k.float(), v.float(), SDPBackend.EFFICIENT_ATTENTION)
        cos, l1 = ref.errors(ltx.attention(q, k, v), fp32)
        cos_cudnn, l1_cudnn = ref.errors(_sdpa(q, k, v, SDPBackend.CUDNN_ATTENTION), fp32)
        assert ref.as_accurate_as(cos, l1, cos_cudnn, l1_cudnn), (cos, l1, cos_cudnn, l1_cudnn)
        q, k, v = (t[:1, :, ::4] for t in (q, k, v))
        cos, l1 = ref.errors(ref.attention_int8(q, k, v), ref.attention(q, k, v))
        assert ref.meets_8bit_gate(cos, l1), (cos, l1)


@pytest.mark.gpu
@needs_sm90
@needs_diffusers
def test_the_2b_forward_on_the_kernel_is_as_close_to_fp32_as_diffusers_bf16(ltx):
    """The whole output: the kernelized bf16 forward (this attention and the fused ops) against the fp32 forward,
    no further than diffusers' own bf16 forward is."""
    config, tokens = LTX_2B_CONFIG, (16, 16, 24)
    with torch.no_grad():
        fp32 = tiny_ltx(config, device="cuda")(**ltx_inputs(config, tokens=tokens, device="cuda"))[0]
        stock = tiny_ltx(config, dtype=torch.bfloat16, device="cuda")
        stock_out = stock(**ltx_inputs(config, tokens=tokens, dtype=torch.bfloat16, device="cuda"))[0]
        del stock
    calls, out = capture_self_attention(ltx, config, tokens, device="cuda")
    assert len(calls) == config["num_layers"]
    cos, l1 = ref.errors(out, fp32)
    cos_stock, l1_stock = ref.errors(stock_out, fp32)
    assert 1 - cos <= (1 - cos_stock) * 1.10 + 1e-7, (cos, cos_stock)
    assert l1 <= l1_stock * 1.10, (l1, l1_stock)


@pytest.mark.gpu
@needs_sm90
def test_on_the_gpu_attention_traces_whole_and_matches_eager(ltx):
    q, k, v = _qkv(1, 500, 2, device="cuda")
    compiled = torch.compile(lambda q, k, v: ltx.attention(q, k, v) + 1, fullgraph=True)
    assert torch.equal(compiled(q, k, v), ltx.attention(q, k, v) + 1)


@pytest.mark.gpu
@needs_sm90
def test_the_kernel_refuses_what_it_cannot_run_in_words(ltx):
    q, k, v = _qkv(1, 64, 2, device="cuda")
    assert not ltx.attention_on_kernel(q.half(), k.half(), v.half())  # fp16: torch's SDPA
    torch.testing.assert_close(ltx.attention(q.half(), k.half(), v.half()), _sdpa(q.half(), k.half(), v.half()))
    with pytest.raises(RuntimeError, match="ltx_kernels.attention: k is on cpu but q is on cuda:0"):
        ltx.ops.attention(q, k.cpu(), v, 0.125)


KERNEL_SM90 = Path(__file__).resolve().parents[2] / "kernel_src" / "ltx_cuda_sm90"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit) to compile the sm_90a kernel")
def test_the_shipped_kernel_compiles_without_spills_or_serialised_wgmmas(tmp_path):
    """ptxas's own account of the shipped configuration: no register spills, no wgmma it had to serialise and
    no fence it had to add. A branch around a named barrier, or one between the fence and a wgmma, makes it do
    so with no error, only these lines, and costs the kernel the overlap it is built on."""
    cmd = ["nvcc", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-c", "-Xptxas", "-v"]
    r = subprocess.run([*cmd, str(KERNEL_SM90 / "attention.cu"), "-o", str(tmp_path / "attention.o")],
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "attention_kernel" in r.stderr
    assert "wgmma.mma_async instructions are serialized" not in r.stderr, r.stderr[-3000:]
    assert "warpgroup.arrive is injected" not in r.stderr, r.stderr[-3000:]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    assert spills and all(s == ("0", "0") for s in spills), spills


CXX = shutil.which("c++") or shutil.which("g++")


@pytest.mark.skipif(CXX is None, reason="needs a C++ compiler")
def test_every_query_of_every_head_is_taken_by_exactly_one_cta(tmp_path):
    """The kernel's tiling (tiling.cuh: whole query blocks, then the last round in narrow CTAs), compiled for the
    CPU by attention_tiling.cpp: over shapes from 1 to 6,145 tokens and 1 to 132 SMs, every query of every head
    is taken by exactly one CTA, the full CTAs come first, and the narrow ones fit in one round."""
    exe = tmp_path / "tiling"
    source = Path(__file__).with_name("attention_tiling.cpp")
    r = subprocess.run([CXX, "-std=c++17", "-O2", "-I", str(KERNEL_SM90), "-o", str(exe), str(source)],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout[-3000:]
