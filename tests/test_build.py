"""`hubkernels build` turns build.toml + sources into a Hub-layout variant that loads, verifies and interoperates."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import hubkernels
from hubkernels.builder import build, unique_id
from hubkernels.digest import hash_variant, verify_variant, violations
from hubkernels.errors import BuildError, DigestError
from hubkernels.fetch.importer import import_variant
from hubkernels.metadata import Metadata
from hubkernels.system import System

MINI = Path(__file__).parent / "fixtures" / "mini"


@pytest.fixture()
def mini_copy(tmp_path: Path) -> Path:
    """The mini-relu kernel outside any git repository: every build gets a fresh random id."""
    dest = tmp_path / "mini"
    shutil.copytree(MINI, dest, ignore=shutil.ignore_patterns("build", "_build"))
    return dest


@pytest.fixture(scope="module")
def mini_build():
    return build(MINI, quiet=True)


def test_variant_layout_and_metadata(mini_build) -> None:
    out = mini_build.path
    major, minor = System.current().torch_version
    assert out.name == str(System.current().build_variant("cpu")) == f"torch{major}{minor}-cxx11-cpu-x86_64-linux"
    assert re.fullmatch(r"_mini_relu_cpu_[0-9a-f]{7}(_dirty)?", mini_build.id)
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(["__init__.py", "util.py", "_ops.py", "metadata.json", f"{mini_build.id}.abi3.so"])
    meta = json.loads((out / "metadata.json").read_text())
    assert list(meta) == [
        "name",
        "id",
        "version",
        "license",
        "python-depends",
        "kernel-depends",
        "backend",
        "digest",
        "provenance",
    ]
    assert meta["name"] == "mini-relu" and meta["id"] == mini_build.id and meta["version"] == 1
    assert meta["backend"] == {"type": "cpu"} and meta["license"] == "Apache-2.0"
    assert re.fullmatch(r"[0-9a-f]{40}", meta["provenance"]["kernel"]["commit"])
    assert meta["provenance"]["kernel-builder"]["name"] == "hubkernels"
    assert "metadata.json" not in meta["digest"]["files"]


def test_digest_matches_and_one_changed_byte_fails(mini_build, tmp_path: Path) -> None:
    meta = Metadata.read(mini_build.path)
    assert meta.digest == {"algorithm": "sha256", "files": hash_variant(mini_build.path)}
    copy = tmp_path / "variant"
    shutil.copytree(mini_build.path, copy)
    verify_variant(copy, meta.digest)
    so = copy / f"{mini_build.id}.abi3.so"
    data = bytearray(so.read_bytes())
    data[len(data) // 2] ^= 0x01
    so.write_bytes(bytes(data))
    assert violations(copy, meta.digest) == [f"{so.name} has been modified (hash mismatch)"]
    with pytest.raises(DigestError, match="hash mismatch"):
        verify_variant(copy, meta.digest)
    (copy / "extra.py").write_text("x = 1\n")
    assert "unexpected file extra.py" in violations(copy, meta.digest)


def test_loads_and_runs_with_relative_imports(mini_build) -> None:
    mod = hubkernels.get_local_kernel(MINI, verify=True)
    assert mod.__name__ == mini_build.id
    x = torch.randn(1000)
    assert torch.equal(mod.relu(x), x.clamp_min(0))
    assert mod.double(21) == 42  # from .util import double
    assert hasattr(torch.ops, mini_build.id)


def test_compiled_op_traces_with_fullgraph(mini_build) -> None:
    mod = hubkernels.get_local_kernel(MINI)
    fn = torch.compile(lambda t: mod.relu(t) * 2, fullgraph=True)
    x = torch.randn(64)
    assert torch.equal(fn(x), x.clamp_min(0) * 2)


def test_hf_kernels_loads_the_same_build(mini_build) -> None:
    kernels = pytest.importorskip("kernels")
    ours = hubkernels.get_local_kernel(MINI)
    theirs = kernels.get_local_kernel(MINI)
    x = torch.randn(4096)
    assert torch.equal(theirs.relu(x), ours.relu(x))


def test_rebuild_with_nothing_changed_is_fast(mini_build) -> None:
    t0 = time.perf_counter()
    again = build(MINI, quiet=True)
    assert again.up_to_date and again.path == mini_build.path
    assert time.perf_counter() - t0 < 5


def test_two_builds_of_one_kernel_coexist(mini_copy: Path, tmp_path: Path) -> None:
    a = build(mini_copy, out_dir=tmp_path / "a", quiet=True)
    shutil.rmtree(mini_copy / "_build")
    b = build(mini_copy, out_dir=tmp_path / "b", quiet=True)
    assert a.id != b.id  # outside git: a random id per build
    ma, mb = import_variant(a.path), import_variant(b.path)
    assert ma is not mb and ma.__name__ == a.id and mb.__name__ == b.id
    x = torch.randn(100)
    assert torch.equal(ma.relu(x), mb.relu(x))


def test_unique_id_outside_git_is_random(mini_copy: Path) -> None:
    ids = {unique_id(mini_copy) for _ in range(3)}
    assert len(ids) == 3 and all(re.fullmatch(r"[a-z2-7]{13}", i) for i in ids)


def test_compiler_errors_are_shown(mini_copy: Path) -> None:
    (mini_copy / "mini_cpu" / "relu.cpp").write_text("this is not C++;\n")
    with pytest.raises(BuildError) as e:
        build(mini_copy, quiet=True)
    assert "relu.cpp" in str(e.value) and "error" in str(e.value)


def test_cli_build_and_variants(mini_build) -> None:
    out = subprocess.run([sys.executable, "-m", "hubkernels", "variants", str(MINI)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"chosen   {mini_build.path.name}" in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "hubkernels", "build", "--backend", "cuda", str(MINI)], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "cuda" in bad.stderr


def test_built_module_passes_abi_checks(mini_build) -> None:
    kac = pytest.importorskip("kernel_abi_check")
    obj = kac.ObjectFile(str(mini_build.path / f"{mini_build.id}.abi3.so"))
    assert obj.check_python_abi("3.9") == []
    assert obj.check_manylinux("manylinux_2_28") == []


def test_variant_wheel_installs_and_runs(mini_build, tmp_path: Path) -> None:
    from hubkernels.builder.wheel import build_wheel, plain_name

    labelled = build_wheel(mini_build.path, tmp_path / "dist")
    major, minor = System.current().torch_version
    assert labelled.name == f"mini_relu-1-cp310-abi3-manylinux_2_28_x86_64-torch{major}{minor}_cpu.whl"
    whl = labelled.rename(labelled.with_name(plain_name(labelled.name)))  # what an installer without variants takes
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(whl)], check=True
    )
    code = (
        "import torch, mini_relu; x = torch.randn(9); "
        "assert torch.equal(mini_relu.relu(x), x.clamp_min(0)); print('ok')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(site)},
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_code_written_for_the_old_module_paths_still_runs_and_is_told_the_new_ones() -> None:
    code = (
        "import warnings; warnings.simplefilter('always')\n"
        "from hubkernels.build import build\n"
        "from hubkernels.build.symbols import shipped_tables\n"
        "from hubkernels.build.toolchain import cuda_home\n"
        "from hubkernels.wheel import build_wheel\n"
        "import hubkernels.builder, hubkernels.builder.symbols, hubkernels.builder.machine, hubkernels.builder.wheel\n"
        "assert build is hubkernels.builder.build and shipped_tables is hubkernels.builder.symbols.shipped_tables\n"
        "assert cuda_home is hubkernels.builder.machine.cuda_home\n"
        "assert build_wheel is hubkernels.builder.wheel.build_wheel\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for old, new in [
        ("hubkernels.build", "hubkernels.builder"),
        ("hubkernels.build.symbols", "hubkernels.builder.symbols"),
        ("hubkernels.build.toolchain", "hubkernels.builder.machine"),
        ("hubkernels.wheel", "hubkernels.builder.wheel"),
    ]:
        assert f"DeprecationWarning: {old} moved to {new}: import that instead" in out.stderr


def test_progress_goes_to_say_or_the_log_and_quiet_silences_it(mini_build, caplog) -> None:
    lines: list[str] = []
    assert build(MINI, say=lines.append).up_to_date
    assert lines == [f"{mini_build.variant}: up to date ({mini_build.path})"]
    with caplog.at_level("INFO", logger="hubkernels.builder"):
        build(MINI)
    assert [r.getMessage() for r in caplog.records if r.name == "hubkernels.builder"] == lines
    caplog.clear()
    with caplog.at_level("INFO", logger="hubkernels.builder"):
        build(MINI, quiet=True, say=lines.append)
    assert not caplog.records and len(lines) == 1


def test_the_loader_reaching_for_slices_does_not_import_the_compiler() -> None:
    code = (
        "import sys, hubkernels.builder.slice\n"
        "heavy = [m for m in ('hubkernels.builder.kernel', 'hubkernels.builder.compile', 'hubkernels.config') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
