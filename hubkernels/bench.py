"""`hubkernels bench`: time each ltx-kernels op against its peers, in one run, on LTX-Video shapes.

GPU: CUDA events around back-to-back calls queued behind a device-side sleep (GPU time, not launch
time); CPU: a monotonic clock. Warm-up first, then the median of many samples, with inputs rotated
among several buffers (3 x 50 MB at the LTX shape, past the H200's L2) so the cache cannot serve repeats. The copy
bandwidth is measured in the same run, and every op reports the percent of it that it reaches.
Peers timed side by side: diffusers' eager formula, `F.rms_norm` where it applies, and
`torch.compile` of the eager formula.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .errors import UsageError


@dataclass
class Row:
    op: str
    impl: str
    median_us: float
    bytes: int
    pct_copy_bw: float
    max_rel_err: float | None = None
    samples: int = 0


@dataclass
class Report:
    device: str
    torch: str
    dtype: str
    shape: list[int]
    copy_gbps: float
    rows: list[Row] = field(default_factory=list)


# ---- eager formulas (what diffusers' LTX-Video does today) ---------------------------------------

def eager_rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """diffusers.models.normalization.RMSNorm.forward."""
    dtype = x.dtype
    var = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(var + eps)
    if weight is not None:
        return x.to(weight.dtype) * weight
    return x.to(dtype)


def eager_modulate(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, eps: float) -> torch.Tensor:
    return eager_rms_norm(x, None, eps) * (1 + scale) + shift


def eager_add_modulate(x: torch.Tensor, y: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The LTX block's cross-attention residual, then the feed-forward's AdaLN: (h, modulated h)."""
    h = x + y
    return h, eager_modulate(h, scale, shift, eps)


def eager_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """diffusers' LTX apply_rotary_emb: interleaved pairs over the whole hidden width."""
    x_real, x_imag = x.unflatten(2, (-1, 2)).unbind(-1)
    rotated = torch.stack([-x_imag, x_real], dim=-1).flatten(2)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


def eager_rope_qk(q, k, cos, sin):  # type: ignore[no-untyped-def]
    return eager_rope(q, cos, sin), eager_rope(k, cos, sin)


def eager_qk_norm_rope(q, k, wq, wk, cos, sin, eps):  # type: ignore[no-untyped-def]
    """LTXVideoAttnProcessor's prologue: torch.nn.RMSNorm on q and k across heads, then RoPE."""
    q = F.rms_norm(q, (q.shape[-1],), wq, eps)
    k = F.rms_norm(k, (k.shape[-1],), wk, eps)
    return eager_rope(q, cos, sin), eager_rope(k, cos, sin)


def rope_freqs(dim: int, theta: float, device: torch.device) -> torch.Tensor:
    """diffusers' LTX-Video per-axis RoPE frequencies (pi/2 included), float32 [dim // 6]."""
    freqs = theta ** torch.linspace(math.log(1.0, theta), math.log(theta, theta), dim // 6, device=device,
                                    dtype=torch.float32)
    return freqs * math.pi / 2.0


