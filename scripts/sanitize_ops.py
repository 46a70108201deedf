"""Run every ltx-kernels CUDA op once on awkward shapes, for `compute-sanitizer --tool memcheck`.

Shapes cover the vector path, the scalar tail, tiny rows and [B,1,D] / per-token / strided modulation.
Exit status 0 only if every op also matches the float64 reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]
import ltx_reference  # noqa: E402  (the float64 references of the tests)
from benchmark_ops import LtxOps, rope_freqs  # noqa: E402  (the op benchmarks' formulas)

import hubkernels  # noqa: E402
from hubkernels.author.bench import reference  # noqa: E402


def _reference(op: str, args: tuple) -> torch.Tensor:
    """The float64 truth the op benchmarks compare with."""
    return reference(LtxOps(None, torch.device("cuda"), None, {}, None), op, args)


def main() -> int:
    k = hubkernels.get_local_kernel(Path(__file__).resolve().parent.parent, backend="cuda")
    dev = "cuda"
    failures = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for D in (2, 18, 128, 2048, 2050):
            B, S = 2, 5
            r = lambda *s, dt=dtype: torch.randn(*s, device=dev, dtype=dt)  # noqa: E731
            x, y = r(B, S, D), r(B, S, D)
            ada = r(B, 1, 6, D)
            scale, shift, gate = ada[:, :, 0], ada[:, :, 1], ada[:, :, 2]  # strided views, as in LTX blocks
            per_tok = r(B, S, D)
            cos, sin = r(B, S, D, dt=torch.float32).cos(), r(B, S, D, dt=torch.float32).sin()
            w = r(D)
            checks = {
                "rms_norm": (k.rms_norm(x, None, 1e-6), _reference("rms_norm", (x,))),
                "rms_norm_weight": (k.rms_norm(x, w, 1e-5), _reference("rms_norm_weight", (x, w))),
                "rms_norm_modulate": (
                    k.rms_norm_modulate(x, scale, shift, None, 1e-6),
                    _reference("rms_norm_modulate", (x, scale, shift)),
                ),
                "rms_norm_modulate_tok": (
                    k.rms_norm_modulate(x, per_tok, per_tok, None, 1e-6),
                    _reference("rms_norm_modulate", (x, per_tok, per_tok)),
                ),
                "rope_interleaved_qk": (
                    k.rope_interleaved_qk(x, y, cos, sin),
                    _reference("rope_interleaved_qk", (x, y, cos, sin)),
                ),
                "gelu_tanh": (k.gelu_tanh(x), _reference("gelu_tanh", (x,))),
                "gated_residual": (k.gated_residual(x, y, gate), _reference("gated_residual", (x, y, gate))),
                "qk_rms_norm_rope": (
                    k.qk_rms_norm_rope(x, y, w, w, cos, sin, 1e-5),
                    _reference("qk_rms_norm_rope", (x, y, w, w, cos, sin)),
                ),
            }
            if hasattr(k, "add_rms_norm_modulate"):
                checks["add_rms_norm_modulate"] = (
                    k.add_rms_norm_modulate(x, y, scale, shift, None, None, 1e-6),
                    ltx_reference.add_rms_norm_modulate(x, y, scale, shift),
                )
                checks["add_rms_norm_modulate_gate"] = (
                    k.add_rms_norm_modulate(x, y, per_tok, per_tok, per_tok, w, 1e-6),
                    ltx_reference.add_rms_norm_modulate(x, y, per_tok, per_tok, per_tok, w),
                )
            if hasattr(k, "qk_rms_norm_rope_grid"):
                pos = torch.rand(B, S, 3, device=dev) * 3 - 1
                freqs = rope_freqs(D, 10000.0, torch.device(dev))
                checks["qk_rms_norm_rope_grid"] = (
                    k.qk_rms_norm_rope_grid(x, y, w, w, pos, freqs, 1e-5),
                    ltx_reference.qk_rms_norm_rope(x, y, w, w, *ltx_reference.rope_tables(pos, freqs, D)),
                )
            torch.cuda.synchronize()
            tol = 1e-5 if dtype == torch.float32 else 1e-2
            for name, (out, ref) in checks.items():
                outs, refs = (out, ref) if isinstance(out, tuple) else ((out,), (ref,))
                err = max(
                    float((o.double() - r_.double()).norm() / r_.double().norm().clamp_min(1e-30))
                    for o, r_ in zip(outs, refs)
                )
                ok = err < tol
                failures += not ok
                print(f"{name:24} {str(dtype):15} D={D:5} rel err {err:.2e} {'ok' if ok else 'FAIL'}")
    print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
