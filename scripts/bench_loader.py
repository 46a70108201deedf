"""Loader benchmark: hubkernels vs Hugging Face `kernels`, cold and warm, on a local Hub.

    python scripts/bench_loader.py [PATH] [--runs 7] [--output .bench/loader.json]

Starts the local Hub in a temporary directory, builds the kernel at PATH (default: the current directory) for
this machine, publishes it as `hubkernels/<name>`, then loads it in new Python processes with each loader.
Each process imports torch first and times `get_kernel(repo, version=1)` from there (importing the loader
included), so the numbers are "time over the torch import". Requests are read from the Hub's own log;
huggingface_hub's once-a-day telemetry registry (`/api/agent-harnesses`) and hf_xet's transfer telemetry
(`/v1/telemetry`, posted in the background) are reported apart. Cold: an empty cache per process, Xet's chunk
cache included. Warm: the cache filled by a cold run. "again" is a second `get_kernel` call in the same process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path
from typing import Any

_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
{load}
t2 = time.perf_counter()
print("LOADED", flush=True)
sys.stdin.readline()
t3 = time.perf_counter()
{load_again}
t4 = time.perf_counter()
print("BENCH" + json.dumps({{"torch_import_s": t1 - t0, "load_s": t2 - t1, "again_s": t4 - t3}}), flush=True)
"""

LOADERS = {
    "hubkernels": "import hubkernels.fetch as _f\nk = _f.get_kernel({repo!r}, version=1)",
    "kernels": "import kernels as _k\nk = _k.get_kernel({repo!r}, version=1)",
}
_AGAIN = {
    "hubkernels": "k = _f.get_kernel({repo!r}, version=1)",
    "kernels": "k = _k.get_kernel({repo!r}, version=1)",
}


_TELEMETRY = ("/api/agent-harnesses", "/v1/telemetry")


def _requests(hub: Any) -> tuple[list[str], int]:
    """The requests since the last reset, without the clients' telemetry; and how many telemetry requests."""
    log = hub.requests()
    hub.reset_requests()
    return (
        [f"{r['method']} {r['path']}" for r in log if r["path"] not in _TELEMETRY],
        sum(1 for r in log if r["path"] in _TELEMETRY),
    )


def _run(loader: str, repo: str, cache: Path, hub: Any) -> dict[str, Any]:
    """One new process loading `repo` with `loader` into `cache`: timings and the requests of each call."""
    code = _CHILD.format(load=LOADERS[loader].format(repo=repo), load_again=_AGAIN[loader].format(repo=repo))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # cache bytecode, as users do
    hub.reset_requests()
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        text=True,
        env={**env, "HF_HUB_CACHE": str(cache), "HF_XET_CACHE": str(cache / "xet")},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdin is not None
    for line in proc.stdout:  # the first call is done when the child says so
        if line.startswith("LOADED"):
            break
    first, telemetry = _requests(hub)
    stdout, stderr = proc.communicate("\n", timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{loader} failed to load {repo}:\n{stderr[-3000:]}")
    result: dict[str, Any] = json.loads(next(ln for ln in stdout.splitlines() if ln.startswith("BENCH"))[5:])
    again, _ = _requests(hub)
    result.update(requests=first, again_requests=again, telemetry_requests=telemetry)
    return result


def _summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "requests": len(samples[-1]["requests"]),
        "request_list": samples[-1]["requests"],
        "again_requests": len(samples[-1]["again_requests"]),
        "load_s_median": statistics.median(s["load_s"] for s in samples),
        "again_s_median": statistics.median(s["again_s"] for s in samples),
        "torch_import_s_median": statistics.median(s["torch_import_s"] for s in samples),
        "samples": samples,
    }