def eager_rope_tables(pos: torch.Tensor, freqs: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """LTXVideoRotaryPosEmbed's (cos, sin) from positions [B,S,3] and frequencies, as diffusers computes them."""
    angles = (freqs * (pos.unsqueeze(-1) * 2 - 1)).transpose(-1, -2).flatten(2)
    cos, sin = angles.cos().repeat_interleave(2, dim=-1), angles.sin().repeat_interleave(2, dim=-1)
    pad = dim % 6
    if pad:
        ones = torch.ones(*cos.shape[:-1], pad, dtype=cos.dtype, device=cos.device)
        cos, sin = torch.cat([ones, cos], dim=-1), torch.cat([ones * 0, sin], dim=-1)
    return cos, sin


def eager_qk_norm_rope_grid(q, k, wq, wk, pos, freqs, eps):  # type: ignore[no-untyped-def]
    """The prologue with the tables built from positions first (diffusers builds them once per forward)."""
    cos, sin = eager_rope_tables(pos, freqs, q.shape[-1])
    return eager_qk_norm_rope(q, k, wq, wk, cos, sin, eps)


def eager_gated_residual(x, y, gate):  # type: ignore[no-untyped-def]
    return x + y * gate


def eager_gelu_tanh(x):  # type: ignore[no-untyped-def]
    return F.gelu(x, approximate="tanh")


# ---- timing -------------------------------------------------------------------------------------

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(fn: Callable[..., Any], input_sets: Sequence[tuple], device: torch.device,
               warmup: int, iters: int, inner: int = 10) -> list[float]:
    """Per-call times in microseconds, cycling through `input_sets` so caches don't serve repeats.

    On the GPU each sample is one CUDA-event interval around `inner` back-to-back calls, queued behind a
    device-side sleep that outlasts the host's queueing of them (measured once, slept for twice that, at
    least ~1 ms), so the interval holds GPU time, not Python launch time.
    """
    for i in range(warmup):
        fn(*input_sets[i % len(input_sets)])
    _sync(device)
    times = []
    if device.type == "cuda":
        t0 = time.perf_counter()
        for i in range(inner):
            fn(*input_sets[i % len(input_sets)])
        queue_s = time.perf_counter() - t0
        _sync(device)
        sleep_cycles = max(2_000_000, int(2 * queue_s * 2e9))  # cycles at ~2 GHz; slower clocks sleep longer
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(sleep_cycles)
            start.record()
            for i in range(inner):
                fn(*input_sets[i % len(input_sets)])
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / inner)
    else:
        for i in range(iters):
            args = input_sets[i % len(input_sets)]
            t0 = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - t0) * 1e6)
    return times


def warm_up_device(device: torch.device, seconds: float = 1.5) -> None:
    """Keep the GPU busy for a moment so its clocks leave idle before anything is timed."""
    if device.type != "cuda":
        return
    a = torch.empty(1 << 28, device=device)
    b = torch.empty_like(a)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            b.copy_(a)
        torch.cuda.synchronize(device)


def copy_bandwidth(device: torch.device, nbytes: int, warmup: int, iters: int) -> float:
    """Device-to-device copy rate in GB/s, counting bytes read plus bytes written."""
    n = nbytes // 4
    src = [torch.randn(n, device=device) for _ in range(2)]
    dst = torch.empty(n, device=device)
    times = time_calls(lambda s: dst.copy_(s), [(s,) for s in src], device, warmup, iters)
    return 2 * n * 4 / (statistics.median(times) * 1e-6) / 1e9


def _nbytes(*ts: Any) -> int:
    total = 0
    for t in ts:
        if isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
        elif isinstance(t, (tuple, list)):
            total += _nbytes(*t)
    return total


def _rel_err(out: Any, ref: Any) -> float:
    if isinstance(out, (tuple, list)):
        return max(_rel_err(o, r) for o, r in zip(out, ref))
    o, r = out.double(), ref.double()
    return float((o - r).norm() / r.norm().clamp_min(1e-30))


# ---- the benchmark ------------------------------------------------------------------------------

