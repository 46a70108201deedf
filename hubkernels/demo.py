"""`hubkernels demo`: the main job, end to end, on this machine.

Build ltx-kernels for this machine → publish it to an embedded local Hub → `get_kernel` it back (cold, then
warm in a fresh process, counting the Hub requests each makes) → kernelize a small LTX-Video transformer →
check its outputs against the original (text-to-video and per-token timesteps) → time the forward with and
without the kernels. Exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
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


class _Steps:
    """Prints each step as it runs and keeps (name, seconds, detail) for the summary."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, str]] = []
        self.failed: list[str] = []

    def run(self, name: str, fn: Any) -> Any:
        print(f"==> {name}", flush=True)
        t0 = time.perf_counter()
        value, detail = fn()
        dt = time.perf_counter() - t0
        self.rows.append((name, dt, detail))
        print(f"    {detail}  ({dt:.2f} s)", flush=True)
        return value

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.failed.append(what)
            print(f"    FAILED: {what}", flush=True)


def _warm_load_in_new_process(env: dict[str, str]) -> tuple[float, str]:
    code = (
        "import time, torch; t0 = time.perf_counter(); import hubkernels; "
        f"k = hubkernels.get_kernel({REPO_ID!r}, version=1); "
        "x = torch.randn(4, 64); y = k.rms_norm(x, None, 1e-6); "
        "print(round((time.perf_counter() - t0) * 1e3, 2))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1]), out.stderr


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run(args)


def run(args: argparse.Namespace) -> int:
    work = Path(args.workdir or tempfile.mkdtemp(prefix="hubkernels-demo-"))
    if "huggingface_hub" in sys.modules:
        # huggingface_hub reads HF_ENDPOINT once, at import: run the demo in a process that sees the embedded Hub.
        argv = sys.argv[1:] if sys.argv[1:2] == ["demo"] else ["demo"]
        return subprocess.call([sys.executable, "-m", "hubkernels", *argv, "--workdir", str(work)])

    import torch

    from .builder import build
    from .server import BackgroundHub

    steps = _Steps()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"hubkernels demo on {device} (torch {torch.__version__}); work dir {work}\n", flush=True)

    result = steps.run(
        "build ltx-kernels for this machine",
        lambda: (
            (r := build(ROOT, quiet=not args.verbose)),
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
                (u := upload(ROOT, repo_id=REPO_ID, variants=[str(result.variant)])),
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

        report = steps.run("kernelize a small LTX-Video transformer and check it", lambda: _check_ltx(kernel, steps))
        timings = steps.run(f"time the transformer forward on {device}", lambda: _time_ltx(kernel, device, args))
    finally:
        hub.stop()

    print("\nSummary")
    for name, dt, detail in steps.rows:
        print(f"  {name:<52} {dt:8.2f} s   {detail}")
    print("\n" + timings)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"steps": steps.rows, "replaced": report, "failed": steps.failed}, indent=2, default=str)
        )
    if steps.failed:
        print("\nFAILED: " + "; ".join(steps.failed))
        return 1
    print("\nAll checks passed.")
    return 0


def _check_ltx(kernel: Any, steps: _Steps) -> tuple[dict[str, int], str]:
    import torch

    from .integrations import diffusers as hd

    build_ltx, ltx_inputs = _ltx_forward().build_ltx, _ltx_forward().ltx_inputs

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


def _time_ltx(kernel: Any, device: str, args: argparse.Namespace) -> tuple[str, str]:
    import torch

    format_results, time_ltx_forward = _ltx_forward().format_results, _ltx_forward().time_ltx_forward

    modes = ["eager", "eager+kernels"] + (["compile", "compile+kernels"] if args.compile else [])
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    result = time_ltx_forward(
        TIMING_LTX,
        batch=2,
        tokens_shape=(4, 8, 12),
        dtype=dtype,
        device=device,
        modes=modes,
        kernel=kernel,
        iters=args.iters,
        warmup=2,
        text_len=64,
    )
    m = result["modes"]
    speed = m["eager"]["median_ms"] / m["eager+kernels"]["median_ms"]
    return format_results(
        result
    ), f"eager {m['eager']['median_ms']:.1f} ms, with kernels {m['eager+kernels']['median_ms']:.1f} ms ({speed:.2f}x)"


def _ltx_forward() -> Any:
    """This checkout's benchmarks/ltx_forward.py: the LTX-Video model, its inputs and the forward timing."""
    from .bench import load_script

    return load_script(ROOT / "benchmarks" / "ltx_forward.py", "ltx_forward")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hubkernels demo", description=__doc__.splitlines()[0])
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", help="where the Hub and the cache live (default: a new temp dir)")
    p.add_argument("--compile", action="store_true", help="also time torch.compile with and without the kernels")
    p.add_argument("--iters", type=int, default=5, help="timed forwards per mode")
    p.add_argument("--json", help="write the results here")
    p.add_argument("-v", "--verbose", action="store_true", help="show the compiler's commands")


if __name__ == "__main__":
    raise SystemExit(main())
