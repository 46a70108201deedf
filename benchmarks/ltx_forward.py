"""Time LTX-Video's transformer forward: eager, eager + kernels, torch.compile, torch.compile + kernels.

Used by scripts/ltx_e2e.py (the 2B figure of BENCHMARKS.md), `hubkernels demo` and the tests' tiny model.

One model with random weights serves every mode (kernelize / unkernelize switch it), so all modes
compute the same function; each mode's output is compared with eager's. GPU timing uses CUDA events
(median of `iters` calls after `warmup`); CPU timing uses perf_counter.
"""

from __future__ import annotations

import statistics
import time
from types import ModuleType
from typing import Any, Optional, Sequence, Union

import torch

from hubkernels.integrations import diffusers as hd
from hubkernels.layers import Mode

# eager+kernels+sdpa: the kernel's layers with attention left to torch's SDPA (diffusers' "native" backend), to
# see what the kernel's own attention adds on GPUs where it runs.
MODES = ("eager", "eager+kernels", "eager+kernels+sdpa", "compile", "compile+kernels")


def build_ltx(
    config_kwargs: dict[str, Any],
    *,
    dtype: torch.dtype = torch.float32,
    device: Union[str, torch.device] = "cpu",
    seed: int = 0,
    strong_modulation: bool = True,
):
    """An LTXVideoTransformer3DModel with seeded random weights, created on `device`, in eval mode.

    strong_modulation: AdaLN tables with std 0.5 (the init's is 1/sqrt(D)) and q/k norm weights in
    [0.5, 1.5] (the init's are 1), so modulation, gates and norm weights visibly matter in comparisons.
    """
    from diffusers import LTXVideoTransformer3DModel

    torch.manual_seed(seed)
    with torch.device(device):
        model = LTXVideoTransformer3DModel(**config_kwargs)
    if strong_modulation:
        with torch.no_grad():
            for block in model.transformer_blocks:
                block.scale_shift_table.normal_(0.0, 0.5)
            for name, p in model.named_parameters():
                if name.endswith(("norm_q.weight", "norm_k.weight")):
                    p.uniform_(0.5, 1.5)
    return model.to(dtype=dtype).eval()


def ltx_inputs(
    config_kwargs: dict[str, Any],
    *,
    batch: int = 2,
    tokens_shape: tuple[int, int, int] = (2, 4, 6),
    text_len: int = 16,
    per_token_timesteps: bool = False,
    dtype: torch.dtype = torch.float32,
    device: Union[str, torch.device] = "cpu",
    seed: int = 1,
) -> dict[str, Any]:
    """Keyword arguments for the transformer's forward (return_dict=False), as the LTX pipelines pass them.

    tokens_shape is (latent frames, height, width). The text mask pads the last quarter of the second
    sample's prompt. per_token_timesteps gives every token its own timestep (timestep [B, S], with a clean
    first frame), as LTXConditionPipeline does; otherwise timestep is [B] (text-to-video).
    """
    frames, height, width = tokens_shape
    seq = frames * height * width
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, text_len)
    if batch > 1:
        mask[1, text_len - text_len // 4 :] = 0
    if per_token_timesteps:
        timestep = torch.rand(batch, seq, generator=g) * 1000
        timestep[:, : height * width] = 0.0
    else:
        timestep = torch.rand(batch, generator=g) * 1000
    return dict(
        hidden_states=torch.randn(batch, seq, config_kwargs.get("in_channels", 128), generator=g).to(device, dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config_kwargs.get("caption_channels", 4096), generator=g).to(
            device, dtype
        ),
        timestep=timestep.to(device),
        encoder_attention_mask=mask.to(device),
        num_frames=frames,
        height=height,
        width=width,
        rope_interpolation_scale=(8 / 25, 32, 32),
        return_dict=False,
    )


def _timed(fn, device: torch.device, iters: int, warmup: int) -> tuple[list[float], float, Any]:
    """(per-call ms, seconds of the first call, last output)."""
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    out = fn()
    sync()
    first = time.perf_counter() - start
    for _ in range(max(warmup - 1, 0)):
        out = fn()
    sync()
    times = []
    for _ in range(iters):
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            out = fn()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end))
        else:
            t = time.perf_counter()
            out = fn()
            times.append((time.perf_counter() - t) * 1e3)
    return times, first, out


