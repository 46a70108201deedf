"""`hubkernels bench` on the CPU: the ops this kernel declares in benchmarks/benchmark*.py, each timed beside
its eager formula and peers on a small LTX-like shape, a report whose numbers and errors make sense, the JSON
file, and one-line errors for ops it cannot time or a kernel root that declares no benchmarks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hubkernels.author import bench
from hubkernels.cli import main

ROOT = Path(__file__).resolve().parent.parent
SMALL = dict(device="cpu", shape=dict(batch=2, tokens=24, hidden=64, ff=128), warmup=1, iters=3)


def test_bench_times_every_declared_op_beside_its_peers(ltx):
    benchmarks = bench.discover(ROOT)
    assert [b.__name__ for b in benchmarks] == ["LtxOps"]
    report = bench.run(ltx, benchmarks, dtype=torch.float32, compile_peers=False, **SMALL)
    by_op: dict[str, dict[str, bench.Row]] = {}
    for row in report.rows:
        by_op.setdefault(row.op, {})[row.impl] = row
    assert set(by_op) == {
        "rms_norm",
        "rms_norm_modulate",
        "rms_norm_weight",
        "add_rms_norm_modulate",
        "rope_interleaved_qk",
        "gelu_tanh",
        "gated_residual",
        "qk_rms_norm_rope",
        "qk_rms_norm_rope_grid",
        "attention",
        "attention_with_prologue",
    }
    assert set(by_op["rms_norm"]) == {"ours", "eager", "F.rms_norm"}
    assert set(by_op["rms_norm_weight"]) == {"ours", "F.rms_norm"}  # torch.nn.RMSNorm's eager is F.rms_norm
    assert set(by_op["attention"]) == {"ours", "eager"}  # flash-attn-4 only where it runs: bf16 on sm_90+
    # a peer named by a method of the benchmark (the prologue, then flash-attn-4): left out where it does not run
    assert set(by_op["attention_with_prologue"]) == {"ours", "eager"}
    for op, impls in by_op.items():
        assert "ours" in impls and len(impls) >= 2, op
        for row in impls.values():
            assert row.samples == SMALL["iters"] and row.median_us > 0 and row.pct_copy_bw > 0, (op, row)
            assert row.max_rel_err is not None and row.max_rel_err < 1e-5, (op, row)  # fp32 against float64
    # bytes: every input once, every output once (rms_norm [2, 24, 64] fp32: x in, y out)
    assert by_op["rms_norm"]["ours"].bytes == 2 * 2 * 24 * 64 * 4
    assert report.copy_gbps > 0 and report.shape == [2, 24, 64] and report.dtype == "float32"


def test_bench_cli_writes_the_table_and_json(ltx, tmp_path, capsys):
    out = tmp_path / "ops.json"
    rc = main(
        [
            "bench",
            "--device",
            "cpu",
            "--dtype",
            "bf16",
            "--tokens",
            "24",
            "--hidden",
            "64",
            "--ff",
            "128",
            "--warmup",
            "1",
            "--iters",
            "3",
            "--no-compile",
            "--ops",
            "rms_norm_modulate",
            "gelu_tanh",
            "--output",
            str(out),
        ]
    )
    assert rc == 0
    table = capsys.readouterr().out
    assert "rms_norm_modulate      ours" in table and "gelu_tanh              eager" in table
    data = json.loads(out.read_text())
    assert [(r["op"], r["impl"]) for r in data["rows"]] == [
        ("rms_norm_modulate", "ours"),
        ("rms_norm_modulate", "eager"),
        ("gelu_tanh", "ours"),
        ("gelu_tanh", "eager"),
    ]
    assert all(r["max_rel_err"] < 1e-2 for r in data["rows"])  # bf16 rounding
    assert data["dtype"] == "bfloat16" and data["argv"]


@pytest.mark.parametrize(
    "ops, says",
    [(["rms_norm", "layer_norm"], "no bench for layer_norm; choose from rms_norm"), (["rope"], "no bench for rope")],
)
def test_bench_names_an_unknown_op_in_one_line(ltx, capsys, ops, says):
    rc = main(
        [
            "bench",
            "--device",
            "cpu",
            "--tokens",
            "8",
            "--hidden",
            "16",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--no-compile",
            "--ops",
            *ops,
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and says in err and err.count("\n") == 1 and "Traceback" not in err


def test_bench_of_a_kernel_without_benchmarks_says_where_they_go(tmp_path, capsys):
    rc = main(["bench", str(tmp_path), "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and "no benchmarks/benchmark*.py under" in err and err.count("\n") == 1


def _gelu_benchmark(root: Path, cls: str, peers: str) -> None:
    """root/benchmarks/benchmark_<cls>.py: class `cls` times gelu_tanh against its formula, beside `peers` (Python
    source of the {name: peer} dict), and has methods a peer may name: op_again, and op_slowly (20 ms more)."""
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / f"benchmark_{cls.lower()}.py").write_text(
        "import time\n\nimport torch\n"
        "from hubkernels.author.bench import Benchmark\n\n"
        f"class {cls}(Benchmark):\n"
        "    shape = {'n': 4096}\n"
        "    report_shape = ('n',)\n"
        f"    peers = {{'gelu_tanh': {peers}}}\n\n"
        "    def setup_gelu_tanh(self):\n"
        "        return (self.randn(self.shape['n']),)\n\n"
        "    def benchmark_gelu_tanh(self, x):\n"
        "        return self.kernel.gelu_tanh(x)\n\n"
        "    def verify_gelu_tanh(self, x):\n"
        "        return torch.nn.functional.gelu(x, approximate='tanh')\n\n"
        "    def op_again(self, x):\n"
        "        return self.kernel.gelu_tanh(x)\n\n"
        "    def op_slowly(self, x):\n"
        "        time.sleep(0.02)\n"
        "        return self.kernel.gelu_tanh(x)\n"
    )


def test_a_kernel_declares_its_own_benchmark(ltx, tmp_path, capsys):
    """Any kernel root: one op, its formula, peers (a function, and methods of the benchmark, which see its
    kernel); the runner times them and compiles the formula."""
    tanh = "lambda x: 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))"
    peers = f"{{'tanh formula': {tanh}, 'the op, by method': 'op_again', 'the op, slowly': 'op_slowly'}}"
    _gelu_benchmark(tmp_path, "Gelu", peers)
    out = tmp_path / "gelu.json"
    rc = main(
        [
            "bench",
            str(tmp_path),
            "--kernel",
            str(ROOT),
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--warmup",
            "1",
            "--iters",
            "3",
            "--output",
            str(out),
        ]
    )
    assert rc == 0
    data = json.loads(out.read_text())
    impls = ["ours", "eager", "tanh formula", "the op, by method", "the op, slowly", "torch.compile"]
    assert [r["impl"] for r in data["rows"]] == impls
    assert data["shape"] == [4096] and all(r["max_rel_err"] < 1e-5 for r in data["rows"])
    assert all(r["pct_copy_bw"] > 0 for r in data["rows"])  # the slow one's share too, under 0.05 %


def test_two_kernels_with_a_benchmark_file_of_one_name_each_get_their_own(tmp_path):
    """discover() imports each kernel's benchmarks/benchmark_ops.py as its own module, not the first one again."""
    for name in ("one", "two"):
        (tmp_path / name / "benchmarks").mkdir(parents=True)
        (tmp_path / name / "benchmarks" / "benchmark_ops.py").write_text(
            f"from hubkernels.author.bench import Benchmark\n\nclass {name.title()}(Benchmark):\n    pass\n"
        )
    assert [c.__name__ for c in bench.discover(tmp_path / "one")] == ["One"]
    assert [c.__name__ for c in bench.discover(tmp_path / "two")] == ["Two"]


