"""Probe: Hopper-style Triton attention (TMA descriptors, optional warp specialisation) on LTX-Video's shapes.

python scripts/attn_tma_probe.py  (on the GPU machine; prints a table, writes $OUT/attn_tma_probe.json)
Modes: bf16; INT8 QK^T (K smoothed) + BF16 PV; INT8 QK^T + FP8 PV with a per-block fp32 accumulation.
Peers in the same process: cuDNN SDPA and, when it imports, flash-attn-4.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.tools.tensor_descriptor import TensorDescriptor

B, H, N, D = 2, 32, 6144, 64
FLOPS = 4 * B * H * N * N * D
LOG2E = 1.4426950408889634


@triton.jit
def _fwd(
    desc_q,
    desc_k,
    desc_v,
    desc_o,
    QS,
    KS,
    VS,
    N,
    scale,
    H: tl.constexpr,
    D: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    MODE: tl.constexpr,  # 0 bf16, 1 int8 QK + bf16 PV, 2 int8 QK + fp8 PV
    WS: tl.constexpr,
):
    # one program: BM queries of one (batch, head); K/V tiles of BN tokens arrive by TMA, online softmax in fp32
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    row = b * N + pid_m * BM
    q = desc_q.load([row, h * D])
    if MODE > 0:
        qk_scale = tl.load(QS + bh * (N // BM) + pid_m)
    else:
        qk_scale = scale
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for start in tl.range(0, N, BN, warp_specialize=WS):
        k = desc_k.load([b * N + start, h * D])
        if MODE > 0:
            s = tl.dot(q, k.T, out_dtype=tl.int32).to(tl.float32)
            s = s * (qk_scale * tl.load(KS + bh * (N // BN) + start // BN))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            s = s - m_new[:, None]
        else:
            s = tl.dot(q, k.T)
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            s = s * qk_scale - m_new[:, None]
        p = tl.math.exp2(s)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        if MODE == 2:
            vt = desc_v.load([bh * D, start])  # V^T in fp8: tokens contiguous, as wgmma wants an 8-bit B
            pv = tl.dot((p * 448.0).to(tl.float8e4nv), vt.T)
            acc = acc * alpha[:, None] + pv
        else:
            v = desc_v.load([b * N + start, h * D])
            acc = acc * alpha[:, None]
            acc = tl.dot(p.to(tl.bfloat16), v, acc)
        m_i = m_new
    if MODE == 2:
        acc = acc * (tl.load(VS + bh * D + tl.arange(0, D))[None, :] / 448.0)
    acc = acc / l_i[:, None]
    desc_o.store([row, h * D], acc.to(tl.bfloat16))


def _desc(t2d, block):
    return TensorDescriptor.from_tensor(t2d, block)


def attn(q, k, v, BM=128, BN=128, warps=4, stages=3, ws=False, mode=0, qs=None, ks=None, vs=None):
    """q, k, v: [B, N, H, D] (the projection's layout; v is V^T [B, H, D, N] fp8 in mode 2)."""
    o = torch.empty(B, N, H, D, device=q.device, dtype=torch.bfloat16)
    dq = _desc(q.view(B * N, H * D), [BM, D])
    dk = _desc(k.view(B * N, H * D), [BN, D])
    dv = _desc(v.view(B * H * D, N), [D, BN]) if mode == 2 else _desc(v.view(B * N, H * D), [BN, D])
    do = _desc(o.view(B * N, H * D), [BM, D])
    _fwd[(N // BM, B * H)](
        dq, dk, dv, do, qs, ks, vs, N, D**-0.5 * LOG2E, H, D, BM, BN, mode, ws, num_warps=warps, num_stages=stages
    )
    return o


@triton.jit
def _quant(X, Y, S, MEAN, N, smul, H: tl.constexpr, D: tl.constexpr, BLK: tl.constexpr, SMOOTH: tl.constexpr):
    # one program: BLK tokens of one (batch, head): subtract the token mean (K), absmax scale, round to int8
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = pid * BLK + tl.arange(0, BLK)
    cols = tl.arange(0, D)
    offs = (b * N + rows)[:, None] * (H * D) + h * D + cols[None, :]
    x = tl.load(X + offs).to(tl.float32)
    if SMOOTH:
        x = x - tl.load(MEAN + bh * D + cols)[None, :]
    x = x * smul
    amax = tl.maximum(tl.max(tl.abs(x)), 1e-8)
    tl.store(Y + offs, (x * (127.0 / amax) + tl.where(x >= 0, 0.5, -0.5)).to(tl.int8))
    tl.store(S + bh * (N // BLK) + pid, amax / 127.0)


def quantize(q, k, v, BM=128, BN=128, smooth=True, fp8_v=True):
    """INT8 q (scale and log2 e folded in) and k (token mean taken out) per (head, block); FP8 V^T per channel."""
    qi, ki = torch.empty_like(q, dtype=torch.int8), torch.empty_like(k, dtype=torch.int8)
    qs = torch.empty(B * H, N // BM, device=q.device)
    ks = torch.empty(B * H, N // BN, device=q.device)
    mean = k.float().mean(dim=1).reshape(B * H, D).contiguous() if smooth else q.new_empty(1, dtype=torch.float32)
    _quant[(N // BM, B * H)](q, qi, qs, mean, N, D**-0.5 * LOG2E, H, D, BM, False)
    _quant[(N // BN, B * H)](k, ki, ks, mean, N, 1.0, H, D, BN, smooth)
    if not fp8_v:
        return qi, ki, v, qs, ks, None
    vs = v.float().abs().amax(dim=1).clamp_min(1e-8) / 448.0  # [B, H, D]
    vt = (v.float() / vs[:, None]).to(torch.float8_e4m3fn).permute(0, 2, 3, 1).contiguous()  # [B, H, D, N]
    return qi, ki, vt, qs, ks, vs.reshape(B * H, D).contiguous()


def run_q(qz, mode, **cfg):
    qi, ki, vt, qs, ks, vs = qz
    return attn(qi, ki, vt, mode=mode, qs=qs, ks=ks, vs=vs, **cfg)


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
    bench = lambda f: triton.testing.do_bench(f, warmup=50, rep=300, return_mode="median")  # noqa: E731
    gen = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.randn(B, N, H, D, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(3))
    t: dict[str, float] = {}
    errors: dict[str, str] = {}
    t["cudnn bf16"] = bench(lambda: sdpa(q, k, v, SDPBackend.CUDNN_ATTENTION))
    try:
        t["fa4 bf16"] = bench(lambda: fa4(q, k, v))
    except Exception as e:  # noqa: BLE001
        errors["fa4"] = repr(e)[:400]
        print("fa4", errors["fa4"], flush=True)
    qz8 = quantize(q, k, v)
    qz16 = quantize(q, k, v, fp8_v=False)
    t["quantize q,k int8 + v fp8"] = bench(lambda: quantize(q, k, v))
    t["quantize q,k int8"] = bench(lambda: quantize(q, k, v, fp8_v=False))
    best: dict[int, tuple[float, dict]] = {}
    for mode in (0, 1, 2):
        for BM, BN, w, s, ws in [
            (128, 128, 4, 2, False),
            (128, 128, 4, 3, False),
            (128, 128, 8, 2, False),
            (128, 128, 8, 3, False),
            (128, 64, 4, 3, False),
            (128, 64, 4, 4, False),
            (128, 128, 4, 2, True),
            (128, 128, 4, 3, True),
            (128, 128, 8, 2, True),
            (128, 128, 8, 3, True),
            (128, 64, 4, 3, True),
        ]:
            cfg = dict(BM=BM, BN=BN, warps=w, stages=s, ws=ws)
            name = f"mode{mode} {BM}x{BN} w{w} s{s}{' ws' if ws else ''}"
            start = time.time()
            try:
                if mode == 0:
                    ms = bench(lambda: attn(q, k, v, **cfg))
                else:
                    qz = qz8 if mode == 2 else qz16
                    ms = bench(lambda: run_q(qz, mode, **cfg))
            except Exception as e:  # noqa: BLE001
                errors[name] = repr(e)[:300]
                print(name, "FAILED", errors[name], flush=True)
                continue
            t[name] = ms
            print(
                f"{name:34} {ms * 1e3:9.1f} us  {FLOPS / ms / 1e9:6.1f} TFLOP/s  ({time.time() - start:.0f} s)",
                flush=True,
            )
            if mode not in best or ms < best[mode][0]:
                best[mode] = (ms, cfg)
    rows = []
    sets = {"gaussian": (q, k, v)}
    bias = 6.0 * torch.randn(1, 1, H, D, device=dev, generator=gen)  # channel outliers in K
    sets["k-outliers"] = (q, (k.float() + bias).to(torch.bfloat16), v)
    for name, (q_, k_, v_) in sets.items():
        ref = sdpa(q_.float(), k_.float(), v_.float(), SDPBackend.EFFICIENT_ATTENTION)
        cands = [("cudnn bf16", lambda: sdpa(q_, k_, v_, SDPBackend.CUDNN_ATTENTION))]
        if "fa4 bf16" in t:
            cands.append(("fa4 bf16", lambda: fa4(q_, k_, v_)))
        for mode, (_, cfg) in best.items():
            if mode == 0:
                cands.append((f"mode0 {cfg}", lambda cfg=cfg: attn(q_, k_, v_, **cfg)))
            else:
                fp8 = mode == 2
                cands.append(
                    (f"mode{mode} {cfg}", lambda m=mode, c=cfg, f=fp8: run_q(quantize(q_, k_, v_, fp8_v=f), m, **c))
                )
                cands.append(
                    (
                        f"mode{mode} no smoothing",
                        lambda m=mode, c=cfg, f=fp8: run_q(quantize(q_, k_, v_, smooth=False, fp8_v=f), m, **c),
                    )
                )
        for label, fn in cands:
            try:
                cos, l1 = quality(fn(), ref)
            except Exception as e:  # noqa: BLE001
                errors[f"{name} {label}"] = repr(e)[:300]
                continue
            rows.append((name, label, cos, l1))
            print(f"{name:12} {label:60} cos {cos:.6f} relL1 {l1:.5f}", flush=True)
    print(f"{'kernel':34} {'us':>9} {'TFLOP/s':>9}")
    for name, ms in sorted(t.items(), key=lambda kv: kv[1]):
        print(f"{name:34} {ms * 1e3:9.1f} {FLOPS / ms / 1e9:9.1f}")
    out = {"rows": rows, "times_ms": t, "errors": errors, "torch": torch.__version__, "triton": triton.__version__}
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "attn_tma_probe.json"), "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
