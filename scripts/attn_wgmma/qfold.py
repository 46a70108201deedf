"""The Q fold (qfold.cuh) against the shipped pipeline, on the GPU machine: a probe experiment.

python scripts/attn_wgmma/qfold.py [ROUNDS]   (compiles qfold.cu with nvcc first; QFOLD_SO names a prebuilt one)
At LTX-Video 2B's self-attention (q and k [2, 6144, 2048] bf16 as the projections leave them, v, the norm weights,
the 3-D RoPE positions of 16 x 16 x 24 latents): checks that the fold's k and attention output equal the shipped
pipeline's (qk_rms_norm_rope_grid, then the attention) to the bit, applies the lossless gate against fp32 attention,
and times both pipelines and their parts as `hubkernels bench` times, alternated ROUNDS times (3), each after the
bench's device warm-up. Writes $OUT/qfold.json.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
SO = Path(os.environ.get("QFOLD_SO", "/tmp/qfold.so"))
B, S, H, D = 2, 6144, 32, 64
FRAMES, HEIGHT, WIDTH = 16, 16, 24  # latents: 16 x 16 x 24 = 6144 tokens
EPS = 1e-6


def build() -> None:
    if os.environ.get("QFOLD_SO") and SO.exists():
        return
    cmd = ["nvcc", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-shared", "-Xcompiler", "-fPIC",
           "-I", str(ROOT / "kernel_src" / "ltx_cuda"), "-I", str(ROOT / "kernel_src" / "ltx_cuda_sm90"),
           "-I", str(HERE), "-o", str(SO), str(HERE / "qfold.cu")]  # fmt: skip
    subprocess.run(cmd, check=True)


def inputs(torch, seed: int) -> dict:
    """One input set: projected q, k, v, the norm weights, positions as LTX-Video's RoPE module makes them."""
    import ltx_reference

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(seed)
    q, k, v = (torch.randn(B, S, H * D, device=dev, generator=g).to(torch.bfloat16) for _ in range(3))
    wq, wk = ((1 + 0.1 * torch.randn(H * D, device=dev, generator=g)).to(torch.bfloat16) for _ in range(2))
    f, h, w = torch.meshgrid(*(torch.arange(n, device=dev) for n in (FRAMES, HEIGHT, WIDTH)), indexing="ij")
    grid = torch.stack([f * (8 / 25) / 20, h * 32 / 2048, w * 32 / 2048], dim=-1).reshape(1, S, 3).float()
    pos = grid.expand(B, S, 3).contiguous()
    freqs = ltx_reference.rope_freqs(H * D, 10000.0, dev).contiguous()
    return {"q": q, "k": k, "v": v, "wq": wq, "wk": wk, "pos": pos, "freqs": freqs}


class Lib:
    def __init__(self, torch):
        self.torch = torch
        self.lib = lib = ctypes.CDLL(str(SO))
        p, i, f, n = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_long
        lib.ltx_grid_prologue.argtypes = [p] * 8 + [n, n, f, p]
        lib.ltx_attn.argtypes = [p] * 5 + [i] * 3 + [f, p]
        lib.ltx_qfold_prologue.argtypes = [p] * 8 + [n, n, f, p]
        lib.ltx_qfold_attn.argtypes = [p] * 9 + [i] * 3 + [f, p]

    def _check(self, rc: int, what: str) -> None:
        if rc:
            raise RuntimeError(f"{what} returned {rc}")

    def stream(self) -> int:
        return self.torch.cuda.current_stream().cuda_stream

    def grid(self, x: dict, qn, kn) -> None:
        rc = self.lib.ltx_grid_prologue(qn.data_ptr(), kn.data_ptr(), x["q"].data_ptr(), x["k"].data_ptr(),
                                        x["wq"].data_ptr(), x["wk"].data_ptr(), x["pos"].data_ptr(),
                                        x["freqs"].data_ptr(), B * S, H * D, EPS, self.stream())  # fmt: skip
        self._check(rc, "ltx_grid_prologue")

    def attn(self, qn, kn, v, o) -> None:
        v16 = self.torch.empty_like(v)  # the kernel's fp16 V, from torch's allocator as the binding takes it
        rc = self.lib.ltx_attn(
            o.data_ptr(), qn.data_ptr(), kn.data_ptr(), v.data_ptr(), v16.data_ptr(), B, S, H, D**-0.5, self.stream()
        )
        self._check(rc, "ltx_attn")

    def fold_prologue(self, x: dict, kn, inv) -> None:
        rc = self.lib.ltx_qfold_prologue(kn.data_ptr(), inv.data_ptr(), x["q"].data_ptr(), x["k"].data_ptr(),
                                         x["wq"].data_ptr(), x["wk"].data_ptr(), x["pos"].data_ptr(),
                                         x["freqs"].data_ptr(), B * S, H * D, EPS, self.stream())  # fmt: skip
        self._check(rc, "ltx_qfold_prologue")

    def fold_attn(self, x: dict, kn, inv, o) -> None:
        v16 = self.torch.empty_like(x["v"])
        rc = self.lib.ltx_qfold_attn(o.data_ptr(), x["q"].data_ptr(), kn.data_ptr(), x["v"].data_ptr(),
                                     v16.data_ptr(), inv.data_ptr(), x["wq"].data_ptr(), x["pos"].data_ptr(),
                                     x["freqs"].data_ptr(), B, S, H, D**-0.5, self.stream())  # fmt: skip
        self._check(rc, "ltx_qfold_attn")


