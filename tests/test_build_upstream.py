"""Kernels written the way kernel-builder's examples are build unchanged with `hubkernels build`.

The fixtures under fixtures/upstream/ mirror the shape of kernel-builder's example kernels (relu, extra-data,
cpp20-symbols, relu-torch-stable-abi, silu-and-mul): their build.toml tables, bindings that include
`<torch/torch.h>` (or torch's stable headers) and the generated `registration.h`, the same source layout.
Each op is checked against PyTorch, loaded by hubkernels and by HF `kernels`. CUDA sources are compiled
where a CUDA build of torch and nvcc are present (no GPU needed); otherwise those tests skip and say why.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import hubkernels
from hubkernels.builder import BuildResult, build, check_torch_stable_abi
from hubkernels.metadata import Metadata
from hubkernels.platform import System

UPSTREAM = Path(__file__).parent / "fixtures" / "upstream"
REPO = Path(__file__).resolve().parents[1]
_built: dict[str, BuildResult] = {}


def built(name: str) -> BuildResult:
    """The CPU build of one fixture, compiled once per test session (incremental across sessions)."""
    if name not in _built:
        _built[name] = build(UPSTREAM / name, backend="cpu", quiet=True)
    return _built[name]


def _needed_libraries(so: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    return [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def _module(result: BuildResult) -> Path:
    return result.path / f"{result.id}.abi3.so"


def test_relu_builds_from_torch_h_sources_and_matches_torch() -> None:
    result = built("relu")
    major, minor = System.current().torch_version
    assert result.path.name == f"torch{major}{minor}-cxx11-cpu-x86_64-linux"
    assert {p.name for p in result.path.iterdir()} >= {
        "__init__.py",
        "layers",
        "_ops.py",
        "metadata.json",
        f"{result.id}.abi3.so",
    }
    assert not any("torch_python" in lib for lib in _needed_libraries(_module(result)))
    mod = hubkernels.get_local_kernel(UPSTREAM / "relu")
    x = torch.randn(257, 129)
    x[0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    torch.testing.assert_close(mod.relu(x), torch.relu(x), rtol=0, atol=0, equal_nan=True)
    out = torch.empty_like(x)
    assert mod.relu(x, out=out) is out
    torch.testing.assert_close(mod.layers.ReLU()(x.t()), torch.relu(x.t()), rtol=0, atol=0, equal_nan=True)


def test_relu_loads_in_hf_kernels_too() -> None:
    kernels = pytest.importorskip("kernels")
    built("relu")
    theirs = kernels.get_local_kernel(UPSTREAM / "relu")
    x = torch.randn(4096)
    assert torch.equal(theirs.relu(x), torch.relu(x))


def test_extra_data_ships_its_json_and_reads_it() -> None:
    result = built("extra-data")
    assert json.loads((result.path / "config.json").read_text())["threshold"] == 0.25
    assert "config.json" in Metadata.read(result.path).digest["files"]
    mod = hubkernels.get_local_kernel(UPSTREAM / "extra-data", verify=True)
    x = torch.randn(1000)
    assert mod.CONFIG["threshold"] == 0.25
    assert torch.equal(mod.threshold_relu(x), torch.where(x > 0.25, x, torch.zeros_like(x)))


def test_cpp20_symbols_round_trip_every_double() -> None:
    built("cpp20-symbols")
    mod = hubkernels.get_local_kernel(UPSTREAM / "cpp20-symbols")
    x = torch.cat(
        [
            torch.randn(500, dtype=torch.float64) * 10.0 ** torch.randint(-300, 300, (500,)),
            torch.tensor([0.0, -0.0, 1e-320, 1.7976931348623157e308, 0.1, 1 / 3], dtype=torch.float64),
        ]
    )
    assert torch.equal(mod.chars_roundtrip(x), x)


def test_stable_abi_kernel_builds_one_variant_for_every_later_torch() -> None:
    result = built("relu-torch-stable-abi")
    assert result.path.name == "torch-stable-abi211-cpu-x86_64-linux"
    so = _module(result)
    assert check_torch_stable_abi(so, (2, 11)) == []
    assert not any("torch_python" in lib for lib in _needed_libraries(so))
    x = torch.randn(64, 33)
    ours = hubkernels.get_local_kernel(UPSTREAM / "relu-torch-stable-abi", verify=True)
    assert torch.equal(ours.relu(x), torch.relu(x))
    kernels = pytest.importorskip("kernels")
    theirs = kernels.get_local_kernel(UPSTREAM / "relu-torch-stable-abi")
    assert torch.equal(theirs.relu(x), torch.relu(x))


def test_stable_abi_check_refuses_full_abi_and_too_new_shims() -> None:
    full = check_torch_stable_abi(_module(built("relu")), (2, 11))
    assert any("c10::" in p and "not part of the stable ABI" in p for p in full), full
    too_old = check_torch_stable_abi(_module(built("relu-torch-stable-abi")), (2, 9))
    assert too_old and all("needs torch 2.1" in p for p in too_old), too_old


def test_noarch_kernel_builds_every_backend_in_one_run() -> None:
    result = build(UPSTREAM / "silu-and-mul", quiet=True)
    variants = {r.path.name: r for r in (result, *result.also)}
    assert sorted(variants) == ["torch-cpu", "torch-cuda", "torch-metal", "torch-rocm", "torch-xpu"]
    for name, r in variants.items():
        meta = Metadata.read(r.path)
        assert meta.backend["type"] == name.removeprefix("torch-") and meta.id == r.id
        assert not list(r.path.glob("*.so"))
    x = torch.randn(4, 16, requires_grad=True)
    ref = F.silu(x[..., :8]) * x[..., 8:]
    mod = hubkernels.get_local_kernel(UPSTREAM / "silu-and-mul")
    y = mod.silu_and_mul(x)
    torch.testing.assert_close(y, ref)
    (g,) = torch.autograd.grad(y.sum(), x)
    (g_ref,) = torch.autograd.grad(ref.sum(), x)
    torch.testing.assert_close(g, g_ref)
    kernels = pytest.importorskip("kernels")
    torch.testing.assert_close(
        kernels.get_local_kernel(UPSTREAM / "silu-and-mul").silu_and_mul(x.detach()), ref.detach()
    )


def _cuda_python() -> str | None:
    """An interpreter whose torch is a CUDA build, with nvcc on PATH: this one, or HUBKERNELS_TEST_CUDA_PYTHON."""
    from hubkernels.builder.machine import cuda_home

    if torch.version.cuda and cuda_home() is not None:
        return sys.executable
    return os.environ.get("HUBKERNELS_TEST_CUDA_PYTHON")


@pytest.mark.parametrize(
    "name,variant",
    [
        ("relu", r"torch\d+-cxx11-cu\d+-x86_64-linux"),
        ("extra-data", r"torch\d+-cxx11-cu\d+-x86_64-linux"),
        ("relu-torch-stable-abi", r"torch-stable-abi211-cu\d+-x86_64-linux"),
    ],
)
def test_cuda_sources_compile_without_a_gpu(name: str, variant: str) -> None:
    python = _cuda_python()
    if python is None:
        pytest.skip(
            "needs a CUDA build of torch and nvcc: the installed torch is CPU-only; set "
            "HUBKERNELS_TEST_CUDA_PYTHON to a python with a CUDA torch (e.g. a venv with pip install torch)"
        )
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc on PATH (the CUDA toolkit) to compile CUDA sources")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [python, "-m", "hubkernels", "build", str(UPSTREAM / name), "--backend", "cuda"],
        capture_output=True,
        text=True,
        env=env,
        timeout=3000,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    path = Path(out.stdout.strip().splitlines()[-1])
    assert re.fullmatch(variant, path.name), path.name
    meta = Metadata.read(path)
    assert meta.backend["type"] == "cuda" and meta.backend["archs"]
    so = path / f"{meta.id}.abi3.so"
    assert so.is_file() and not any("torch_python" in lib for lib in _needed_libraries(so))


def test_stable_abi_wheel_requires_torch_at_least_its_target(tmp_path: Path) -> None:
    import zipfile

    from hubkernels.builder.wheel import build_wheel

    whl = build_wheel(built("relu-torch-stable-abi").path, tmp_path)
    assert whl.name == "relu_torch_stable_abi-1-cp310-abi3-manylinux_2_28_x86_64-null.whl"
    with zipfile.ZipFile(whl) as zf:
        meta = zf.read("relu_torch_stable_abi-1.dist-info/METADATA").decode()
    assert "Requires-Dist: torch>=2.11" in meta.splitlines()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["relu", "extra-data", "relu-torch-stable-abi"])
def test_cuda_ops_match_pytorch_on_the_gpu(name: str) -> None:
    result = build(UPSTREAM / name, backend="cuda", quiet=True)
    mod = hubkernels.get_local_kernel(UPSTREAM / name, backend="cuda")
    x = torch.randn(333, 517, device="cuda")
    if name == "extra-data":
        expected, got = torch.where(x > 0.25, x, torch.zeros_like(x)), mod.threshold_relu(x)
    else:
        expected, got = torch.relu(x), mod.relu(x)
    assert result.variant.backend == "cuda" and torch.equal(got, expected)