def run(kernel: Any, *, device: str = "cuda", dtype: torch.dtype = torch.bfloat16, batch: int = 2,
        tokens: int = 6144, hidden: int = 2048, ff: int = 8192, rotate: int = 3, warmup: int = 10,
        iters: int = 50, compile_peers: bool = True, ops: Sequence[str] | None = None) -> Report:
    """Time every op of `kernel` (an imported ltx_kernels module) and its peers; returns the report."""
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(int(time.time()) & 0xFFFF)

    def rnd(*shape: int, dt: torch.dtype = dtype) -> torch.Tensor:
        return torch.randn(*shape, device=dev, dtype=dt, generator=gen)

    B, S, D = batch, tokens, hidden
    # Each op's inputs are made just before it is timed and freed after it, so every op starts from the same
    # allocator state (same-sized inputs get the same blocks, carved from the segments the copy-bandwidth
    # reference ran on) and the memory held does not grow with the number of ops.
    sets: dict[str, Callable[[], list[tuple]]] = {
        "rms_norm": lambda: [(rnd(B, S, D),) for _ in range(rotate)],
        "rms_norm_modulate": lambda: [(rnd(B, S, D), 0.1 * rnd(B, 1, D), 0.1 * rnd(B, 1, D))
                                      for _ in range(rotate)],
        "rms_norm_weight": lambda: [(rnd(B, S, D), 1 + 0.1 * rnd(D)) for _ in range(rotate)],
        "add_rms_norm_modulate": lambda: [(rnd(B, S, D), rnd(B, S, D), 0.1 * rnd(B, 1, D), 0.1 * rnd(B, 1, D))
                                          for _ in range(rotate)],
        "rope_interleaved_qk": lambda: [(rnd(B, S, D), rnd(B, S, D), rnd(B, S, D, dt=torch.float32).cos(),
                                         rnd(B, S, D, dt=torch.float32).sin()) for _ in range(rotate)],
        "gelu_tanh": lambda: [(rnd(B, S, ff),) for _ in range(rotate)],
        "gated_residual": lambda: [(rnd(B, S, D), rnd(B, S, D), 0.1 * rnd(B, 1, D)) for _ in range(rotate)],
        "qk_rms_norm_rope": lambda: [(rnd(B, S, D), rnd(B, S, D), 1 + 0.1 * rnd(D), 1 + 0.1 * rnd(D),
                                      rnd(B, S, D, dt=torch.float32).cos(), rnd(B, S, D, dt=torch.float32).sin())
                                     for _ in range(rotate)],
        # Positions of a 16 x 16 x 24 latent grid (LTX-Video 2B at 768x512, 121 frames), repeated to S tokens.
        "qk_rms_norm_rope_grid": lambda: [(rnd(B, S, D), rnd(B, S, D), 1 + 0.1 * rnd(D), 1 + 0.1 * rnd(D),
                                           _ltx_positions(B, S, dev), rope_freqs(D, 10000.0, dev))
                                          for _ in range(rotate)],
    }
    eps6, eps5 = 1e-6, 1e-5
    impls: dict[str, dict[str, Callable[..., Any]]] = {
        "rms_norm": {"ours": lambda x: kernel.rms_norm(x, None, eps6),
                     "eager": lambda x: eager_rms_norm(x, None, eps6),
                     "F.rms_norm": lambda x: F.rms_norm(x, (x.shape[-1],), None, eps6)},
        "rms_norm_modulate": {"ours": lambda x, sc, sh: kernel.rms_norm_modulate(x, sc, sh, None, eps6),
                              "eager": lambda x, sc, sh: eager_modulate(x, sc, sh, eps6)},
        "add_rms_norm_modulate": {
            "ours": lambda x, y, sc, sh: kernel.add_rms_norm_modulate(x, y, sc, sh, None, None, eps6),
            "eager": lambda x, y, sc, sh: eager_add_modulate(x, y, sc, sh, eps6)},
        "rms_norm_weight": {"ours": lambda x, w: kernel.rms_norm(x, w, eps5),
                            "eager": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps5),
                            "F.rms_norm": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps5)},
        "rope_interleaved_qk": {"ours": kernel.rope_interleaved_qk, "eager": eager_rope_qk},
        "gelu_tanh": {"ours": kernel.gelu_tanh, "eager": eager_gelu_tanh},
        "gated_residual": {"ours": kernel.gated_residual, "eager": eager_gated_residual},
        "qk_rms_norm_rope": {"ours": lambda q, k, wq, wk, c, s: kernel.qk_rms_norm_rope(q, k, wq, wk, c, s, eps5),
                             "eager": lambda q, k, wq, wk, c, s: eager_qk_norm_rope(q, k, wq, wk, c, s, eps5)},
        "qk_rms_norm_rope_grid": {
            "ours": lambda q, k, wq, wk, p, f: kernel.qk_rms_norm_rope_grid(q, k, wq, wk, p, f, eps5),
            "eager": lambda q, k, wq, wk, p, f: eager_qk_norm_rope_grid(q, k, wq, wk, p, f, eps5)},
    }
    impls["rms_norm_weight"].pop("eager")  # torch.nn.RMSNorm's eager forward *is* F.rms_norm: time it once
    if ops:
        selected = list(ops)
        unknown = [op for op in selected if op not in impls]
        if unknown:
            raise UsageError(f"no bench for {', '.join(unknown)}; choose from {', '.join(impls)}")
        missing = [op for op in selected if not hasattr(kernel, _KERNEL_OP.get(op, op))]
        if missing:
            raise UsageError(f"{kernel.__name__} has no {', '.join(missing)} (built before it was added); rebuild it")
    else:  # every op this build has (an older build lacks the newer ones)
        selected = [op for op in impls if hasattr(kernel, _KERNEL_OP.get(op, op))]
    warm_up_device(dev)
    copy_gbps = copy_bandwidth(dev, 1 << 30 if dev.type == "cuda" else 1 << 27, warmup, iters)
    report = Report(device=_device_name(dev), torch=torch.__version__, dtype=str(dtype).replace("torch.", ""),
                    shape=[B, S, D], copy_gbps=round(copy_gbps, 1))
    for op in selected:
        inputs = sets[op]()
        candidates = dict(impls[op])
        if compile_peers:
            eager = candidates.get("eager") or candidates.get("F.rms_norm")
            candidates["torch.compile"] = torch.compile(eager, dynamic=False)
        ref = _reference(op, inputs[0])
        for name, fn in candidates.items():
            out = fn(*inputs[0])
            times = time_calls(fn, inputs, dev, warmup, iters)
            med = statistics.median(times)
            nbytes = _nbytes(*inputs[0]) + _nbytes(out)  # every input read once, every output written once
            pct = 100 * (nbytes / (med * 1e-6) / 1e9) / copy_gbps
            report.rows.append(Row(op, name, round(med, 2), nbytes, round(pct, 1), _rel_err(out, ref), len(times)))
        del candidates, inputs, ref, out
    return report


