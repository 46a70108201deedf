"""A small LTX-Video transformer with random weights and its inputs, for tests, the demo and benchmarks.

Hidden size 128 (4 heads x 32), so hidden % 6 == 2 as in the real 2B model (2048 % 6 == 2): RoPE pads
two channels, exactly as there. Inputs are what LTXPipeline (text-to-video, one timestep per sample)
or LTXConditionPipeline (per-token timesteps, timestep [B, S]) pass to the transformer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch

#: The tiny config of the tests; the real LTX-Video 2B is LTX_2B_CONFIG.
TINY_CONFIG: dict[str, Any] = dict(
    in_channels=8,
    out_channels=8,
    num_attention_heads=4,
    attention_head_dim=32,
    cross_attention_dim=128,
    caption_channels=64,
    num_layers=2,
)
LTX_2B_CONFIG: dict[str, Any] = dict(
    in_channels=128,
    out_channels=128,
    num_attention_heads=32,
    attention_head_dim=64,
    cross_attention_dim=2048,
    caption_channels=4096,
    num_layers=28,
)
#: (latent frames, height, width) of the tests' video: 2 x 4 x 6 = 48 tokens.
TINY_TOKENS = (2, 4, 6)


def tiny_ltx(
    config: Optional[dict[str, Any]] = None,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
):
    """An LTXVideoTransformer3DModel with seeded random weights (strong AdaLN tables, non-unit q/k norm
    weights, so they matter in comparisons), in eval mode."""
    return ltx_forward().build_ltx(config or TINY_CONFIG, dtype=dtype, device=device, seed=seed)


def ltx_inputs(
    config: Optional[dict[str, Any]] = None,
    *,
    batch: int = 2,
    tokens: tuple[int, int, int] = TINY_TOKENS,
    text_len: int = 16,
    per_token_timesteps: bool = False,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 1,
) -> dict[str, Any]:
    """Keyword arguments for the transformer's forward (return_dict=False): text-to-video (timestep [B]) or,
    with per_token_timesteps, timestep [B, S] as LTXConditionPipeline passes it; see ltx_forward.ltx_inputs."""
    return ltx_forward().ltx_inputs(
        config or TINY_CONFIG,
        batch=batch,
        tokens_shape=tokens,
        text_len=text_len,
        per_token_timesteps=per_token_timesteps,
        dtype=dtype,
        device=device,
        seed=seed,
    )


def capture_self_attention(
    ltx, config: dict[str, Any], tokens: tuple[int, int, int], *, device: str, dtype: torch.dtype = torch.bfloat16
) -> tuple[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], torch.Tensor]:
    """(q, k, v of every self-attention call, output) of one forward of the kernelized LTX-Video transformer with
    seeded random weights: what the kernel's attention processor hands ltx_kernels.attention, on any device."""
    from hubkernels.integrations import diffusers as hd
    from hubkernels.layers import Mode

    calls = []

    def record(q, k, v, scale=None):
        calls.append((q.clone(), k.clone(), v.clone()))
        return ltx.attention(q, k, v, scale)

    saved = ltx.layers.attention, ltx.layers.attention_on_kernel
    ltx.layers.attention, ltx.layers.attention_on_kernel = record, lambda q, k, v: True  # on the CPU too
    try:
        model = tiny_ltx(config, dtype=dtype, device=device)
        hd.kernelize(model, kernel=ltx, mode=Mode.INFERENCE)
        with torch.no_grad():
            out = model(**ltx_inputs(config, tokens=tokens, dtype=dtype, device=device))[0]
    finally:
        ltx.layers.attention, ltx.layers.attention_on_kernel = saved
    return calls, out


def ltx_forward():
    """The kernel root's benchmarks/ltx_forward.py (the LTX-Video model helpers of the benchmarks)."""
    from hubkernels.author.bench import load_script

    return load_script(Path(__file__).resolve().parent.parent / "benchmarks" / "ltx_forward.py", "ltx_forward")


def expected_replacements(num_layers: int) -> dict[str, int]:
    """What hubkernels.integrations.diffusers.kernelize replaces in an LTX transformer, by kind.

    Per block: 2 weightless diffusers RMSNorm (norm1, norm2), 4 torch.nn.RMSNorm q/k norms with weight,
    1 feed-forward GELU-tanh (diffusers GELU), the block forward (AdaLN + gated residuals) and 2 attention
    processors (attn1 runs the fused q/k norm + RoPE; attn2, cross-attention without RoPE, the q/k
    norms). Per model: 1 torch.nn.GELU(tanh) in the caption projection and the RoPE tables (1
    LTXVideoRotaryPosEmbed, with the fused attention processor).
    """
    return {
        "RMSNorm": 2 * num_layers,
        "TorchRMSNorm": 4 * num_layers,
        "DiffusersGELU": num_layers,
        "GeluTanh": 1,
        "LTXVideoTransformerBlock": num_layers,
        "LTXVideoAttnProcessor": 2 * num_layers,
        "LTXVideoRotaryPosEmbed": 1,
    }


_published: dict[str, str] = {}


def publish_ltx(build_path, repo_id: str = "hubkernels/ltx-kernels") -> str:
    """Upload this checkout's ltx-kernels build to the test Hub (the `hub` fixture) once per session and repo id;
    returns the repo id. `build_path` is the `ltx_build` fixture's variant dir (the upload takes every variant
    under its build/)."""
    from pathlib import Path

    if repo_id not in _published:
        import warnings

        from hubkernels.publish import upload

        root = Path(build_path).parent.parent
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "built from a dirty tree" while developing
            _published[repo_id] = upload(root, repo_id=repo_id).commit
    return repo_id
