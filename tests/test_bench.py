"""`hubkernels bench` on the CPU: every op of this build timed beside its peers on a small LTX-like shape,
a report whose numbers and errors make sense, the JSON file, and one-line errors for ops it cannot time."""

from __future__ import annotations

import json

import pytest
import torch

from hubkernels import bench
from hubkernels.cli import main

SMALL = dict(device="cpu", batch=2, tokens=24, hidden=64, ff=128, warmup=1, iters=3)


def test_bench_times_every_op_beside_its_peers(ltx):
    report = bench.run(ltx, dtype=torch.float32, compile_peers=False, **SMALL)
    by_op: dict[str, dict[str, bench.Row]] = {}
    for row in report.rows:
        by_op.setdefault(row.op, {})[row.impl] = row
    assert set(by_op) == {"rms_norm", "rms_norm_modulate", "rms_norm_weight", "add_rms_norm_modulate",
                          "rope_interleaved_qk", "gelu_tanh", "gated_residual", "qk_rms_norm_rope",
                          "qk_rms_norm_rope_grid"}
    assert set(by_op["rms_norm"]) == {"ours", "eager", "F.rms_norm"}
    assert set(by_op["rms_norm_weight"]) == {"ours", "F.rms_norm"}  # torch.nn.RMSNorm's eager is F.rms_norm
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
    rc = main(["bench", "--device", "cpu", "--dtype", "bf16", "--tokens", "24", "--hidden", "64", "--ff", "128",
               "--warmup", "1", "--iters", "3", "--no-compile", "--ops", "rms_norm_modulate", "gelu_tanh",
               "--output", str(out)])
    assert rc == 0
    table = capsys.readouterr().out
    assert "rms_norm_modulate      ours" in table and "gelu_tanh              eager" in table
    data = json.loads(out.read_text())
    assert [(r["op"], r["impl"]) for r in data["rows"]] == [
        ("rms_norm_modulate", "ours"), ("rms_norm_modulate", "eager"), ("gelu_tanh", "ours"), ("gelu_tanh", "eager")]
    assert all(r["max_rel_err"] < 1e-2 for r in data["rows"])  # bf16 rounding
    assert data["dtype"] == "bfloat16" and data["argv"]


@pytest.mark.parametrize("ops, says", [(["rms_norm", "layer_norm"], "no bench for layer_norm; choose from rms_norm"),
                                       (["rope"], "no bench for rope")])
def test_bench_names_an_unknown_op_in_one_line(ltx, capsys, ops, says):
    rc = main(["bench", "--device", "cpu", "--tokens", "8", "--hidden", "16", "--iters", "1", "--warmup", "0",
               "--no-compile", "--ops", *ops])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and err.count("\n") == 1 and "Traceback" not in err
