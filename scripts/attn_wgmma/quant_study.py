"""Which 8-bit attention meets the 8-bit gate (cosine >= 0.9995, relative L1 <= 0.02 against fp32), on the CPU.

python scripts/attn_wgmma/quant_study.py [tokens]    (default 1024 tokens, 4 heads of 64, one batch)
python scripts/attn_wgmma/quant_study.py --captured  (q, k, v of one LTX-Video block at the 2B widths)
Inputs as the GPU gate draws them (Gaussian q, k, v in bf16; "k-outliers" adds 6 sigma per-channel bias to K),
with q scaled so that the logits' standard deviation is 1, 2 or 4. Each 8-bit scheme is emulated exactly in its
quantisation (tests/ltx_reference.py holds the INT8 one); P V in FP8 is SageAttention2's e4m3 P (scale 448) and
per-channel e4m3 V, accumulated exactly. Prints a markdown table of 1 - cosine and relative L1.
--captured builds this checkout's ltx-kernels for the CPU and captures q, k, v as
tests/ltx/test_attention.py does (seeded random weights, 384 tokens): their logits' spread and the 8-bit errors.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import ltx_reference as ref  # noqa: E402  (the float64 references of the tests)

FP8_MAX = 448.0


def fp8(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).double()


def int8_fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """ltx_reference.int8_scores, then e4m3 P (P * 448) times per-channel e4m3 V."""
    v = v.transpose(1, 2).double()
    v_scale = v.abs().amax(2, keepdim=True) / FP8_MAX
    v8 = fp8(v / v_scale)
    out = torch.empty_like(v)
    for b, h, s2 in ref.int8_scores(q, k):
        p = torch.exp2(s2 - s2.amax(-1, keepdim=True))
        out[b, h] = (fp8(p * FP8_MAX) @ v8[b, h]) * v_scale[b, h] / (FP8_MAX * p.sum(-1, keepdim=True))
    return out.transpose(1, 2)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """torch's bf16 attention over [B, S, H, D]."""
    return F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)


def errors(out: torch.Tensor, fp64: torch.Tensor) -> str:
    cos, l1 = ref.errors(out, fp64)
    return f"{1 - cos:.1e} / {l1:.4f}"


def main(tokens: int) -> None:
    schemes = {
        "bf16 (torch SDPA)": sdpa,
        "INT8 q k^T, K smoothed (the 8-bit math)": ref.attention_int8,
        "INT8 q k^T, K not smoothed": lambda q, k, v: ref.attention_int8(q, k, v, smooth_k=False),
        "INT8 q k^T, K smoothed, a k scale per token": lambda q, k, v: ref.attention_int8(q, k, v, k_block=1),
        "INT8 q k^T, FP8 P V": int8_fp8,
    }
    print(f"[1, {tokens}, 4, 64], 1 - cosine / relative L1 against fp64\n")
    print("| inputs | logit std | " + " | ".join(schemes) + " |")
    print("|---|---|" + "---|" * len(schemes))
    for outliers in (False, True):
        for logit_std in (1.0, 2.0, 4.0):
            gen = torch.Generator().manual_seed(1)
            q, k, v = (torch.randn(1, tokens, 4, 64, generator=gen) for _ in range(3))
            q = q * logit_std
            if outliers:
                k = k + 6.0 * torch.randn(1, 1, 4, 64, generator=gen)
            q, k, v = (t.bfloat16() for t in (q, k, v))
            fp64 = ref.attention(q, k, v)
            cells = [errors(fn(q, k, v), fp64) for fn in schemes.values()]
            name = "k-outliers" if outliers else "gaussian"
            print(f"| {name} | {logit_std:g} | " + " | ".join(cells) + " |")


def captured() -> None:
    from ltx_tiny import LTX_2B_CONFIG, capture_self_attention

    import hubkernels
    from hubkernels.builder import build

    build(ROOT, quiet=True)
    ltx = hubkernels.get_local_kernel(ROOT)
    config = dict(LTX_2B_CONFIG, num_layers=1)
    calls, _ = capture_self_attention(ltx, config, (4, 8, 12), device="cpu", dtype=torch.float32)
    q, k, v = (t.to(torch.bfloat16) for t in calls[0])
    logits = q.double().transpose(1, 2) @ k.double().transpose(1, 2).mT * q.shape[-1] ** -0.5
    spread = logits.flatten(2).std(-1)  # per batch and head
    print(f"q, k, v {list(q.shape)}: logit std {spread.mean():.2f} mean, {spread.max():.2f} largest head")
    fp64 = ref.attention(q, k, v)
    print("bf16 (torch SDPA):", errors(sdpa(q, k, v), fp64))
    print("INT8 q k^T, K smoothed (the 8-bit math):", errors(ref.attention_int8(q, k, v), fp64))
    print("INT8 q k^T, K not smoothed:", errors(ref.attention_int8(q, k, v, smooth_k=False), fp64))


if __name__ == "__main__":
    if sys.argv[1:] == ["--captured"]:
        captured()
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 1024)