# Bench entries named other than the kernel function they time.
_KERNEL_OP = {"rms_norm_weight": "rms_norm"}


def _reference(op: str, args: tuple) -> Any:
    """float64 reference of each op on the first input set."""
    d = tuple(a.double() if isinstance(a, torch.Tensor) else a for a in args)
    if op == "rms_norm":
        return eager_rms_norm(d[0], None, 1e-6)
    if op == "rms_norm_modulate":
        return eager_modulate(d[0], d[1], d[2], 1e-6)
    if op == "rms_norm_weight":
        return F.rms_norm(d[0], (d[0].shape[-1],), d[1], 1e-5)
    if op == "add_rms_norm_modulate":
        return eager_add_modulate(d[0], d[1], d[2], d[3], 1e-6)
    if op == "rope_interleaved_qk":
        return _rope64(d[0], d[2], d[3]), _rope64(d[1], d[2], d[3])
    if op == "gelu_tanh":
        return F.gelu(d[0], approximate="tanh")
    if op == "gated_residual":
        return d[0] + d[1] * d[2]
    if op == "qk_rms_norm_rope":
        q = F.rms_norm(d[0], (d[0].shape[-1],), d[2], 1e-5)
        k = F.rms_norm(d[1], (d[1].shape[-1],), d[3], 1e-5)
        return _rope64(q, d[4], d[5]), _rope64(k, d[4], d[5])
    if op == "qk_rms_norm_rope_grid":
        cos, sin = eager_rope_tables(args[4], args[5], args[0].shape[-1])  # float32 angles, as diffusers
        return _reference("qk_rms_norm_rope", (*d[:4], cos.double(), sin.double()))
    raise KeyError(op)


