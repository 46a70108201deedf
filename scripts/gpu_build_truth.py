"""Build truth on a GPU: variants built on a CPU machine load and work here, through the user's path.

build/ arrives as the CPU machine wrote it (nothing is compiled here: each .so is hashed before and after). It is
published to a local `hubkernels serve` (Xet on), `get_kernel` picks and loads this GPU's variant in a fresh
process, then the ops' GPU tests run against the published build (HUBKERNELS_TEST_PUBLISHED_BUILD=1) and the
LTX-Video 2B forward runs through the kernel from the hub.

Usage (GPU machine, repo root, build/ carried):  python scripts/gpu_build_truth.py [--steps load tests e2e]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
REPO = "hubkernels/ltx-kernels"


def so_hashes() -> dict[str, str]:
    return {
        str(p.relative_to(ROOT)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        for p in sorted((ROOT / "build").glob("torch-*/*.so"))
    }


def run(cmd: list[str], env: dict[str, str], timeout: int) -> int:
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout).returncode


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", nargs="*", default=["load", "tests", "e2e"])
    ap.add_argument("--e2e-modes", nargs="*", default=["eager", "eager+kernels"])
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    before = so_hashes()
    print(json.dumps(before, indent=1))
    home = Path(tempfile.mkdtemp(prefix="build-truth-"))
    from hubfixture import start_hub_with_env

    hub = start_hub_with_env(home, trusted_orgs=("hubkernels",))
    env = dict(os.environ)
    rc = 0
    try:
        from hubkernels.publish import upload

        commit = upload(ROOT, repo_id=REPO).commit
        print(f"published build/ to {REPO} at {commit[:7]} on {os.environ['HF_ENDPOINT']}", flush=True)
        if "load" in args.steps:
            code = textwrap.dedent(f"""
                import torch, hubkernels
                ltx = hubkernels.get_kernel({REPO!r}, version=1)
                print("loaded", ltx.__name__, "from", ltx.__file__)
                x = torch.randn(2, 6144, 2048, device="cuda", dtype=torch.bfloat16)
                y = ltx.rms_norm(x, None, 1e-6)
                ref = torch.nn.functional.rms_norm(x.float(), (2048,), eps=1e-6)
                print("rms_norm rel err", ((y.float() - ref).norm() / ref.norm()).item())
            """)
            rc |= run([sys.executable, "-c", code], env, 300)
        if "tests" in args.steps:
            tenv = {**env, "HUBKERNELS_TEST_PUBLISHED_BUILD": "1"}
            rc |= run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-m",
                    "gpu",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "tests/ltx/test_ops.py",
                ],
                tenv,
                540,
            )
        if "e2e" in args.steps:
            rc |= run(
                [
                    sys.executable,
                    "scripts/ltx_e2e.py",
                    "--repo",
                    REPO,
                    "--warmup",
                    "5",
                    "--iters",
                    str(args.iters),
                    "--modes",
                    *args.e2e_modes,
                ],
                env,
                540,
            )
    finally:
        hub.stop()
    after = so_hashes()
    print("build/ unchanged (nothing compiled here):", after == before)
    return rc or int(after != before)


if __name__ == "__main__":
    raise SystemExit(main())