def test_a_peer_named_for_no_method_is_said_in_one_line(ltx, tmp_path, capsys):
    _gelu_benchmark(tmp_path, "Typo", "{'by method': 'op_agian'}")
    argv = ["bench", str(tmp_path), "--kernel", str(ROOT), "--device", "cpu", "--iters", "1", "--warmup", "0"]
    rc = main([*argv, "--no-compile"])
    err = capsys.readouterr().err
    says = "Typo.peers['gelu_tanh']['by method'] names 'op_agian', which is no method of Typo"
    assert rc == 2 and says in err.splitlines()[-1] and "Traceback" not in err, err  # (a dirty tree's warning above)


def test_a_benchmark_written_against_the_old_module_path_still_runs(tmp_path):
    """`hubkernels.bench` moved to `hubkernels.author.bench`: a kernel's benchmark file that imports the old path
    still gets the same `Benchmark` class, with a DeprecationWarning naming the new path."""
    import subprocess
    import sys

    script = (
        "import warnings\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n"
        "    from hubkernels.bench import Benchmark\n"
        "except DeprecationWarning as e:\n"
        "    print('warned:', e)\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        "from hubkernels.bench import Benchmark\n"
        "from hubkernels.verify import verify\n"
        "import hubkernels.author.bench, hubkernels.author.verify\n"
        "print(Benchmark is hubkernels.author.bench.Benchmark, verify is hubkernels.author.verify.verify)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "warned: hubkernels.bench moved to hubkernels.author.bench: import that instead (the old name will be removed)",
        "True True",
    ]