def _ltx_positions(batch: int, tokens: int, device: torch.device) -> torch.Tensor:
    """float32 [batch, tokens, 3] (frame, height, width) / (20, 2048, 2048) * (8/25, 32, 32), as the LTX
    pipelines pass them for a 16 x 16 x 24 latent, repeated or cut to `tokens`."""
    f, h, w = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), torch.arange(24.0), indexing="ij")
    grid = torch.stack([f * 8 / 25 / 20, h * 32 / 2048, w * 32 / 2048], dim=-1).reshape(-1, 3)
    grid = grid.repeat((tokens + grid.shape[0] - 1) // grid.shape[0], 1)[:tokens]
    return grid.expand(batch, tokens, 3).contiguous().to(device)


def _rope64(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x_real, x_imag = x.unflatten(2, (-1, 2)).unbind(-1)
    return x * cos + torch.stack([-x_imag, x_real], dim=-1).flatten(2) * sin


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"CPU {platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"


def format_report(report: Report) -> str:
    lines = [f"# {report.device}, torch {report.torch}, {report.dtype}, [B,S,D]={report.shape}, "
             f"copy bandwidth {report.copy_gbps:.0f} GB/s (read+write)",
             f"{'op':22} {'impl':14} {'median us':>10} {'% copy BW':>10} {'vs ours':>8} {'rel err':>9}"]
    ours = {r.op: r.median_us for r in report.rows if r.impl == "ours"}
    for r in report.rows:
        speed = f"{r.median_us / ours[r.op]:.2f}x" if r.op in ours and r.impl != "ours" else ""
        err = f"{r.max_rel_err:.1e}" if r.max_rel_err is not None else ""
        lines.append(f"{r.op:22} {r.impl:14} {r.median_us:10.1f} {r.pct_copy_bw:9.1f}% {speed:>8} {err:>9}")
    return "\n".join(lines)


def _load_kernel(args: argparse.Namespace) -> Any:
    if args.repo_id:
        from .fetch import get_kernel

        return get_kernel(args.repo_id, version=args.version, trust_remote_code=True)
    from .load import get_local_kernel

    return get_local_kernel(args.kernel)


def _cmd_bench(args: argparse.Namespace) -> int:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    kernel = _load_kernel(args)
    if device == "cpu" and args.tokens is None:
        args.tokens = 1024  # the full LTX shape is slow for the eager peers on a small CPU
    report = run(kernel, device=device, dtype=dtype, batch=args.batch, tokens=args.tokens or 6144,
                 hidden=args.hidden, ff=args.ff, warmup=args.warmup, iters=args.iters,
                 compile_peers=not args.no_compile, ops=args.ops)
    print(format_report(report))
    if args.output:
        Path(args.output).write_text(json.dumps({**asdict(report), "argv": sys.argv}, indent=2))
        print(f"wrote {args.output}")
    return 0


def register_cli(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("bench", help="time each ltx-kernels op against eager, F.rms_norm and torch.compile")
    p.add_argument("--kernel", default=".", help="local kernel dir (default: this checkout's build)")
    p.add_argument("--repo-id", help="load from the Hub instead")
    p.add_argument("--version", type=int, help="kernel version on the Hub")
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--tokens", type=int, help="sequence length (default 6144 on GPU, 1024 on CPU)")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--ff", type=int, default=8192, help="FF width for gelu_tanh")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile peers")
    p.add_argument("--ops", nargs="*", help="only these ops")
    p.add_argument("--output", help="write the full report as JSON here")
    p.set_defaults(func=_cmd_bench)
