"""The SM clock right after the work (on the GPU machine): ltx-kernels' attention, flash-attn-4 (where installed)
and cuDNN at the 2B shape, in bursts after an idle sleep and back to back, each followed by clocks.cu's kernel,
which spins 100,000 cycles on every SM and reads %clock64 against %globaltimer. Then each for a sustained second
while nvidia-smi samples the board's power and clock every 20 ms: the energy a call takes, which decides the
clock a power-limited GPU holds.

python scripts/attn_wgmma/clocks.py   (builds the probe's shim and clocks.cu with nvcc first)
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import time
from datetime import datetime
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
    """Back-to-back calls for about `seconds`, with nvidia-smi sampling power and SM clock meanwhile: the time a
    call takes, the mean power and clock over the calls' window, and the energy per call."""
    query = "--query-gpu=timestamp,power.draw.instant,clocks.sm"
    smi = subprocess.Popen(["nvidia-smi", query, "--format=csv,noheader,nounits", "-lms", "20"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    time.sleep(0.5)  # nvidia-smi's own start
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
    t1 = time.time()
    smi.terminate()
    out = smi.communicate()[0]
    watts, clocks = [], []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            at = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            w, f = float(parts[1]), float(parts[2])
        except (ValueError, IndexError):
            continue
        if t0 <= at <= t1:
            watts.append(w)
            clocks.append(f)
    us = start.elapsed_time(end) * 1e3 / calls
    if not watts:
        return f"{us:.1f} us/call; no power samples ({out.strip()[-200:]!r})"
    w, f = sum(watts) / len(watts), sum(clocks) / len(clocks)
    return f"{us:.1f} us/call, {w:.0f} W, {f:.0f} MHz, {w * us * 1e-6:.3f} J/call ({len(watts)} samples)"


def main() -> int:
    import triton  # the GPU machine's; not on the CPU machine

    probe.build(set())
    mhz = clock_reader()
    dev = torch.device("cuda")
    sets = [tuple(torch.randn(2, 6144, 32, 64, device=dev, dtype=torch.bfloat16) for _ in range(3)) for _ in range(3)]
    o = torch.empty_like(sets[0][0])
    ours, _ = probe.attention(0)
    impls = {"ours": lambda q, k, v: ours(q, k, v, o)}
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
