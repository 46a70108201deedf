"""The CUDA kernels of kernel_src/ltx_cuda, run on the CPU: their indexing, launch shapes and math.

tests/ltx/cuda_emu builds the real .cu sources with g++ against the CUDA headers and a small CUDA
runtime of its own (emu.h): every CUDA thread is a fiber, __syncthreads and the warp shuffles are
barriers over the block or warp. cases.cpp calls every launcher of ltx_cuda.h, as torch_binding.cpp
does, and compares every output element with a float64 reference.

What it proves, on a machine without a GPU:
- each op gives the right values (within one rounding of the output dtype, 2e-5 in fp32) for every
  dtype, for widths on both sides of every launch-shape boundary, on the wide (16-byte) and narrow
  (any alignment, any width) paths, with partly filled last blocks and every modulation/gate layout;
- every output element is written, no input is written, and no thread reads or writes outside its
  tensors (AddressSanitizer) or makes a misaligned 16-byte access (UndefinedBehaviorSanitizer);
- every launch fits the CUDA limits and the kernel's __launch_bounds__, no barrier deadlocks, and
  empty tensors launch nothing (a zero-size grid is a launch error);
- every kernel instantiation the launchers can pick ran (the test fails, naming it, when a new
  shape is never reached).

What it cannot see: the GPU memory model (visibility between blocks, the non-coherent ld.global.nc
path, memory fences), races between threads (here they interleave only at barriers; running
blocks in alternating thread order catches a missing __syncthreads only when the order changes a
value), the real ex2.approx/rsqrt/fast-division rounding (exact here), register pressure, and
timing. Those need a GPU: `pytest -m gpu` and compute-sanitizer (memcheck, racecheck, synccheck).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_emu import harness

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "_build" / "cuda_emu"

pytestmark = pytest.mark.slow

# Checks per suite in tests/ltx/cuda_emu/cases.cpp: a loop that silently stops running cases fails
# here. Change these with the cases.
EXPECTED = {
    "rms": 163,
    "mod": 312,
    "addmod": 818,
    "gated": 121,
    "gelu": 55,
    "rope": 168,
    "qk": 152,
    "qkgrid": 158,
    "empty": 81,
}


@pytest.fixture(scope="module")
def emulator() -> Path:
    """The emulation binary of this checkout's CUDA sources (built once, cached in _build/cuda_emu)."""
    toolchain = harness.find_toolchain()
    if isinstance(toolchain, str):
        pytest.skip(f"cannot build the CUDA emulation: {toolchain}")
    return harness.build(ROOT, CACHE, toolchain)


@pytest.fixture(scope="module")
def runs(emulator: Path) -> dict[None, harness.RunResult]:
    """All cases, with the launch shapes the launchers pick."""
    return {None: harness.run(emulator)}


def _explain(res: harness.RunResult) -> str:
    if res.failures:
        return f"{res.failed} of {res.checks} checks failed:\n" + "\n".join(res.failures[:20])
    return f"exit status {res.returncode} in the check {res.last_case!r}:\n{res.output[-4000:]}"


def test_every_op_matches_the_float64_reference(runs):
    res = runs[None]
    assert res.returncode == 0 and res.failed == 0, _explain(res)
    assert res.suites == EXPECTED, "cases.cpp ran a different number of checks than EXPECTED says"
    assert res.passed == sum(EXPECTED.values())


def test_every_kernel_the_launchers_can_pick_ran(runs):
    assert all(res.checks for res in runs.values()), "a run died before its end (see the other failures)"
    launched: dict[str, int] = {}
    for res in runs.values():
        for name, n in res.kernels.items():
            launched[name] = launched.get(name, 0) + n
    never = sorted(name for name, n in launched.items() if n == 0)
    assert launched, "the binary reported no kernel instantiations"
    assert not never, (
        "kernel instantiations a launcher can pick but no case reached (add a width, dtype or layout "
        "that selects them to tests/ltx/cuda_emu/cases.cpp):\n" + "\n".join(never)
    )


# A kernel with the bug, and what the emulation must say about it.
FAULTS = {
    "fault-misaligned": "misaligned address",  # a 16-byte load 2 bytes off
    "fault-overflow": "heap-buffer-overflow",  # a write one element past the tensor
    "fault-deadlock": "deadlock: no thread of the block can go on",  # __syncthreads in a branch
    "fault-race": "FAIL missing __syncthreads",  # shared memory read before the other threads wrote
}


@pytest.mark.parametrize("fault", FAULTS)
def test_the_emulation_reports_a_broken_kernel(emulator, fault):
    res = harness.run(emulator, [fault], timeout=60)
    assert res.returncode != 0, f"{fault} went unnoticed:\n{res.output[-2000:]}"
    assert FAULTS[fault] in res.output, res.output[-2000:]


def test_a_kernel_construct_the_emulation_cannot_follow_fails_loudly():
    launch = "k<T, W><<<grid, 256, 0, stream>>>(out, x);"
    assert harness.rewrite(launch, "a.cu") == "emu::launch<&k<T, W>>(emu::Config(grid, 256, 0, stream), out, x);"
    with pytest.raises(harness.HarnessError, match="a.cu:2: a kernel launch"):
        harness.rewrite("\nk<Vec<T, 4>><<<g, b>>>(x);", "a.cu")
    with pytest.raises(harness.HarnessError, match="inline PTX `tanh.approx.f32`"):
        harness.rewrite('asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(x));', "a.cu")