def run(path: Path, runs: int, work: Path, *, rebuild: bool = True) -> dict[str, Any]:
    """Build (unless `rebuild` is False: publish the existing build), publish and measure; returns the JSON-able
    results. Must run before huggingface_hub is imported (it points the client at the local Hub)."""
    from hubkernels.server import BackgroundHub

    hub = BackgroundHub(work / "hub", trusted_orgs=("hubkernels",), start=False)  # bound now: the URL is known
    token = hub.create_token("bench", ["hubkernels"], write=True)
    os.environ.update(
        {
            "HF_ENDPOINT": hub.url,
            "HF_TOKEN": token,
            "HF_HOME": str(work / "hf-home"),
            "HF_HUB_CACHE": str(work / "publish-cache"),
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
    )
    for name in ("HF_HUB_OFFLINE", "LOCAL_KERNELS", "HUBKERNELS_CACHE", "KERNELS_CACHE", "HUBKERNELS_VERSION_TTL"):
        os.environ.pop(name, None)
    from hubkernels.builder import build
    from hubkernels.config import load_config
    from hubkernels.fetch import resolve_local
    from hubkernels.publish import upload

    repo_id = f"hubkernels/{load_config(path).name}"

    if rebuild:
        built = build(path, quiet=True)
        variant, variant_dir = str(built.variant), built.path
    else:
        variant_dir, resolution = resolve_local(path)
        variant = str(resolution.chosen)
    with hub:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # dirty work trees warn; the benchmark does not care
            upload(path, repo_id=repo_id, variants=[variant])
        results: dict[str, Any] = {}
        for loader in LOADERS:
            cold = [_run(loader, repo_id, work / f"{loader}-cold-{i}", hub) for i in range(runs)]
            warm_cache = work / f"{loader}-warm"
            _run(loader, repo_id, warm_cache, hub)  # fill the cache
            warm = [_run(loader, repo_id, warm_cache, hub) for _ in range(runs)]
            results[loader] = {"cold": _summary(cold), "warm": _summary(warm)}
    import huggingface_hub
    import torch

    try:
        from importlib.metadata import version

        kernels_version = version("kernels")
    except Exception:  # noqa: BLE001 - informational only
        kernels_version = None
    return {
        "kernel": str(path),
        "variant": variant,
        "files": sum(1 for p in variant_dir.rglob("*") if p.is_file()),
        "runs": runs,
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "huggingface_hub": huggingface_hub.__version__,
            "kernels": kernels_version,
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
        },
        "results": results,
    }


def table(data: dict[str, Any]) -> str:
    """The results as a Markdown table."""
    rows = [
        "| loader | cold requests | warm requests | cold load (median) | warm load (median) | "
        "second call in the process |",
        "|---|---|---|---|---|---|",
    ]
    for loader, r in data["results"].items():
        rows.append(
            f"| {loader} | {r['cold']['requests']} | {r['warm']['requests']} | "
            f"{r['cold']['load_s_median'] * 1e3:.0f} ms | {r['warm']['load_s_median'] * 1e3:.0f} ms | "
            f"{r['warm']['again_s_median'] * 1e3:.1f} ms, {r['warm']['again_requests']} requests |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/bench_loader.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", default=".", help="kernel root to build and publish (default: .)")
    parser.add_argument("--runs", type=int, default=7, help="new processes per measurement (median reported)")
    parser.add_argument("--output", default=".bench/loader.json", help="where to write the JSON results")
    parser.add_argument(
        "--no-build",
        dest="rebuild",
        action="store_false",
        help="publish the existing build/<variant> for this machine instead of building first",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hubkernels-bench-loader-") as tmp:
        data = run(Path(args.path).resolve(), max(1, args.runs), Path(tmp), rebuild=args.rebuild)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(
        textwrap.dedent(f"""\
        {data["variant"]} ({data["files"]} files), {data["runs"]} new processes each, torch {data["machine"]["torch"]},
        huggingface_hub {data["machine"]["huggingface_hub"]}, kernels {data["machine"]["kernels"]}; times exclude
        the torch import (median {data["results"]["hubkernels"]["warm"]["torch_import_s_median"]:.2f} s).
        """)
    )
    print(table(data))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
