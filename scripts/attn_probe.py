"""Probe: LTX-Video self-attention shapes on the GPU; cuDNN/flash SDPA against Triton kernels (bf16, int8-QK+fp8-PV).

python scripts/attn_probe.py  (on the GPU machine; prints a table, writes $OUT/attn_probe.json)
"""

from __future__ import annotations

import json
import os
import sys

import torch
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, N, D = 2, 32, 6144, 64
FLOPS = 4 * B * H * N * N * D


@triton.jit
def _attn(
    Q,
    K,
    V,
    Out,
    QS,
    KS,
    VS,
    sq_b,
    sq_n,
    sv_b,
    sv_h,
    sv_x,
    sq_s,
    N,
    H: tl.constexpr,
    D: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    QK8: tl.constexpr,
    PV8: tl.constexpr,
):
    # one program: BM queries of one (batch, head); K/V tiles of BN tokens streamed through, online softmax
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rm = pid_m * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rd = tl.arange(0, D)
    q = tl.load(Q + b * sq_b + h * D + rm[:, None] * sq_n + rd[None, :])
    kp = K + b * sq_b + h * D + rn[None, :] * sq_n + rd[:, None]
    if QK8:
        qscale = tl.load(QS + bh * sq_s + pid_m)
    if PV8:
        vp = V + b * sv_b + h * sv_h + rd[:, None] * sv_x + rn[None, :]  # V^T, fp8, tokens contiguous
    else:
        vp = V + b * sq_b + h * D + rn[:, None] * sq_n + rd[None, :]
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for start in range(0, N, BN):
        k = tl.load(kp + start * sq_n)
        if QK8:
            s = tl.dot(q, k).to(tl.float32) * (qscale * tl.load(KS + bh * sq_s + start // BN))
        else:
            s = tl.dot(q, k) * 0.18033688011112042  # D ** -0.5 * log2(e)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if PV8:
            vt = tl.load(vp + start)
            acc = tl.dot((p * 448.0).to(tl.float8e4nv), tl.trans(vt), acc)
        else:
            v = tl.load(vp + start * sq_n)
            acc = tl.dot(p.to(tl.bfloat16), v, acc)
        m_i = m_new
    if PV8:
        acc = acc * (tl.load(VS + bh * D + rd)[None, :] / 448.0)
    acc = acc / l_i[:, None]
    tl.store(Out + b * sq_b + h * D + rm[:, None] * sq_n + rd[None, :], acc.to(tl.bfloat16))


def attn_bf16(q, k, v, BM=128, BN=128, warps=8, stages=3):
    """q, k, v: [B, N, H, D] bf16 (the projection's own layout); scale folded into q."""
    o = torch.empty_like(q)
    _attn[(N // BM, B * H)](
        q,
        k,
        v,
        o,
        None,
        None,
        None,
        q.stride(0),
        q.stride(1),
        0,
        0,
        0,
        0,
        N,
        H,
        D,
        BM,
        BN,
        False,
        False,
        num_warps=warps,
        num_stages=stages,
    )
    return o


def quantize(q, k, v, BM=128, BN=128, smooth=True):
    """INT8 q/k per (head, block) after K smoothing; FP8 V^T per channel (SageAttention2's recipe, in torch)."""
    if smooth:
        k = k - k.mean(dim=1, keepdim=True)
    qf = q.float() * (D**-0.5 * 1.4426950408889634)
    qb = qf.view(B, N // BM, BM, H, D)
    qsc = qb.abs().amax(dim=(2, 4)).clamp_min(1e-8) / 127.0  # [B, N/BM, H]
    qi = (qb / qsc[:, :, None, :, None]).round().to(torch.int8).view(B, N, H, D)
    kb = k.float().view(B, N // BN, BN, H, D)
    ksc = kb.abs().amax(dim=(2, 4)).clamp_min(1e-8) / 127.0
    ki = (kb / ksc[:, :, None, :, None]).round().to(torch.int8).view(B, N, H, D)
    vsc = v.float().abs().amax(dim=1).clamp_min(1e-8) / 448.0  # [B, H, D]
    vt = (v.float() / vsc[:, None]).to(torch.float8_e4m3fn).permute(0, 2, 3, 1).contiguous()  # [B, H, D, N]
    return qi, ki, vt, qsc.permute(0, 2, 1).contiguous(), ksc.permute(0, 2, 1).contiguous(), vsc.contiguous()


def attn_q8(qi, ki, vt, qsc, ksc, vsc, BM=128, BN=128, warps=8, stages=3, v=None):
    """INT8 QK^T; FP8 PV, or BF16 PV when the unquantised v is given."""
    o = torch.empty(B, N, H, D, device=qi.device, dtype=torch.bfloat16)
    pv8 = v is None
    if not pv8:
        vt = v
    _attn[(N // BM, B * H)](
        qi,
        ki,
        vt,
        o,
        qsc,
        ksc,
        vsc,
        qi.stride(0),
        qi.stride(1),
        vt.stride(0),
        vt.stride(1),
        vt.stride(2),
        qsc.stride(1),
        N,
        H,
        D,
        BM,
        BN,
        True,
        pv8,
        num_warps=warps,
        num_stages=stages,
    )
    return o


def sdpa(q, k, v, backend):
    with sdpa_kernel(backend):
        return torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        ).transpose(1, 2)


def fa4(q, k, v):
    from flash_attn.cute import flash_attn_func

    out = flash_attn_func(q, k, v)
    return out[0] if isinstance(out, tuple) else out


def quality(o, ref):
    o, ref = o.double().flatten(), ref.double().flatten()
    cos = torch.nn.functional.cosine_similarity(o, ref, dim=0).item()
    return cos, ((o - ref).abs().sum() / ref.abs().sum()).item()


def main() -> int:
    dev = torch.device("cuda")
    print(torch.__version__, triton.__version__, torch.cuda.get_device_name(), flush=True)
    rows, out = [], {}
    gen = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.randn(B, N, H, D, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(3))
    sets = {"gaussian": (q, k, v)}
    bias = 6.0 * torch.randn(1, 1, H, D, device=dev, generator=gen)  # channel outliers in K
    sets["k-outliers"] = (q, (k.float() + bias).to(torch.bfloat16), v)
    for name, (q_, k_, v_) in sets.items():
        ref = sdpa(q_.float(), k_.float(), v_.float(), SDPBackend.EFFICIENT_ATTENTION)
        for label, fn in [
            ("cudnn bf16", lambda: sdpa(q_, k_, v_, SDPBackend.CUDNN_ATTENTION)),
            ("flash bf16", lambda: sdpa(q_, k_, v_, SDPBackend.FLASH_ATTENTION)),
            ("triton bf16", lambda: attn_bf16(q_, k_, v_)),
            ("triton int8/fp8", lambda: attn_q8(*quantize(q_, k_, v_))),
            ("triton int8/fp8 no smoothing", lambda: attn_q8(*quantize(q_, k_, v_, smooth=False))),
            ("triton int8/bf16", lambda: attn_q8(*quantize(q_, k_, v_), v=v_)),
            ("fa4 bf16", lambda: fa4(q_, k_, v_)),
        ]:
            try:
                cos, l1 = quality(fn(), ref)
            except Exception as e:  # noqa: BLE001
                print(label, "FAILED", repr(e)[:300], flush=True)
                continue
            rows.append((name, label, cos, l1))
    print(f"{'set':12} {'kernel':30} {'cosine':>10} {'rel L1':>10}")
    for r in rows:
        print(f"{r[0]:12} {r[1]:30} {r[2]:10.6f} {r[3]:10.5f}")
    bench = lambda f: triton.testing.do_bench(f, warmup=100, rep=500, return_mode="median")  # noqa: E731
    t = {}
    t["cudnn bf16"] = bench(lambda: sdpa(q, k, v, SDPBackend.CUDNN_ATTENTION))
    t["flash bf16"] = bench(lambda: sdpa(q, k, v, SDPBackend.FLASH_ATTENTION))
    for BM, BN, w, s in [
        (128, 128, 8, 3),
        (128, 64, 4, 3),
        (128, 128, 4, 3),
        (128, 64, 8, 4),
        (64, 128, 4, 3),
        (128, 128, 8, 2),
    ]:
        try:
            t[f"triton bf16 {BM}x{BN} w{w} s{s}"] = bench(lambda: attn_bf16(q, k, v, BM, BN, w, s))
        except Exception as e:  # noqa: BLE001
            print("bf16 cfg", BM, BN, w, s, repr(e)[:200])
    try:
        t["fa4 bf16"] = bench(lambda: fa4(q, k, v))
    except Exception as e:  # noqa: BLE001
        print("fa4", repr(e)[:300])
    qz = quantize(q, k, v)
    t["triton int8/bf16 w4 s3"] = bench(lambda: attn_q8(*qz, warps=4, stages=3, v=v))
    t["quantize (torch)"] = bench(lambda: quantize(q, k, v))
    for BM, BN, w, s in [(128, 128, 8, 3), (128, 128, 4, 3), (128, 128, 8, 2), (128, 128, 8, 4)]:
        try:
            t[f"triton q8 {BM}x{BN} w{w} s{s}"] = bench(lambda: attn_q8(*qz, BM=BM, BN=BN, warps=w, stages=s))
        except Exception as e:  # noqa: BLE001
            print("q8 cfg", BM, BN, w, s, repr(e)[:200])
    print(f"{'kernel':34} {'us':>9} {'TFLOP/s':>9}")
    for name, ms in t.items():
        print(f"{name:34} {ms * 1e3:9.1f} {FLOPS / ms / 1e9:9.1f}")
    out = {"rows": rows, "times_ms": t, "torch": torch.__version__, "triton": triton.__version__}
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "attn_probe.json"), "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
