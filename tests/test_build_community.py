"""Kernels shaped like kernels-community's build as kernel-builder builds them.

The fixtures under fixtures/community/ are our own, in the shape of kernels-community's CPU kernels: an
edition-4 build.toml (no `edition` key) and a generic `[kernel.*]` beside an `_avx512` one that asks for
AVX-512 in its cxx-flags, chosen at run time. Flags go per source, so only the `_avx512` sources hold
AVX-512 code and the variant imports and runs on a CPU without it (checked under qemu's Haswell model).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hubkernels
from hubkernels.builder import BuildResult, build
from hubkernels.builder.checks import cutlass_headers
from hubkernels.builder.compile import cuda_kernel_archs, toolkit_archs
from hubkernels.builder.machine import cuda_home, nvcc_version
from hubkernels.config import load_config
from hubkernels.errors import BuildError

COMMUNITY = Path(__file__).parent / "fixtures" / "community"
REPO = Path(__file__).resolve().parents[1]
_built: dict[str, BuildResult] = {}
#: An x86-64 instruction that uses AVX-512 state: a zmm register or an opmask register.
_AVX512 = re.compile(r"%zmm\d|%k[1-7]\b")
#: Wider than the x86-64 baseline (SSE2): a ymm or zmm register.
_BEYOND_BASELINE = re.compile(r"%[yz]mm\d")


def built(name: str) -> BuildResult:
    """The CPU build of one fixture, compiled once per session (incremental across sessions)."""
    if name not in _built:
        _built[name] = build(COMMUNITY / name, backend="cpu", quiet=True)
    return _built[name]


def _functions_using(so: Path, pattern: re.Pattern[str]) -> set[str]:
    """The (mangled) functions of `so` whose disassembly matches `pattern`."""
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(so)], capture_output=True, text=True, check=True
    ).stdout
    found: set[str] = set()
    current = ""
    for line in out.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if head:
            current = head.group(1)
        elif current and pattern.search(line):
            found.add(current)
    return found


def _defined_functions(objects: list[Path]) -> set[str]:
    out = subprocess.run(
        ["nm", "--defined-only", *map(str, objects)], capture_output=True, text=True, check=True
    ).stdout
    return {parts[2] for parts in (line.split() for line in out.splitlines()) if len(parts) == 3 and parts[1] in "TtWw"}


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")
def test_avx512_code_is_only_in_the_avx512_kernel() -> None:
    result = built("axpy-dispatch")
    so = result.path / f"{result.id}.abi3.so"
    objects = COMMUNITY / "axpy-dispatch" / "_build" / result.path.name / "obj"
    avx512_functions = _defined_functions(sorted((objects / "kernel-axpy_cpu_avx512").rglob("*.o")))
    baseline_functions = _defined_functions(
        sorted(o for group in ("torch-binding", "kernel-axpy_cpu") for o in (objects / group).rglob("*.o"))
    )
    assert any("axpy_avx512" in f for f in avx512_functions)
    wide = _functions_using(so, _BEYOND_BASELINE)
    assert wide and any("axpy_avx512" in f for f in _functions_using(so, _AVX512))
    # the binding, the generic kernel and every header function they pull in stay at the x86-64 baseline
    assert wide <= avx512_functions, sorted(wide - avx512_functions)
    assert not wide & baseline_functions  # no inline function whose AVX-512 copy the linker might keep


def test_dispatching_op_matches_torch_on_this_cpu() -> None:
    built("axpy-dispatch")
    mod = hubkernels.get_local_kernel(COMMUNITY / "axpy-dispatch")
    for n in (0, 1, 15, 16, 17, 1000):  # the full 16-float steps and every masked tail
        x, y = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(mod.axpy(x, y, -1.5), -1.5 * x + y, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_a_rebuild_recompiles_only_the_changed_kernels_sources(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    root = _copy("axpy-dispatch", tmp_path)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "kernel"]):
        subprocess.run([*git, *args], check=True)
    source = root / "axpy_cpu" / "axpy_avx512.cpp"
    source.write_text(source.read_text() + "// edited\n")  # dirty before the first build: one ops id for both
    build(root, backend="cpu", quiet=True)
    source.write_text(source.read_text() + "// edited again\n")
    capfd.readouterr()
    build(root, backend="cpu", quiet=True, verbose=True)
    log = capfd.readouterr()
    compiled = re.findall(r"-c (\S+\.cpp)", log.out + log.err)
    assert [Path(c).name for c in compiled] == ["axpy_avx512.cpp"]  # one group's ninja file, one object


_ON_HASWELL = """
import torch, hubkernels
assert torch.backends.cpu.get_cpu_capability() == "AVX2", torch.backends.cpu.get_cpu_capability()
mod = hubkernels.get_local_kernel({root!r})
x, y = torch.randn(1003), torch.randn(1003)
torch.testing.assert_close(mod.axpy(x, y, 2.5), 2.5 * x + y)
print("ran on", torch.backends.cpu.get_cpu_capability())
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("qemu-x86_64") is None, reason="no qemu-user here (apt-get install qemu-user)")
def test_imports_and_runs_on_a_cpu_without_avx512() -> None:
    built("axpy-dispatch")
    code = _ON_HASWELL.format(root=str(COMMUNITY / "axpy-dispatch"))
    proc = subprocess.run(
        ["qemu-x86_64", "-cpu", "Haswell", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, f"exit {proc.returncode} under qemu -cpu Haswell: {proc.stderr[-3000:]}"
    assert "ran on AVX2" in proc.stdout


# --------------------------------------------------------------------------------------------------
# What kernel-builder refuses, refused here in one line before a compiler runs


def _copy(name: str, tmp_path: Path) -> Path:
    dest = tmp_path / name
    shutil.copytree(COMMUNITY / name, dest, ignore=shutil.ignore_patterns("build", "_build"))
    return dest


def test_backend_without_kernels_is_refused_not_shipped_as_noarch(tmp_path: Path) -> None:
    root = _copy("relu-bad-capability", tmp_path)
    with pytest.raises(BuildError, match=r"backend 'cpu' has no \[kernel\.\*\] with backend = 'cpu'") as info:
        build(root, backend="cpu", quiet=True)
    assert "\n" not in str(info.value) and "[torch-noarch]" in str(info.value)
    assert not (root / "build").exists()
    assert not load_config(root).is_noarch("cpu")


@pytest.mark.skipif(cuda_home() is None, reason="no CUDA toolkit (nvcc) here")
def test_capability_outside_the_toolkit_fails_with_kernel_builders_message(tmp_path: Path) -> None:
    root = _copy("relu-bad-capability", tmp_path)
    with pytest.raises(BuildError) as info:
        build(root, backend="cuda", quiet=True)
    assert re.match(
        r"CUDA kernel: relu_cuda, empty set of capabilities after intersection \(kernel: 99999\.0, "
        r"supported: 7\.[05];.*\)",
        str(info.value),
    ), str(info.value)
    assert not list((root / "build").glob("torch*"))  # no variant


def test_capabilities_are_intersected_as_kernel_builder_does() -> None:
    # kernel-builder's relu-archs-subset: 5.0 is gone from CUDA 13, and 9.0 builds for no Blackwell target
    assert cuda_kernel_archs("relu", ("5.0", "7.5", "8.0", "9.0"), (13, 0)) == ["7.5", "8.0", "9.0"]
    assert cuda_kernel_archs("k", ("8.0", "9.0a", "12.0+PTX"), (12, 8)) == ["8.0", "9.0a", "12.0+PTX"]
    assert cuda_kernel_archs("k", ("7.0",), (12, 6)) == ["7.0"]
    assert cuda_kernel_archs("k", (), (13, 0))[-1] == "12.1+PTX"  # nothing asked: every default
    # a capability the toolkit does not list is no target
    toolkit = frozenset({"compute_80", "compute_90"})
    assert cuda_kernel_archs("k", ("7.5", "8.0"), (13, 0), toolkit) == ["8.0"]
    with pytest.raises(BuildError, match=r"supported: 8\.0;9\.0\)"):
        cuda_kernel_archs("k", ("7.5",), (13, 0), toolkit)


@pytest.mark.skipif(cuda_home() is None, reason="no CUDA toolkit (nvcc) here")
def test_toolkit_archs_come_from_nvcc() -> None:
    home = cuda_home()
    archs = toolkit_archs(str(home))
    assert archs is not None and "compute_80" in archs
    if nvcc_version(home) >= (13, 0):  # type: ignore[arg-type]
        assert "compute_50" not in archs


def test_registration_without_the_namespace_prefix_is_refused(tmp_path: Path) -> None:
    root = _copy("silu-bad-registration", tmp_path)
    with pytest.raises(BuildError) as info:
        build(root, quiet=True)
    message = str(info.value)
    assert "do not use `add_op_namespace_prefix`" in message and "\n" not in message
    assert "silu_bad_registration/op.py:8 function silu_and_mul" in message
    assert "op.py:14" not in message  # register_fake passes add_op_namespace_prefix(...): allowed
    assert not (root / "build").exists()


def test_tvm_ffi_kernel_is_refused_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "relu-tvm-ffi"
    shutil.copytree(Path(__file__).parent / "fixtures" / "build_toml" / "relu-tvm-ffi", root)
    with pytest.raises(BuildError, match=r"\[tvm-ffi\] kernels are not built by hubkernels yet") as info:
        build(root, backend="cpu", quiet=True)
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_cutlass_dependency_brings_the_named_cutlass_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUBKERNELS_TOOLCHAINS", str(tmp_path))
    dirs = cutlass_headers("3.6")
    assert (dirs[0] / "cutlass" / "cutlass.h").is_file() and (dirs[0] / "cute" / "tensor.hpp").is_file()
    version = (dirs[0] / "cutlass" / "version.h").read_text()
    assert "#define CUTLASS_MAJOR 3" in version and "#define CUTLASS_MINOR 6" in version
    with pytest.raises(BuildError, match=r"needs the CUTLASS 2\.10 headers, but `pip download nvidia-cutlass==2\.10"):
        cutlass_headers("2.10")


@pytest.mark.slow
@pytest.mark.skipif(cuda_home() is None, reason="no CUDA toolkit (nvcc) here")
def test_cuda_kernel_flags_and_capabilities_reach_its_cu_sources_only(tmp_path: Path) -> None:
    # a stable-ABI CUDA build compiles with a CPU torch and nvcc; each source fails to compile unless the
    # kernel's cuda-flags reached it (relu.cu) or did not (the binding)
    root = tmp_path / "relu-torch-stable-abi"
    shutil.copytree(
        Path(__file__).parent / "fixtures" / "upstream" / "relu-torch-stable-abi",
        root,
        ignore=shutil.ignore_patterns("build", "_build"),
    )
    toml = (root / "build.toml").read_text()
    cuda_table = '[kernel.relu]\nbackend = "cuda"\ndepends = ["torch"]\nsrc = ["relu_cuda/relu.cu"]\n'
    assert cuda_table in toml
    (root / "build.toml").write_text(
        toml.replace(
            cuda_table, cuda_table + 'cuda-capabilities = ["8.0", "9.0"]\ncuda-flags = ["-DKERNEL_ONLY_FLAG"]\n'
        )
    )
    for rel, guard in (("relu_cuda/relu.cu", "#ifndef"), ("torch-ext/torch_binding.cpp", "#ifdef")):
        path = root / rel
        path.write_text(
            f"{guard} KERNEL_ONLY_FLAG\n#error the kernel's cuda-flags went astray\n#endif\n" + path.read_text()
        )
    result = build(root, backend="cuda", quiet=True)
    meta = json.loads((result.path / "metadata.json").read_text())
    assert meta["backend"] == {"type": "cuda", "archs": ["8.0", "9.0"]}
    assert result.path.name.startswith("torch-stable-abi211-cu")
