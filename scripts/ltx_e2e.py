"""LTX-Video 2B transformer forward on the GPU, four ways in one run: eager, eager + ltx-kernels,
torch.compile, torch.compile + ltx-kernels. Random weights, batch 2, 6144 tokens, bf16.

Usage (GPU machine, repo root, after `hubkernels build`):  python scripts/ltx_e2e.py --output e2e.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from ltx_forward import MODES, format_results, time_ltx_forward  # noqa: E402

import hubkernels  # noqa: E402

LTX_2B = dict(
    in_channels=128,
    out_channels=128,
    patch_size=1,
    patch_size_t=1,
    num_attention_heads=32,
    attention_head_dim=64,
    cross_attention_dim=2048,
    num_layers=28,
    activation_fn="gelu-approximate",
    qk_norm="rms_norm_across_heads",
    norm_elementwise_affine=False,
    norm_eps=1e-6,
    caption_channels=4096,
    attention_bias=True,
    attention_out_bias=True,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--output")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", nargs="*", default=list(MODES))
    ap.add_argument("--per-token", action="store_true", help="per-token timesteps (LTXConditionPipeline)")
    ap.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="also time both compile modes with mode='reduce-overhead' (CUDA graphs)",
    )
    ap.add_argument("--repo", help="load the kernel from this Hub repo (get_kernel, v1) instead of build/")
    args = ap.parse_args()
    if args.repo:
        kernel = hubkernels.get_kernel(args.repo, version=1)
    else:
        kernel = hubkernels.get_local_kernel(Path(__file__).resolve().parent.parent, backend="cuda")
    result = time_ltx_forward(
        LTX_2B,
        batch=2,
        tokens_shape=(16, 16, 24),
        dtype=torch.bfloat16,
        device="cuda",
        modes=args.modes,
        kernel=kernel,
        iters=args.iters,
        warmup=args.warmup,
        per_token_timesteps=args.per_token,
    )
    print(format_results(result))
    if args.cuda_graphs:
        graphs = time_ltx_forward(
            LTX_2B,
            batch=2,
            tokens_shape=(16, 16, 24),
            dtype=torch.bfloat16,
            device="cuda",
            modes=["eager", "compile", "compile+kernels"],
            kernel=kernel,
            iters=args.iters,
            warmup=args.warmup,
            per_token_timesteps=args.per_token,
            compile_kwargs={"fullgraph": True, "mode": "reduce-overhead"},
        )
        print("\nwith torch.compile(mode='reduce-overhead'):")
        print(format_results(graphs))
        result["reduce_overhead"] = graphs
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
