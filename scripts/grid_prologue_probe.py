"""qk_rms_norm_rope_grid's launch variants as standalone libraries, timed side by side at LTX-Video's shape.

python scripts/grid_prologue_probe.py build DIR SPEC ...   (CPU machine, nvcc) SPEC: NAME=REV, the op's sources
    (kernel_src/ltx_cuda) at git revision REV, or NAME=tree, the working tree's; each becomes DIR/NAME.so
python scripts/grid_prologue_probe.py time DIR NAME ...    (GPU machine) checks every output bitwise against the
    first NAME's, then times each as `hubkernels bench` does (bursts after a sleep, 3 input sets), three rounds
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = "kernel_src/ltx_cuda"
SHIM = """#include "qk_rms_norm_rope_grid.cu"
extern "C" int grid_fwd(void* qo, void* ko, const void* q, const void* k, const void* wq, const void* wk,
                        const float* pos, const float* freqs, long rows, long dim, float eps, void* stream) {
  ltx_cuda::qk_rms_norm_rope_grid(qo, ko, q, k, wq, wk, pos, freqs, rows, dim, eps, ltx_cuda::DType::BF16,
                                  static_cast<cudaStream_t>(stream));
  return static_cast<int>(cudaGetLastError());
}
"""
B, S, D = 2, 6144, 2048


def build(out: Path, specs: list[str]) -> None:
    for spec in specs:
        name, rev = spec.split("=", 1)
        src = out / f"src_{name}"
        src.mkdir(parents=True, exist_ok=True)
        files = (ROOT / SRC).iterdir() if rev == "tree" else None
        if files is None:
            listing = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{rev}:{SRC}"],
                                     capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
            for f in listing:
                text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{SRC}/{f}"],
                                      capture_output=True, text=True, check=True).stdout  # fmt: skip
                (src / f).write_text(text)
        else:
            for f in files:
                (src / f.name).write_text(f.read_text())
        (src / "shim.cu").write_text(SHIM)
        cmd = ["nvcc", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-shared", "-Xcompiler", "-fPIC"]
        subprocess.run([*cmd, "-o", str(out / f"{name}.so"), str(src / "shim.cu")], check=True)
        print("built", out / f"{name}.so")


def time_all(out: Path, names: list[str]) -> None:
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from benchmark_ops import ltx_positions, rope_freqs

    from hubkernels.author.bench import time_calls

    dev = torch.device("cuda")
    pos, freqs = ltx_positions(B, S, dev), rope_freqs(D, 10000.0, dev)
    sets = [tuple(torch.randn(*shape, device=dev, dtype=torch.bfloat16) for shape in [(B, S, D)] * 2 + [(D,)] * 2)
            for _ in range(3)]  # fmt: skip

    def runner(name: str):  # type: ignore[no-untyped-def]
        lib = ctypes.CDLL(str(out / f"{name}.so"))
        lib.grid_fwd.argtypes = [ctypes.c_void_p] * 8 + [ctypes.c_long, ctypes.c_long, ctypes.c_float, ctypes.c_void_p]

        def run(q, k, wq, wk):  # type: ignore[no-untyped-def]
            qo, ko = torch.empty_like(q), torch.empty_like(k)
            ptrs = (t.data_ptr() for t in (qo, ko, q, k, wq, wk, pos, freqs))
            if rc := lib.grid_fwd(*ptrs, B * S, D, 1e-5, torch.cuda.current_stream().cuda_stream):
                raise RuntimeError(f"{name}: grid_fwd returned {rc}")
            return qo, ko

        return run

    runs = {name: runner(name) for name in names}
    ref = runs[names[0]](*sets[0])
    for name, run in runs.items():
        same = all(torch.equal(a, b) for a, b in zip(run(*sets[0]), ref))
        print(name, "bitwise equal to", names[0], same, flush=True)
    for rnd in range(3):
        for name, run in runs.items():
            t = sorted(time_calls(run, sets, dev, warmup=10, iters=50))
            print(rnd, name, f"{t[len(t) // 2]:.1f} us", flush=True)


if __name__ == "__main__":
    cmd, out, *rest = sys.argv[1:]
    if cmd == "build":
        build(Path(out), rest)
    else:
        time_all(Path(out), rest)
