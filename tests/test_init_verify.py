"""`hubkernels init` makes a kernel that `hubkernels verify` passes as it stands, and `verify` catches what made
kernels slow or uncompilable before: an fp16 loop left scalar and a graph break, each named by op and reason.

The demo kernel is created and verified once per module (one CPU build); the planted defects share one
second build.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import VERIFY_CI_TOLERANCE

from hubkernels.author.verify import vector
from hubkernels.cli import main
from hubkernels.config import load_config

ROOT = Path(__file__).resolve().parent.parent
GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def hubkernels_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m hubkernels ARGS` from this checkout, as a user runs it."""
    env = {**os.environ, **GIT_ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "hubkernels", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1500
    )


def findings(report: dict, check: str) -> list[dict]:
    return [c for c in report["checks"] if c["check"] == check]


# ---- init -----------------------------------------------------------------------------------------


def test_init_refuses_to_overwrite_and_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    taken = tmp_path / "fast-norms"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    assert main(["init", "fast-norms"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "already exists" in err
    assert [p.name for p in taken.iterdir()] == ["notes.txt"] and (taken / "notes.txt").read_text() == "mine"
    assert not list(tmp_path.glob(".fast-norms*")), "no staging folder is left behind"


@pytest.mark.parametrize(
    "argv", [["Fast_Norms"], ["fast-norms", "--op", "Bad-Op"], ["fast-norms", "--backends", "rocm"]]
)
def test_init_rejects_names_kernel_builder_would_not_take(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    assert main(["init", *argv]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_init_cpu_only_with_a_named_op_follows_kernel_builder_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    assert main(["init", "mlp-ops", "--backends", "cpu", "--op", "silu_and_mul", "--dest", str(tmp_path / "k")]) == 0
    root = tmp_path / "k"
    config = load_config(root)
    assert (config.name, config.python_name, config.general.edition) == ("mlp-ops", "mlp_ops", 5)
    assert config.general.backends == ("cpu",)
    assert [k.name for k in config.kernels_for("cpu")] == ["mlp_ops_cpu"]
    assert config.general.hub.repo_id == "my-org/mlp-ops"
    assert (root / "kernel_src/mlp_ops_cpu/silu_and_mul.cpp").is_file()
    assert not (root / "kernel_src/mlp_ops_cuda").exists()
    assert (root / "benchmarks/benchmark_silu_and_mul.py").is_file()
    package = root / "kernel_src/torch-ext/mlp_ops"
    text = "\n".join(p.read_text() for p in package.glob("*.py"))
    assert "def silu_and_mul(" in text and "from ._ops import ops" in text
    assert "import mlp_ops" not in text and "torch.ops." not in text, "imports inside the package are relative"
    assert "F.rms_norm" in (package / "layers.py").read_text(), "torch's own functions keep their names"
    assert not (package / "_ops.py").exists(), "_ops.py is generated per build"
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True)
    log = subprocess.run(["git", "log", "--oneline"], cwd=root, capture_output=True, text=True)
    assert status.stdout == "" and len(log.stdout.splitlines()) == 1, "init commits everything once"


# ---- init, then verify, as a user runs them -------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, dict]:
    """`hubkernels init demo-kernel && hubkernels verify demo-kernel --json` in a fresh folder."""
    work = tmp_path_factory.mktemp("init-verify")
    made = hubkernels_cli("init", "demo-kernel", cwd=work)
    assert made.returncode == 0, made.stderr
    checked = hubkernels_cli("verify", "demo-kernel", "--json", "--tolerance", VERIFY_CI_TOLERANCE, cwd=work)
    assert checked.stdout.strip(), checked.stderr[-3000:]
    return work / "demo-kernel", {**json.loads(checked.stdout), "returncode": checked.returncode}


def test_a_fresh_kernel_passes_verify(demo):
    _, report = demo
    failed = [f"{c['check']} {c['subject']}: {c['detail']}" for c in report["checks"] if c["status"] == "fail"]
    assert report["returncode"] == 0 and report["ok"], failed
    assert [c["status"] for c in findings(report, "build") if c["subject"] == "cpu"] == ["pass"]
    assert findings(report, "tests")[0]["status"] == "pass" and findings(report, "tests")[0]["data"]["passed"] >= 40
    assert [(c["subject"], c["status"]) for c in findings(report, "compile")] == [("rms_norm", "pass")]
    assert {c["subject"] for c in findings(report, "speed")} == {"rms_norm fp32", "rms_norm bf16", "rms_norm fp16"}


def test_verify_reads_each_isa_clone_on_its_own(demo):
    _, report = demo
    clones = {c["subject"]: c for c in findings(report, "vector")}
    assert {
        "demo_kernel_cpu::rms_norm [arch_x86_64_v4]",
        "demo_kernel_cpu::rms_norm [arch_x86_64_v3]",
        "demo_kernel_cpu::rms_norm [default]",
    } <= set(clones)
    assert clones["demo_kernel_cpu::rms_norm [arch_x86_64_v3]"]["data"]["isa_width"] == 256
    assert all(int(c["data"]["packed"].get(str(c["data"]["isa_width"]), 0)) > 0 for c in clones.values())


def test_verify_judges_each_per_isa_runner_of_ltx_kernels_at_its_width(ltx):
    """ltx-kernels compiles each op once per storage type and ISA (vec.h's run_avx512 / run_avx2 / run_baseline):
    verify reads each of those on its own, at its ISA's width, and leaves the fp64 (gradcheck) ones unjudged."""
    found = {c.subject: c for c in vector.check_vectorised(Path(ltx.__file__).parent, ["ltx_cpu"])}
    widths = {"avx512": 512, "avx2": 256, "baseline": 128}
    for isa, width in widths.items():
        for t in ("float", "BFloat16", "Half"):
            c = found[f"ltx_cpu::rms_norm<{t}> [{isa}]"]
            assert c.status == "pass" and c.data["isa_width"] == width and int(c.data["packed"][str(width)]) > 0, c
    assert found["ltx_cpu::rms_norm<BFloat16> [avx512bf16]"].data["isa_width"] == 512
    judged = [s for s in found if s.startswith("ltx_cpu::")]
    assert len(judged) == 8 * 3 * 3 + 8 and not any("<double>" in s for s in judged)
    assert found["24 fp64 compilations"].status == "skip"
    # No runner compares or converts lane by lane: vec.h compares in pieces of the ISA's register width
    # (a 64-byte compare written on f32x16 was 128 vucomiss per AVX2 gelu_tanh runner, bf16 stores 144 vpextrd).
    lanewise = {
        s: (c.data["mix"]["compares"], c.data["mix"]["extracts"])
        for s, c in found.items()
        if s.startswith("ltx_cpu::") and (c.data["mix"]["compares"] > 2 or c.data["mix"]["extracts"] > 50)
    }
    assert not lanewise, lanewise
    assert all(c.status == "pass" for s, c in found.items() if s.startswith("ltx_cpu::")), [
        c.line() for c in found.values() if c.status == "fail"
    ]
    runs_here = [s for s, c in found.items() if c.data.get("runs_here") and "<" in s]
    assert len(runs_here) == 8 * 3, "one compilation per op and storage type runs on this CPU"


def test_cuda_is_compiled_or_skipped_with_the_reason(demo):
    _, report = demo
    cuda = [c for c in findings(report, "build") if c["subject"] == "cuda"]
    assert len(cuda) == 1 and cuda[0]["status"] in ("pass", "skip")
    if cuda[0]["status"] == "skip":
        assert "CUDA" in cuda[0]["detail"] or "nvcc" in cuda[0]["detail"]
        assert "run verify again" in cuda[0]["detail"], "the skip says how to verify the backend"
        assert report["unverified"] == ["cuda"]
    else:
        assert report["unverified"] == []


def test_a_backend_not_built_here_is_named_in_the_verdict_not_called_shippable():
    """build.toml lists cuda; a machine without a CUDA torch skips it: the kernel is shippable on cpu only, and the
    verdict says which backend is unverified and how to verify it."""
    from hubkernels.author.verify import Check, Verdict, format_table

    skipped = Check("build", "cuda", "skip", "torch 2.13.0+cpu here has no CUDA; ... and run verify again")
    verdict = Verdict("k", [Check("build", "cpu", "pass", "torch-cpu"), skipped])
    last = format_table(verdict).splitlines()[-1]
    assert verdict.ok and last.startswith("shippable on cpu only, not yet as build.toml lists it"), last
    assert "cuda unverified (torch 2.13.0+cpu here has no CUDA" in last and "shippable:" not in last
    built = Verdict("k", [Check("build", "cpu", "pass", "torch-cpu"), Check("build", "cuda", "pass", "torch-cu128")])
    assert format_table(built).splitlines()[-1].startswith("shippable: every check passed")


def test_verify_writes_each_finding_once_into_one_log(ltx, tmp_path):
    """`hubkernels verify > log 2>&1`: the progress lines (stderr) hold the findings, the table (stdout) adds only
    the verdict, so each finding is in the log once."""
    log = tmp_path / "verify.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "hubkernels", "verify", str(ROOT), "--skip", "build,tests,abi,compile,vector,speed"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=900,
        )
    text = log.read_text()
    assert done.returncode == 0, text[-2000:]
    assert len(re.findall(r"(?m)^PASS  build    cpu ", text)) == 1, text[-2000:]
    assert text.rstrip().splitlines()[-1].startswith("shippable on cpu only"), text[-2000:]


# rms_norm as the skill used to teach it: fp16 converted element by element inside the arithmetic loops.
SCALAR_FP16_RMS_NORM = """
#include <cmath>
#include "convert.h"
namespace demo_kernel_cpu {
namespace {
template <class T>
DEMO_KERNEL_INLINE void rows(T* out, const T* x, const T* w, int64_t r0, int64_t r1, int64_t dim, float eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * dim;
    float lane[16] = {};
    int64_t i = 0;
    for (; i + 16 <= dim; i += 16)
      for (int j = 0; j < 16; ++j) lane[j] += to_float(xr[i + j]) * to_float(xr[i + j]);
    float sum = 0.0f;
    for (; i < dim; ++i) sum += to_float(xr[i]) * to_float(xr[i]);
    for (int j = 0; j < 16; ++j) sum += lane[j];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    for (int64_t k = 0; k < dim; ++k)
      out[r * dim + k] = from_float<T>(to_float(xr[k]) * inv * (w ? to_float(w[k]) : 1.0f));
  }
}
}  // namespace
DEMO_KERNEL_MULTIVERSION
void rms_norm(void* out, const void* x, const void* w, int64_t r0, int64_t r1, int64_t dim, float eps,
              DType dtype) {
  dispatch(dtype, [&](auto tag) DEMO_KERNEL_ALWAYS_INLINE {
    using T = decltype(tag);
    rows(static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(w), r0, r1, dim, eps);
  });
}
}  // namespace demo_kernel_cpu
"""


# A clamp written on 64-byte vectors in an AVX2 function (GCC compares it one lane at a time), and a fast AVX2
# row loop in an anonymous namespace (what runs, though no exported symbol names it).
LANEWISE_AND_ANONYMOUS = """
#include <cstdint>
#include <cstring>
namespace demo_kernel_cpu {
using f32x16 = float __attribute__((vector_size(64)));
__attribute__((target("arch=x86-64-v3"))) void clamp_rows(float* out, const float* x, int64_t n) {
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    f32x16 v;
    std::memcpy(&v, x + i, sizeof v);
    v = v > 88.0f ? f32x16{} + 88.0f : v;
    v = v * 2.0f + 1.0f;
    std::memcpy(out + i, &v, sizeof v);
  }
}
namespace {
__attribute__((target("arch=x86-64-v3"), noinline)) void scale_rows(float* out, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * 2.0f + 1.0f;
}
}  // namespace
void scale(float* out, const float* x, int64_t n) { scale_rows(out, x, n); }
}  // namespace demo_kernel_cpu
"""


# The planted run's speed gate: ours may take up to 1.5x torch.compile's time. It holds no fast fp16 op that CI's
# load could push past the gate (VERIFY_CI_TOLERANCE's concern), only the defect, which measures 0.09-0.10x
# torch.compile on a quiet 2-core machine and 0.29x with another test run beside it: past VERIFY_CI_TOLERANCE's
# 4x allowance no longer, past this one by far.
PLANTED_TOLERANCE = "0.5"


@pytest.fixture(scope="module")
def planted(demo) -> list[str]:
    """The demo kernel with its users' mistakes planted, through `verify --skip tests,abi`: its output lines."""
    root, _ = demo
    # The two mistakes the skill's users made: fp16 converted inside the arithmetic loops without
    # -fno-trapping-math (the loop stays scalar), and a Python-side call torch.compile cannot trace.
    (root / "kernel_src/demo_kernel_cpu/rms_norm.cpp").write_text(SCALAR_FP16_RMS_NORM)
    (root / "kernel_src/demo_kernel_cpu/planted.cpp").write_text(LANEWISE_AND_ANONYMOUS)
    toml = root / "build.toml"
    toml.write_text(
        toml.read_text()
        .replace('"-O3", "-fno-trapping-math"', '"-O3"')
        .replace(
            '"kernel_src/demo_kernel_cpu/rms_norm.cpp",',
            '"kernel_src/demo_kernel_cpu/rms_norm.cpp",\n    "kernel_src/demo_kernel_cpu/planted.cpp",',
        )
    )
    init = root / "kernel_src/torch-ext/demo_kernel/__init__.py"
    init.write_text(
        init.read_text().replace("    return ops.rms_norm(", '    print("rms_norm")\n    return ops.rms_norm(')
    )
    done = hubkernels_cli(
        "verify", "--skip", "tests,abi", "--dtypes", "fp16,fp32", "--tolerance", PLANTED_TOLERANCE, cwd=root
    )
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    return done.stdout.splitlines()


def test_verify_names_a_lane_by_lane_compare_with_its_counts_and_judges_an_anonymous_loop(planted):
    """What runs is judged wherever it lives: the AVX2 clamp fails with the scalar compares GCC made of it, and the
    row loop of an anonymous namespace is read at AVX2's width (its ISA known from its instructions)."""
    clamp = [ln for ln in planted if ln.startswith(("FAIL", "PASS")) and " vector " in ln and "::clamp_rows" in ln]
    assert len(clamp) == 1 and clamp[0].startswith("FAIL") and "lane by lane" in clamp[0], planted
    assert re.search(r"\b1[0-9] v?(u?comiss|cmpn?\w*ss)\b", clamp[0]), clamp[0]
    assert "256-bit" in clamp[0]
    loop = [ln for ln in planted if ln.startswith(("FAIL", "PASS")) and "(anonymous namespace)::scale_rows" in ln]
    assert len(loop) == 1 and loop[0].startswith("PASS") and "at 256-bit" in loop[0], planted
    assert "ISA read from its instructions" in loop[0]


def test_a_slow_fp16_loop_and_a_graph_break_each_fail_verify_naming_op_and_reason(planted):
    lines = planted
    verdicts = "\n".join(ln for ln in lines if ln.startswith(("FAIL", "PASS", "SKIP", "not shippable")))
    compile_fail = [ln for ln in lines if ln.startswith("FAIL") and " compile " in ln]
    speed_fail = [ln for ln in lines if ln.startswith("FAIL") and " speed " in ln]
    assert (
        compile_fail and "rms_norm" in compile_fail[0] and "torch.compile(fullgraph=True) breaks" in compile_fail[0]
    ), verdicts
    assert speed_fail and "rms_norm fp16" in speed_fail[0] and "slower than torch.compile" in speed_fail[0], verdicts
    assert "where to look: demo_kernel_cpu::rms_norm [" in speed_fail[0] and "Inductor's kernel:" in speed_fail[0]
    assert lines[-1].startswith("not shippable")


def test_verify_times_only_the_ops_and_sizes_asked_for(ltx, capsys):
    """`--ops` and `--shape` reproduce one op's figure at a model's own sizes, and each timing says how many page
    faults a call took (a miss from fresh memory reads differently from a slow loop)."""
    argv = [
        "verify",
        str(ROOT),
        "--skip",
        "tests,abi,compile,vector",
        "--ops",
        "gated_residual",
        "--shape",
        "tokens=8",
        "--dtypes",
        "fp32",
        "--iters",
        "3",
        "--tolerance",
        "1000",
        "--json",
    ]
    assert main(argv) == 0
    speed = findings(json.loads(capsys.readouterr().out), "speed")
    assert [c["subject"] for c in speed] == ["gated_residual fp32"]
    assert speed[0]["data"]["shape"]["tokens"] == 8
    assert set(speed[0]["data"]["page_faults_per_call"]) == {"ours", "eager", "torch.compile"}


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--ops", "no_such_op"], "declare rms_norm"),
        (["--shape", "seq=4"], "declared sizes are batch, ff, hidden, tokens"),
        (["--shape", "tokens"], "NAME=N"),
    ],
)
def test_verify_refuses_ops_and_sizes_no_benchmark_declares(ltx, capsys, argv, says):
    assert main(["verify", str(ROOT), "--skip", "tests,abi,compile,vector", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err


def test_verify_usage_errors_exit_2(tmp_path, capsys):
    assert main(["verify", str(tmp_path)]) == 2  # no build.toml
    assert "build.toml" in capsys.readouterr().err


# silu_and_mul with the division GCC made of a clamp after `x / (1 + e)`: two divisions per vector where
# Inductor's kernel for the formula has one.
DOUBLE_DIVISION = """
#include <cstdint>
namespace demo_kernel_cpu {
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void silu_and_mul(float* out, const float* x, int64_t rows, int64_t d) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = x + r * 2 * d;
    const float* b = a + d;
    for (int64_t i = 0; i < d; ++i) {
      const float v = a[i] < -80.0f ? -80.0f : a[i];
      const float e = 1.0f + (1.0f - v * (1.0f - v * 0.5f));
      out[r * d + i] = (a[i] / e) * (b[i] / (e + 1.0f));
    }
  }
}
}  // namespace demo_kernel_cpu
"""


def test_a_speed_failure_names_a_planted_double_division_against_inductors_kernel(tmp_path):
    """A speed failure says where to look: the loop of the compilation this CPU runs against Inductor's kernel for
    the same formula, per 16 elements, and the likely cause with the skill's fix."""
    import shutil

    import torch
    import torch.nn.functional as F

    from hubkernels.author.verify import Check, diagnose, op_checks

    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None or shutil.which("objdump") is None or vector.cpu_width() < 256:
        pytest.skip("needs a C++ compiler, objdump and an AVX2 CPU")
    (tmp_path / "silu.cpp").write_text(DOUBLE_DIVISION)
    subprocess.run(
        [
            cxx,
            "-O3",
            "-fno-trapping-math",
            "-fPIC",
            "-shared",
            str(tmp_path / "silu.cpp"),
            "-o",
            str(tmp_path / "silu.so"),
        ],
        check=True,
    )

    def formula(x: torch.Tensor) -> torch.Tensor:
        h = x.shape[-1] // 2
        return F.silu(x[..., :h]) * x[..., h:]

    before = op_checks.loaded_modules()
    torch._dynamo.reset()
    torch.compile(formula, dynamic=False)(torch.randn(8, 2 * 1024))
    inductor = sorted(m for m in op_checks.loaded_modules() - before if "inductor" in m)
    failed = Check(
        "speed",
        "silu_and_mul fp32",
        "fail",
        "slower than torch.compile of its formula",
        {"dtype": "fp32", "inductor_modules": inductor},
    )
    found = diagnose.explain(failed, tmp_path, ["demo_kernel_cpu"], ["silu_and_mul"])
    where = found.data["where"]
    clone = {512: "arch_x86_64_v4", 256: "arch_x86_64_v3"}[vector.cpu_width()]
    assert where["compilation"] == f"demo_kernel_cpu::silu_and_mul [{clone}]" and found.status == "fail"
    assert where["ours_per16"]["divides"] == 2 * where["inductor_per16"]["divides"] > 0, found.detail
    assert f"where to look: demo_kernel_cpu::silu_and_mul [{clone}] (runs here)" in found.detail
    per16 = 16 * 32 // vector.cpu_width()  # vdivps per 16 fp32 elements, one per vector register
    assert f"likely: {2 * per16} vdivps per 16 elements against Inductor's {per16}:" in found.detail, found.detail
    assert "clamp the operand before the division" in found.detail


def test_a_256_bit_store_split_in_halves_counts_as_one_store():
    """GCC's generic and AMD tunings store an unaligned ymm as `vmovups %xmm` plus `vextractf128`: both halves are
    the loop's output, so a loop with one vdivps per 8 floats reads as 2 per 16 (AMD EPYC, torch's Inductor)."""
    from hubkernels.author.verify import diagnose

    mix = vector.Mix()
    mix.add("vdivps", "%ymm0,%ymm1,%ymm1")
    mix.add("vextractf128", "$0x1,%ymm1,0x10(%r12,%rbx,4)")
    mix.add("vmovups", "%xmm1,(%r12,%rbx,4)")
    assert mix.stored_bits == 256
    assert diagnose.per16(mix, "fp32")["divides"] == 2


def test_verify_models_a_narrower_cpu_when_aten_cpu_capability_says_so(monkeypatch):
    """`ATEN_CPU_CAPABILITY=avx2` (or `default`) caps the ISA verify expects the kernel to run here, as torch's own
    kernels are capped, so an AVX-512 machine can rehearse an AVX2 or a scalar one; read through settings."""
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    native = vector.cpu_width()
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", " AVX2 ")
    assert vector.cpu_width() == min(native, 256)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    assert vector.cpu_width() == 128