def main(argv: list[str]) -> int:
    import torch
    from ltx_reference import as_accurate_as, errors
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from hubkernels.author.bench import time_calls, warm_up_device

    rounds = int(argv[0]) if argv else 3
    build()
    lib = Lib(torch)
    dev = torch.device("cuda")
    sets = [inputs(torch, 10 + i) for i in range(3)]
    bf = dict(device=dev, dtype=torch.bfloat16)
    qn, kn, kn2, o_ship, o_fold = (torch.empty(B, S, H * D, **bf) for _ in range(5))
    inv = torch.empty(B * S, device=dev, dtype=torch.float32)

    def heads(t):
        return t.view(B, S, H, D)

    out: dict = {"shape": [B, S, H, D], "checks": []}
    for x in sets[:2]:
        lib.grid(x, qn, kn)
        lib.attn(heads(qn), heads(kn), heads(x["v"]), heads(o_ship))
        lib.fold_prologue(x, kn2, inv)
        lib.fold_attn(x, kn2, inv, heads(o_fold))
        torch.cuda.synchronize()
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            ref = torch.nn.functional.scaled_dot_product_attention(
                *(heads(t).float().transpose(1, 2) for t in (qn, kn, x["v"]))
            ).transpose(1, 2)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            cudnn = torch.nn.functional.scaled_dot_product_attention(
                *(heads(t).transpose(1, 2) for t in (qn, kn, x["v"]))
            ).transpose(1, 2)
        cos, l1 = errors(heads(o_fold), ref)
        cos_c, l1_c = errors(cudnn, ref)
        check = {
            "k_bitwise": bool(torch.equal(kn, kn2)),
            "out_bitwise": bool(torch.equal(o_ship, o_fold)),
            "out_max_abs_diff": (o_ship.float() - o_fold.float()).abs().max().item(),
            "fold": [cos, l1],
            "cudnn": [cos_c, l1_c],
            "gate": as_accurate_as(cos, l1, cos_c, l1_c),
        }
        out["checks"].append(check)
        print(check, flush=True)

    per_set = [(x, torch.empty_like(qn), torch.empty_like(kn), torch.empty_like(o_ship), torch.empty_like(inv))
               for x in sets]  # fmt: skip
    calls = {
        "shipped: grid prologue": lambda x, a, b, o, r: lib.grid(x, a, b),
        "shipped: attention": lambda x, a, b, o, r: lib.attn(heads(a), heads(b), heads(x["v"]), heads(o)),
        "fold: k + q 1/rms prologue": lambda x, a, b, o, r: lib.fold_prologue(x, b, r),
        "fold: attention with the q norm + RoPE": lambda x, a, b, o, r: lib.fold_attn(x, b, r, heads(o)),
    }
    for x, a, b, o, r in per_set:  # every buffer filled once, so each part runs on real values
        lib.grid(x, a, b)
        lib.fold_prologue(x, b, r)
    out["rounds"] = []
    for n in range(rounds):
        row = {}
        for name, fn in calls.items():
            warm_up_device(dev)
            times = sorted(time_calls(fn, per_set, dev, warmup=5, iters=30))
            row[name] = times[len(times) // 2]
        row["shipped total"] = row["shipped: grid prologue"] + row["shipped: attention"]
        row["fold total"] = row["fold: k + q 1/rms prologue"] + row["fold: attention with the q norm + RoPE"]
        out["rounds"].append(row)
        print(f"round {n}: " + ", ".join(f"{k} {v:.1f} us" for k, v in row.items()), flush=True)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "qfold.json").write_text(json.dumps(out, indent=1))
    return 0 if all(c["gate"] for c in out["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
