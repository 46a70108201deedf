"""`hubkernels demo`: the main job, end to end, on this machine, for the ltx-kernels of a hubkernels checkout.

Build ltx-kernels (the kernel at `root`: build.toml and benchmarks/ltx_forward.py) for this machine → publish it
to an embedded local Hub → `get_kernel` it back (cold, then warm in a fresh process, counting the Hub requests each
makes) → kernelize a small LTX-Video transformer → check its outputs against the original (text-to-video and
per-token timesteps) → time the forward with and without the kernels. `run_demo` returns the steps, their times
and the failed checks; the CLI prints them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UsageError

REPO_ID = "hubkernels/ltx-kernels"
#: The small LTX-Video transformer the demo kernelizes: hidden 128 (128 % 6 == 2, like the real model's 2048).
SMALL_LTX = dict(
    in_channels=8,
    out_channels=8,
    num_attention_heads=4,
    attention_head_dim=32,
    cross_attention_dim=128,
    caption_channels=64,
    num_layers=2,
)
#: A larger configuration for the timing table (still seconds on a laptop CPU).
TIMING_LTX = dict(
    in_channels=128,
    out_channels=128,
    num_attention_heads=8,
    attention_head_dim=64,
    cross_attention_dim=512,
    caption_channels=256,
    num_layers=4,
)


@dataclass
class DemoReport:
    """What the demo did: each step's (name, seconds, detail), the failed checks, the layers replaced, timings."""

    steps: list[tuple[str, float, str]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    replaced: dict[str, int] = field(default_factory=dict)
    timings: str = ""


class _Steps:
    """Runs each step, tells `say` a line as it starts and ends, and keeps its row for the report."""

    def __init__(self, report: DemoReport, say: Callable[[str], None]) -> None:
        self.report, self.say = report, say

    def run(self, name: str, fn: Any) -> Any:
        self.say(f"==> {name}")
        t0 = time.perf_counter()
        value, detail = fn()
        dt = time.perf_counter() - t0
        self.report.steps.append((name, dt, detail))
        self.say(f"    {detail}  ({dt:.2f} s)")
        return value

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.report.failed.append(what)
            self.say(f"    FAILED: {what}")


def _warm_load_in_new_process(env: dict[str, str]) -> tuple[float, str]:
    code = (
        "import time, torch; t0 = time.perf_counter(); import hubkernels; "
        f"k = hubkernels.get_kernel({REPO_ID!r}, version=1); "
        "x = torch.randn(4, 64); y = k.rms_norm(x, None, 1e-6); "
        "print(round((time.perf_counter() - t0) * 1e3, 2))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1]), out.stderr


def run_demo(
    root: str | Path,
    work: Path,
    *,
    compile: bool = False,
    iters: int = 5,
    verbose: bool = False,
    say: Callable[[str], None] = lambda line: None,
) -> DemoReport:
    """Build, publish, load, kernelize and time the ltx-kernels at `root`, with the Hub and caches under `work`;
    `say` gets a line as each step starts and ends. Call it before anything imports huggingface_hub."""
    root = Path(root).resolve()
    if not (root / "build.toml").is_file() or not (root / "benchmarks" / "ltx_forward.py").is_file():
        raise UsageError(
            f"{root} is not a hubkernels checkout (build.toml and benchmarks/ltx_forward.py): the demo builds "
            "its ltx-kernels; run it from the repository root or give that path"
        )
    if "huggingface_hub" in sys.modules:
        raise UsageError("the demo must start before huggingface_hub is imported (it reads HF_ENDPOINT once)")

    import torch

    from .builder import build
    from .server import BackgroundHub

    report = DemoReport()
    steps = _Steps(report, say)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    say(f"hubkernels demo on {device} (torch {torch.__version__}); work dir {work}\n")

    result = steps.run(
        "build ltx-kernels for this machine",
        lambda: (
            (r := build(root, quiet=not verbose)),
            f"{r.variant} ({'up to date' if r.up_to_date else 'compiled'})",
        ),
    )
    hub = steps.run(
        "start the embedded Hub",
        lambda: ((h := BackgroundHub(work / "hub", trusted_orgs=("hubkernels",)).start()), h.url),
    )
    token = hub.create_token("demo", [REPO_ID.split("/")[0]], write=True)
    os.environ.update(
        {
            "HF_ENDPOINT": hub.url,
            "HF_HOME": str(work / "hf-home"),
            "HF_HUB_CACHE": str(work / "hf-cache"),
            "HF_TOKEN": token,
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
    )  # before anything imports huggingface_hub

    try:
        from .publish import upload

        up = steps.run(
            f"publish to {REPO_ID}",
            lambda: (
                (u := upload(root, repo_id=REPO_ID, variants=[str(result.variant)])),
                f"branch {u.branch}, commit {u.commit[:10]}, tag {u.tag}",
            ),
        )
        del up

        from .fetch import get_kernel

        hub.reset_requests()
        kernel = steps.run(
            "get_kernel (cold)",
            lambda: ((k := get_kernel(REPO_ID)), f"{k.__name__}, {len(hub.requests())} Hub requests"),
        )
        x = torch.randn(8, 2048)
        ref = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6)
        err = float((kernel.rms_norm(x, None, 1e-6).double() - ref).abs().max())
        steps.check(err < 1e-5, f"rms_norm from the Hub matches float64 (max abs err {err:.1e})")

        hub.reset_requests()
        warm_ms = steps.run(
            "get_kernel (warm, new process)",
            lambda: (
                (ms := _warm_load_in_new_process(dict(os.environ))[0]),
                f"{len(hub.requests())} Hub requests, {ms:.0f} ms including `import hubkernels`",
            ),
        )
        del warm_ms
        asked = [r["path"] for r in hub.requests() if r["path"] != "/api/agent-harnesses"]
        steps.check(
            asked == [f"/api/kernels/{REPO_ID}/refs"],
            "a warm load asks the Hub only for the version's current commit (as HF kernels does)",
        )

        ltx = _ltx_forward(root)
        report.replaced = steps.run(
            "kernelize a small LTX-Video transformer and check it", lambda: _check_ltx(kernel, steps, ltx)
        )
        report.timings = steps.run(
            f"time the transformer forward on {device}", lambda: _time_ltx(kernel, device, ltx, compile, iters)
        )
    finally:
        hub.stop()
    return report


def _check_ltx(kernel: Any, steps: _Steps, ltx: Any) -> tuple[dict[str, int], str]:
    import torch

    from .integrations import diffusers as hd

    build_ltx, ltx_inputs = ltx.build_ltx, ltx.ltx_inputs

    details = []
    replaced: dict[str, int] = {}
    for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 5e-2)):
        model = build_ltx(SMALL_LTX, dtype=dtype)
        for per_token in (False, True):
            inputs = ltx_inputs(SMALL_LTX, per_token_timesteps=per_token, dtype=dtype)
            with torch.inference_mode():
                hd.unkernelize(model)
                expected = model(**inputs)[0].float()
                hd.kernelize(model, kernel=kernel)
                got = model(**inputs)[0].float()
            replaced = dict(model._hubkernels_replaced)
            rel = float((got - expected).abs().max() / expected.abs().max())
            name = f"{str(dtype).replace('torch.', '')} {'per-token' if per_token else 'text-to-video'}"
            steps.check(rel < tol, f"kernelized LTX output matches the original ({name}: rel err {rel:.1e})")
            details.append(f"{name} rel err {rel:.1e}")
    counts = ", ".join(f"{k} {v}" for k, v in replaced.items())
    return replaced, f"replaced: {counts}; " + "; ".join(details)


def _time_ltx(kernel: Any, device: str, ltx: Any, compile: bool, iters: int) -> tuple[str, str]:
    import torch

    format_results, time_ltx_forward = ltx.format_results, ltx.time_ltx_forward

    modes = ["eager", "eager+kernels"] + (["compile", "compile+kernels"] if compile else [])
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    result = time_ltx_forward(
        TIMING_LTX,
        batch=2,
        tokens_shape=(4, 8, 12),
        dtype=dtype,
        device=device,
        modes=modes,
        kernel=kernel,
        iters=iters,
        warmup=2,
        text_len=64,
    )
    m = result["modes"]
    speed = m["eager"]["median_ms"] / m["eager+kernels"]["median_ms"]
    return format_results(
        result
    ), f"eager {m['eager']['median_ms']:.1f} ms, with kernels {m['eager+kernels']['median_ms']:.1f} ms ({speed:.2f}x)"


def _ltx_forward(root: Path) -> Any:
    """The checkout's benchmarks/ltx_forward.py: the LTX-Video model, its inputs and the forward timing."""
    from .author.bench import load_script

    return load_script(root / "benchmarks" / "ltx_forward.py", "ltx_forward")
