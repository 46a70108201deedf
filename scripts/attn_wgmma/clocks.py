"""The SM clock right after the work (on the GPU machine): ltx-kernels' attention, flash-attn-4 (where installed)
and cuDNN at the 2B shape. First each as `hubkernels bench` times it (its warm-up and timing loop; the shipped
op from build/ where a CUDA variant is there), in the bench's order and the reverse, while nvidia-smi samples the
board's power and SM clock every 20 ms. Then in bursts after an idle sleep and back to back, each followed by
clocks.cu's kernel, which spins 100,000 cycles on every SM and reads %clock64 against %globaltimer; and each for a
sustained second under nvidia-smi: the energy a call takes, which decides the clock a power-limited GPU holds.

python scripts/attn_wgmma/clocks.py   (builds the probe's shim and clocks.cu with nvcc first)
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import time
from pathlib import Path

import probe  # the shim's build, its launcher and the inputs
import torch
from torch.nn.attention import SDPBackend

CLOCKS_SO = Path("/tmp/attn_clocks.so")


def clock_reader():  # type: ignore[no-untyped-def]
    """mhz() -> the median SM clock over the GPU's SMs, measured now on the current stream."""
    src = Path(__file__).with_name("clocks.cu")
    cmd = ["nvcc", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-shared", "-Xcompiler", "-fPIC"]
    subprocess.run([*cmd, "-o", str(CLOCKS_SO), str(src)], check=True)
    lib = ctypes.CDLL(str(CLOCKS_SO))
    lib.clk_launch.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p]
    buf = torch.zeros(264, dtype=torch.int64, device="cuda")

    def mhz() -> float:
        lib.clk_launch(buf.data_ptr(), 100_000, torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        b = buf.view(132, 2).double()
        return float((b[:, 0] / b[:, 1]).median() * 1e3)

    return mhz


def sustained(fn, sets, seconds: float = 1.0) -> str:  # type: ignore[no-untyped-def]
    """Back-to-back calls for about `seconds`: the time a call takes, the mean power and clock over the calls'
    window, and the energy per call."""

    def run():  # type: ignore[no-untyped-def]
        calls, t0 = 0, time.time()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        while time.time() - t0 < seconds:
            for i in range(20):
                fn(*sets[i % 3])
            calls += 20
            torch.cuda.synchronize()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1e3 / calls

    us, w, f = probe.sampled(run)
    energy = "" if w is None else f", {w * us * 1e-6:.3f} J/call"
    return f"{us:.1f} us/call{probe.power(w, f)}{energy}"


def bench_style(fn, sets) -> str:  # type: ignore[no-untyped-def]
    """As `hubkernels bench` times a candidate (its device warm-up, then 50 samples after 10 warm-up calls): the
    median, and the mean power and clock while the samples ran (the warm-up's copies outside that window)."""
    from hubkernels.author.bench import warm_up_device

    warm_up_device(torch.device("cuda"))
    us, w, f = probe.sampled(lambda: probe.bench_style(torch, fn, sets, warmup=10, iters=50))
    return f"{us:.1f} us/call{probe.power(w, f)}"


def shipped_op():  # type: ignore[no-untyped-def]
    """The built package's attention op (build/*-cu130-*, as `hubkernels build` left it), or None."""
    import importlib.util

    root = Path(__file__).resolve().parents[2] / "build"
    variant = next(iter(sorted(root.glob("torch-stable-abi*-cu1*-x86_64-linux"))), None)
    if variant is None:
        return None
    spec = importlib.util.spec_from_file_location(
        "ltx_kernels", variant / "__init__.py", submodule_search_locations=[str(variant)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["ltx_kernels"] = module
    spec.loader.exec_module(module)
    return module.attention


def main() -> int:
    import triton  # the GPU machine's; not on the CPU machine

    probe.build(set())
    mhz = clock_reader()
    dev = torch.device("cuda")
    sets = [tuple(torch.randn(2, 6144, 32, 64, device=dev, dtype=torch.bfloat16) for _ in range(3)) for _ in range(3)]
    o = torch.empty_like(sets[0][0])
    ours, _ = probe.attention(0)
    impls = {"ours": lambda q, k, v: ours(q, k, v, o)}
    op = shipped_op()
    if op is not None:  # the bench's own candidate: the built op, a fresh output each call
        impls["op"] = op
    try:
        from flash_attn.cute import flash_attn_func

        impls["fa4"] = lambda q, k, v: flash_attn_func(q, k, v)
    except ImportError as e:
        print("no flash-attn-4:", e)
    impls["cudnn"] = lambda q, k, v: probe.sdpa(torch, q, k, v, SDPBackend.CUDNN_ATTENTION)
    for fn in impls.values():  # compile and warm every candidate first
        for i in range(5):
            fn(*sets[i % 3])
    torch.cuda.synchronize()
    print("idle", f"{mhz():.0f} MHz")
    # the bench's order (ours, its eager peer, flash-attn-4), then the reverse
    order = [n for n in ("op", "cudnn", "fa4", "ours") if n in impls]
    for names in (order, order[::-1]):
        for candidate in names:
            print("bench-style", candidate, bench_style(impls[candidate], sets), flush=True)
    for rnd in range(2):
        for name, fn in impls.items():
            for burst in (10, 50):
                torch.cuda._sleep(4_000_000)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for i in range(burst):
                    fn(*sets[i % 3])
                end.record()
                clock = mhz()
                us = start.elapsed_time(end) * 1e3 / burst
                print(rnd, name, f"burst {burst}: {us:.1f} us/call, then {clock:.0f} MHz", flush=True)
            ms = triton.testing.do_bench(lambda: fn(*sets[0]), warmup=20, rep=300, return_mode="median")
            print(rnd, name, f"do_bench {ms * 1e3:.1f} us, then {mhz():.0f} MHz", flush=True)
            print(rnd, name, "sustained 1 s:", sustained(fn, sets), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
