"""`hubkernels build --matrix / --torch / --cuda`: variants for torch releases we are not running, each built in an
isolated toolchain from the package index, and run under that torch.

The toolchain tests download torch releases (a CUDA build of torch is several GB): they share the toolchain
cache (`HUBKERNELS_TOOLCHAINS`, default ~/.cache/hubkernels/toolchains) with the user, so they pay that once
per machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hubkernels.builder.matrix import DEFAULT_CUDA, DEFAULT_TORCH, format_table, plan, run_matrix
from hubkernels.builder.symbols import shipped_tables
from hubkernels.builder.toolchain import ToolchainError, ToolchainUnavailable, cuda_home, toolchain
from hubkernels.config import load_config

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
MINI = FIXTURES / "mini"


def _cli(*args: str, env: dict[str, str] | None = None, timeout: int = 3000) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "hubkernels", *args], capture_output=True, text=True, env=full_env, timeout=timeout
    )


# -- planning: which variants a matrix builds ------------------------------------------------------------------


def test_the_default_matrix_is_what_kernel_builder_publishes_up_to_the_newest_torch():
    jobs = plan(load_config(MINI))  # cpu only, no stable ABI: one exact variant per default torch
    assert [j.variant for j in jobs] == [f"torch{t.replace('.', '')}-cxx11-cpu-x86_64-linux" for t in DEFAULT_TORCH]
    assert DEFAULT_TORCH[:2] == ("2.12", "2.13") and DEFAULT_CUDA == ("12.6", "13.0", "13.2")
    newest = shipped_tables()[-1].minor  # the newest torch the load check knows, from its published wheel
    assert DEFAULT_TORCH[-1] == f"{newest[0]}.{newest[1]}"


def test_a_stable_abi_kernel_gets_one_variant_per_backend_and_cuda_version_built_with_the_newest_torch():
    config = load_config(FIXTURES / "build_toml" / "relu-torch-stable-abi", validate_files=False)
    jobs = {j.variant: j for j in plan(config, backends=["cpu", "cuda"])}
    stable = config.torch.stable_abi_for("cuda").replace(".", "")
    expected = [f"torch-stable-abi{stable}-{c}-x86_64-linux" for c in ("cpu", "cu126", "cu130", "cu132")]
    assert sorted(jobs) == sorted(expected)
    assert {j.torch for j in jobs.values()} == {DEFAULT_TORCH[-1]} and all(j.stable for j in jobs.values())


def test_torch_bounds_in_build_toml_filter_the_matrix(tmp_path: Path):
    kernel = shutil.copytree(MINI, tmp_path / "mini")
    toml = kernel / "build.toml"
    toml.write_text(toml.read_text().replace("[torch]\n", '[torch]\nminver = "2.13"\n'))
    assert [j.torch for j in plan(load_config(kernel), ["2.11", "2.12", "2.13", "2.14"])] == ["2.13", "2.14"]


def test_a_version_outside_the_bounds_or_malformed_is_a_one_line_usage_error(tmp_path: Path):
    result = _cli("build", str(MINI), "--torch", "2.x")
    assert result.returncode == 2 and "major.minor" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")
def test_a_stable_cuda_variant_takes_the_toolkits_cuda_version_not_the_building_torchs():
    from hubkernels.builder.machine import cuda_home as build_cuda_home
    from hubkernels.builder.machine import nvcc_version, variant_for
    from hubkernels.system import System

    nvcc = nvcc_version(build_cuda_home())
    torch_cu132 = System(torch_version=(2, 15), backend="cuda", backend_version=(13, 2), cpu="x86_64", os="linux")
    variant = variant_for(torch_cu132, "cuda", (2, 10))  # the newest torch of the index is a CUDA 13.2 build
    assert str(variant) == f"torch-stable-abi210-cu{nvcc[0]}{nvcc[1]}-x86_64-linux"


def test_cuda_12_from_the_index_is_reported_unavailable_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.setenv("HUBKERNELS_TOOLCHAINS", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    with pytest.raises(ToolchainUnavailable, match="only ptxas"):
        cuda_home("12.6")


def test_a_local_toolkit_that_cuda_home_names_is_used_for_its_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """CUDA 12 has no nvcc on the package index, but a toolkit of that version at CUDA_HOME builds it."""
    home = tmp_path / "cuda-12.4"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("HUBKERNELS_TOOLCHAINS", str(tmp_path / "toolchains"))
    monkeypatch.setenv("CUDA_HOME", str(home))
    assert cuda_home("12.4") == home
    assert not (tmp_path / "toolchains").exists()  # nothing downloaded


def test_the_table_lists_every_variant_with_its_status_time_and_size():
    from hubkernels.builder.matrix import Job, Outcome

    table = format_table(
        [
            Outcome(Job("torch212-cxx11-cpu-x86_64-linux", "cpu", "2.12", None), "built", 42.0, 2048),
            Outcome(
                Job("torch-stable-abi211-cu126-x86_64-linux", "cuda", "2.13", "12.6", True),
                "unavailable",
                0.1,
                detail="CUDA 12.6: no local toolkit",
            ),
        ]
    )
    assert re.search(r"torch212-cxx11-cpu-x86_64-linux +built", table) and "42.0 s" in table and "2.0 KB" in table
    assert "torch-stable-abi211-cu126-x86_64-linux: CUDA 12.6: no local toolkit" in table


def test_a_toolchain_whose_interpreter_is_gone_is_made_again_not_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A toolchain venv whose python links to a deleted venv (what Python 3.10 made) is redone, never handed out."""
    monkeypatch.setenv("HUBKERNELS_TOOLCHAINS", str(tmp_path))
    root = tmp_path / f"py{sys.version_info[0]}{sys.version_info[1]}-torch2.99"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").symlink_to(tmp_path / "deleted-venv" / "bin" / "python")
    (root / "toolchain.json").write_text('{"torch": "2.99.0", "cuda": null}')
    (root / ".complete").write_text("2026-01-01T00:00:00Z")
    said: list[str] = []
    with pytest.raises(ToolchainError, match="torch 2.99"):
        toolchain("2.99", say=said.append)  # made again, and the index has no torch 2.99
    assert any("broken" in line for line in said), said


