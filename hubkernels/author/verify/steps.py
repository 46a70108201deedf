"""verify's build, ABI and test checks: compile every backend this machine can, check each .so, run the tests."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from ... import settings
from ...builder import BuildResult, build
from ...config import BuildConfig
from ...errors import HubkernelsError
from . import Check

#: How long the kernel's own test suite may run.
TEST_TIMEOUT_S = 1800


def build_all(config: BuildConfig, builds: dict[str, BuildResult], *, skip: bool = False) -> list[Check]:
    """Build every backend of build.toml that this machine can compile; fill `builds`; one finding per backend."""
    found = []
    for backend in config.general.backends:
        if skip and backend != "cpu":
            found.append(
                Check("build", backend, "skip", "--skip build (only the CPU build, which the other checks load)")
            )
            continue
        reason = _cannot_build(config, backend)
        if reason:
            found.append(Check("build", backend, "skip", reason))
            continue
        try:
            result = build(config.root, backend=backend, quiet=True)
        except HubkernelsError as e:
            found.append(Check("build", backend, "fail", _first_line(str(e))))
            continue
        builds[backend] = result
        found.append(
            Check(
                "build",
                backend,
                "pass",
                f"{result.variant} ({result.id})",
                {"path": str(result.path), "variant": str(result.variant)},
            )
        )
    if "cpu" not in config.general.backends:
        found.append(
            Check(
                "build",
                "cpu",
                "skip",
                "build.toml lists no cpu backend: compile, vector and speed checks need a CPU build",
                {"unlisted": True},
            )
        )
    return found


def _cannot_build(config: BuildConfig, backend: str) -> str | None:
    """Why `backend` cannot be compiled here, or None when it can."""
    if backend == "cpu" or config.is_noarch(backend):
        return None
    if backend == "cuda":
        import torch

        if torch.version.cuda is None:
            nvcc = shutil.which("nvcc")
            return (
                f"torch {torch.__version__} here has no CUDA; to compile the CUDA variant without a GPU, "
                "install a CUDA torch wheel (pip install torch --index-url "
                "https://download.pytorch.org/whl/cu128) beside "
                + (f"the nvcc at {nvcc}" if nvcc else "the CUDA toolkit (nvcc)")
                + " and run verify again"
            )
        if shutil.which("nvcc") is None and settings.cuda_home() is None:
            return (
                "no CUDA toolkit (nvcc not on PATH, CUDA_HOME unset): install it (no GPU needed to compile) "
                "and run verify again"
            )
        return None
    return f"no {backend} toolchain check on this machine; build it where {backend} is available"


def check_abi(builds: dict[str, BuildResult]) -> list[Check]:
    """kernel-abi-check on every compiled module: Python ABI3 3.9 and manylinux_2_28."""
    try:
        import kernel_abi_check  # noqa: F401
    except ImportError:
        return [Check("abi", "all", "skip", "kernel-abi-check is not installed (pip install kernel-abi-check)")]
    from ...builder import check_abi as abi_problems

    found = []
    for backend, result in builds.items():
        modules = sorted(result.path.rglob("*.so"))
        if not modules:
            found.append(Check("abi", backend, "pass", "pure Python: nothing to check"))
        for so in modules:
            problems = abi_problems(so)
            if problems:
                found.append(
                    Check("abi", f"{backend} {so.name}", "fail", "; ".join(problems[:3]), {"problems": problems})
                )
            else:
                found.append(Check("abi", f"{backend} {so.name}", "pass", "abi3 (Python 3.9+), manylinux_2_28"))
    return found


def run_tests(config: BuildConfig, builds: dict[str, BuildResult]) -> list[Check]:
    """pytest on the kernel's tests/, with LOCAL_KERNELS pointing its repo id at this checkout."""
    tests = config.root / "tests"
    if not tests.is_dir():
        return [
            Check(
                "tests",
                "tests/",
                "fail",
                "no tests/ folder: a kernel ships with tests against a float64 reference (see `hubkernels init`)",
            )
        ]
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[3])  # the hubkernels running this check, first on the path
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
    repo_id = config.general.hub.repo_id if config.general.hub else None
    if repo_id:
        env["LOCAL_KERNELS"] = os.pathsep.join(filter(None, [f"{repo_id}={config.root}", env.get("LOCAL_KERNELS")]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    try:
        done = subprocess.run(cmd, cwd=config.root, env=env, capture_output=True, text=True, timeout=TEST_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [Check("tests", "tests/", "fail", f"pytest ran past {TEST_TIMEOUT_S} s")]
    summary = _summary(done.stdout)
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?|skipped)", summary)}
    if done.returncode == 0:
        return [Check("tests", "tests/", "pass", summary, counts)]
    if done.returncode == 5:
        return [Check("tests", "tests/", "fail", "pytest collected no tests in tests/", counts)]
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, flags=re.M)
    detail = summary + (f"; first: {failed[0]}" if failed else "")
    return [Check("tests", "tests/", "fail", detail or _first_line(done.stderr), {**counts, "failed": failed})]


def load(result: BuildResult) -> ModuleType | None:
    """The CPU build as a module, as users load it."""
    from ...fetch import get_local_kernel

    return get_local_kernel(result.path, backend="cpu")


def _summary(stdout: str) -> str:
    lines = [ln.strip("= ") for ln in stdout.strip().splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    return lines[-1] if lines else ""


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0][:300] if lines else "(no message)"