def time_ltx_forward(
    config_kwargs: dict[str, Any],
    batch: int,
    tokens_shape: tuple[int, int, int],
    dtype: torch.dtype,
    device: Union[str, torch.device],
    modes: Sequence[str] = MODES,
    kernel: Optional[ModuleType] = None,
    iters: int = 20,
    warmup: int = 3,
    *,
    text_len: int = 128,
    per_token_timesteps: bool = False,
    compile_kwargs: Optional[dict[str, Any]] = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Build LTXVideoTransformer3DModel(**config_kwargs) with random weights and time its forward per mode.

    Returns {"setup": {...}, "modes": {mode: {"median_ms", "min_ms", "mean_ms", "first_call_s", "max_abs_err",
    "rel_err" (max |out - eager| / max |eager|), "replaced" (kernel modes)}}}. `kernel` (a loaded ltx-kernels
    module) is required for the "+kernels" modes; compile_kwargs default to {"fullgraph": True}.
    """
    unknown = set(modes) - set(MODES)
    if unknown:
        raise ValueError(f"unknown modes {sorted(unknown)}; choose from {', '.join(MODES)}")
    if kernel is None and any("kernels" in m for m in modes):
        raise ValueError("the +kernels modes need kernel=<loaded ltx-kernels module>")
    device = torch.device(device)
    compile_kwargs = {"fullgraph": True} if compile_kwargs is None else compile_kwargs
    model = build_ltx(config_kwargs, dtype=dtype, device=device, seed=seed)
    inputs = ltx_inputs(
        config_kwargs,
        batch=batch,
        tokens_shape=tokens_shape,
        text_len=text_len,
        per_token_timesteps=per_token_timesteps,
        dtype=dtype,
        device=device,
    )
    setup = {
        "config": dict(config_kwargs),
        "batch": batch,
        "tokens_shape": tuple(tokens_shape),
        "tokens": tokens_shape[0] * tokens_shape[1] * tokens_shape[2],
        "text_len": text_len,
        "per_token_timesteps": per_token_timesteps,
        "dtype": str(dtype).replace("torch.", ""),
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
        "torch": torch.__version__,
        "kernel": getattr(kernel, "__name__", None),
        "iters": iters,
        "warmup": warmup,
        "compile_kwargs": compile_kwargs,
    }
    results: dict[str, Any] = {}
    reference = None
    with torch.inference_mode():
        for mode in ("eager",) + tuple(m for m in MODES if m in modes and m != "eager"):
            hd.unkernelize(model)
            if "+kernels" in mode:
                kmode = Mode.INFERENCE | Mode.TORCH_COMPILE if mode.startswith("compile") else Mode.INFERENCE
                hd.kernelize(model, kernel=kernel, mode=kmode)
                if mode.endswith("+sdpa"):
                    model.set_attention_backend("native")
            fn = model
            if mode.startswith("compile"):
                torch._dynamo.reset()
                fn = torch.compile(model, **compile_kwargs)
            times, first, out = _timed(lambda: fn(**inputs)[0], device, iters if mode in modes else 0, warmup)
            if mode.endswith("+sdpa"):
                model.reset_attention_backend()
            out = out.float()
            if reference is None:
                reference = out
            if mode not in modes:
                continue
            entry: dict[str, Any] = {
                "median_ms": statistics.median(times),
                "min_ms": min(times),
                "mean_ms": statistics.fmean(times),
                "first_call_s": first,
            }
            diff = (out - reference).abs().max().item()
            entry["max_abs_err"] = diff
            entry["rel_err"] = diff / max(reference.abs().max().item(), 1e-30)
            if "+kernels" in mode:
                entry["replaced"] = dict(model._hubkernels_replaced)
            results[mode] = entry
        hd.unkernelize(model)
        torch._dynamo.reset()
    return {"setup": setup, "modes": results}


def format_results(result: dict[str, Any]) -> str:
    """A small table of `time_ltx_forward`'s result, eager first, with speed-ups over eager."""
    setup, modes = result["setup"], result["modes"]
    lines = [
        f"LTX-Video transformer forward: {setup['config'].get('num_layers')} layers, batch {setup['batch']}, "
        f"{setup['tokens']} tokens {setup['tokens_shape']}, {setup['dtype']}, {setup['device']}, "
        f"torch {setup['torch']}",
        f"{'mode':<18}{'median ms':>12}{'min ms':>10}{'vs eager':>10}{'rel err':>11}{'first call s':>14}",
    ]
    eager = modes.get("eager", {}).get("median_ms")
    for name, r in modes.items():
        speedup = f"{eager / r['median_ms']:.2f}x" if eager else "-"
        lines.append(
            f"{name:<18}{r['median_ms']:>12.3f}{r['min_ms']:>10.3f}{speedup:>10}{r['rel_err']:>11.2e}"
            f"{r['first_call_s']:>14.2f}"
        )
    return "\n".join(lines)
