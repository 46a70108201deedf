"""H200 experiment (2026-12-01): what is left to win in the LTX-Video 2B block outside our elementwise kernels?
Times, per block and at the 2B shapes (2 x 6144 tokens, hidden 2048, FF 8192, bf16), the matrix products with their
residual steps as the kernelized model runs them, against cuBLAS forms that fold the residual into the product
(C = residual in D = A.B + C; the gate folded into per-batch weights), the three q/k/v products against one of
width 6144, and the SDPA backends on the model's strided q/k/v. Bias is left out of the folded forms, so their
saving is an upper bound. Run from the repo root after `hubkernels build`: python scripts/exp_epilogue.py"""
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import hubkernels
from hubkernels import bench as hb

k = hubkernels.get_local_kernel(".", backend="cuda")
dev = torch.device("cuda")
B, S, D, FF, H = 2, 6144, 2048, 8192, 32
T = B * S


def rnd(*s, scale=1.0):
    return scale * torch.randn(*s, device=dev, dtype=torch.bfloat16)


sets = [dict(h=rnd(B, S, D), a=rnd(B, S, D), g=rnd(B, S, FF), q=rnd(B, S, D), kk=rnd(B, S, D), v=rnd(B, S, D))
        for _ in range(2)]
W, b = rnd(D, D, scale=0.02), rnd(D, scale=0.02)
W2, b2 = rnd(D, FF, scale=0.02), rnd(D, scale=0.02)
Wqkv, bqkv = rnd(3 * D, D, scale=0.02), rnd(3 * D, scale=0.02)
gate, sc, sh = rnd(B, 1, D, scale=0.1), rnd(B, 1, D, scale=0.1), rnd(B, 1, D, scale=0.1)
Wg = (W.unsqueeze(0) * gate.transpose(1, 2)).transpose(1, 2).contiguous()  # [B, D_in, D_out]: gate folded in
W2g = (W2.unsqueeze(0) * gate.transpose(1, 2)).transpose(1, 2).contiguous()  # [B, FF, D]
Wt, W2t = W.t(), W2.t()

cases = {
    "out-proj linear": lambda s: F.linear(s["a"], W, b),
    "gated_residual": lambda s: k.gated_residual(s["h"], s["a"], gate),
    "out-proj linear + gated_residual": lambda s: k.gated_residual(s["h"], F.linear(s["a"], W, b), gate),
    "folded: baddbmm(h, a, W*gate)": lambda s: torch.baddbmm(s["h"], s["a"], Wg),
    "cross out linear + add_rms_norm_modulate": lambda s: k.add_rms_norm_modulate(
        s["h"], F.linear(s["a"], W, b), sc, sh, None, None, 1e-6),
    "folded: addmm(h, a, W) + rms_norm_modulate": lambda s: k.rms_norm_modulate(
        torch.addmm(s["h"].view(T, D), s["a"].view(T, D), Wt).view(B, S, D), sc, sh, None, 1e-6),
    "ff down linear": lambda s: F.linear(s["g"], W2, b2),
    "ff down linear + add_rms_norm_modulate(gate)": lambda s: k.add_rms_norm_modulate(
        s["h"], F.linear(s["g"], W2, b2), sc, sh, gate, None, 1e-6),
    "folded: baddbmm(h, g, W2*gate) + rms_norm_modulate": lambda s: k.rms_norm_modulate(
        torch.baddbmm(s["h"], s["g"], W2g), sc, sh, None, 1e-6),
    "q,k,v: three linears": lambda s: [F.linear(s["q"], Wqkv[i * D:(i + 1) * D], bqkv[i * D:(i + 1) * D])
                                       for i in range(3)],
    "q,k,v: one linear (6144 wide)": lambda s: F.linear(s["q"], Wqkv, bqkv),
}


def heads(t):
    return t.unflatten(-1, (H, -1)).transpose(1, 2)  # the model's [B, H, S, 64] views of [B, S, H*64]


for name, backend in (("sdpa cuDNN", SDPBackend.CUDNN_ATTENTION), ("sdpa flash", SDPBackend.FLASH_ATTENTION),
                      ("sdpa efficient", SDPBackend.EFFICIENT_ATTENTION)):
    def run(s, backend=backend):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(heads(s["q"]), heads(s["kk"]), heads(s["v"]))
    cases[name] = run

hb.warm_up_device(dev)
with torch.inference_mode():
    for name, fn in cases.items():
        try:
            us = statistics.median(hb.time_calls(lambda s: fn(s), [(s,) for s in sets], dev, 5, 20, inner=5))
            print(f"{name:52} {us:9.1f} us", flush=True)
        except Exception as e:  # noqa: BLE001 - a backend that cannot run this shape says so
            print(f"{name:52} failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