def test_a_torch_a_pip_constraint_refuses_is_reported_unavailable_naming_the_constraint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    """A machine whose pip config caps torch (a CI image, a company mirror) gets the cap named, not pip's riddle."""
    monkeypatch.setenv("HUBKERNELS_TOOLCHAINS", str(tmp_path / "toolchains"))
    cap = tmp_path / "constraints.txt"
    cap.write_text("torch<=2.9.1\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(cap))
    with pytest.raises(ToolchainUnavailable, match=r"torch 2\.13: a pip constraint .*torch<=2\.9\.1.*PIP_CONSTRAINT"):
        toolchain("2.13", say=lambda _: None)
    assert not (tmp_path / "toolchains" / f"py{sys.version_info[0]}{sys.version_info[1]}-torch2.13").exists()


def test_a_toolchain_venv_links_the_real_interpreter_not_the_venv_it_was_made_from(tmp_path: Path):
    """Made from inside a venv that is later deleted, a toolchain must still run (Python 3.10 linked that venv)."""
    outer = tmp_path / "outer"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(outer)], check=True, timeout=120)
    probe = "from hubkernels.builder.toolchain import _base_python; print(_base_python())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path[1:]])}
    out = subprocess.run([str(outer / "bin" / "python"), "-c", probe], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    base = Path(out.stdout.strip().splitlines()[-1])
    assert outer not in base.parents and base.is_file()
    shutil.rmtree(outer)
    assert subprocess.run([str(base), "-c", "import venv"], timeout=60).returncode == 0


# -- toolchains: real torch releases from the package index ----------------------------------------------------

_RUN_MINI = textwrap.dedent("""
    import json, sys, torch, hubkernels
    k = hubkernels.get_local_kernel(sys.argv[1], backend="cpu")
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    print(json.dumps({"torch": torch.__version__.split("+")[0], "ok": bool(torch.equal(k.relu(x), torch.relu(x)))}))
""")


@pytest.mark.slow
def test_build_for_torch_212_in_an_isolated_toolchain_and_run_it_under_torch_212(tmp_path: Path):
    kernel = shutil.copytree(MINI, tmp_path / "mini")
    result = _cli("build", str(kernel), "--torch", "2.12", "--backend", "cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    variant = kernel / "build" / "torch212-cxx11-cpu-x86_64-linux"
    assert (variant / "metadata.json").is_file(), result.stdout + result.stderr
    assert re.search(r"torch212-cxx11-cpu-x86_64-linux +built", result.stdout)
    assert "[1/1]" in result.stderr  # progress on every step
    tc = toolchain("2.12")
    run = subprocess.run(
        [str(tc.python), "-c", _RUN_MINI, str(kernel)], capture_output=True, text=True, env=tc.env(), timeout=600
    )
    assert run.returncode == 0, run.stderr
    info = json.loads(run.stdout.strip().splitlines()[-1])
    assert info["ok"] and info["torch"].startswith("2.12")

    # nothing changed: the re-run answers from its stamps, without starting the toolchain
    again = _cli("build", str(kernel), "--torch", "2.12", "--backend", "cpu")
    assert again.returncode == 0 and re.search(r"torch212-cxx11-cpu-x86_64-linux +up to date", again.stdout)
    start = time.monotonic()
    outcomes = run_matrix(kernel, plan(load_config(kernel), ["2.12"], backends=["cpu"]), say=lambda _: None)
    assert [o.status for o in outcomes] == ["up to date"] and time.monotonic() - start < 10
    # the user's environment was not touched: its torch is still the one it was
    import torch

    assert torch.__version__.startswith("2.13")


_RUN_LTX = textwrap.dedent("""
    import sys, torch, hubkernels
    ltx = hubkernels.get_local_kernel(sys.argv[1], backend="cpu")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 48, 128, generator=g)
    scale, shift, gate = (torch.randn(2, 1, 128, generator=g) for _ in range(3))
    y = torch.randn(2, 48, 128, generator=g)
    out = {"rms_norm": ltx.rms_norm(x, None, 1e-6),
           "rms_norm_modulate": ltx.rms_norm_modulate(x, scale, shift, None, 1e-6),
           "gelu_tanh": ltx.gelu_tanh(x), "gated_residual": ltx.gated_residual(x, y, gate)}
    torch.save({k: v.contiguous() for k, v in out.items()}, sys.argv[2])
    print(torch.__version__)
""")


@pytest.mark.slow
@pytest.mark.parametrize("torch_version", ["2.11", "2.14"])
def test_the_stable_abi_ltx_variant_built_once_runs_identically_under_older_and_newer_torch(
    torch_version: str, ltx_build, tmp_path: Path
):
    stable = sorted((ROOT / "build").glob("torch-stable-abi*-cpu-*"))
    if not stable:
        pytest.skip("ltx-kernels has no stable-ABI CPU variant in build/ ([torch] stable-abi is not set)")
    variant = stable[-1]
    here, there = tmp_path / "here.pt", tmp_path / "there.pt"
    subprocess.run(
        [sys.executable, "-c", _RUN_LTX, str(variant), str(here)],
        check=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    tc = toolchain(torch_version)
    run = subprocess.run(
        [str(tc.python), "-c", _RUN_LTX, str(variant), str(there)],
        capture_output=True,
        text=True,
        env=tc.env(),
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1].startswith(torch_version)
    import torch

    mine, theirs = torch.load(here), torch.load(there)
    assert mine.keys() == theirs.keys()
    for name in mine:
        assert torch.equal(mine[name], theirs[name]), name
