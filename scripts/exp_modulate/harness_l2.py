"""H200 experiment (2026-12-01): is rms_norm_modulate's fast state (27.3-27.5 us) L2 hits on leftover lines of its
own inputs? Its streaming policies (x loaded L1::no_allocate, y stored evict-first) do not displace lines that
other kernels left in the L2 at normal priority. Each op is timed on the same x sets after 100 rms_norm calls on
them (the fast state), without and with a 256 MB read of a scratch buffer before every sample. The flush reads: its
lines enter the L2 clean and at normal priority, and dirty lines of earlier outputs are written back before the
timed interval, not during it (a write flush would leave 50 MB of dirty lines for the timed calls to write back).
Run from the repo root after `hubkernels build`: python scripts/exp_modulate/harness_l2.py"""
import statistics

import torch

import hubkernels
from hubkernels import bench as hb

k = hubkernels.get_local_kernel(".", backend="cuda")
dev = torch.device("cuda")
B, S, D = 2, 6144, 2048
sets = [(torch.randn(B, S, D, device=dev, dtype=torch.bfloat16), 0.1 * torch.randn(B, 1, D, device=dev,
         dtype=torch.bfloat16), 0.1 * torch.randn(B, 1, D, device=dev, dtype=torch.bfloat16)) for _ in range(3)]
scratch = torch.ones(1 << 27, device=dev, dtype=torch.bfloat16)
mod = lambda x, sc, sh: k.rms_norm_modulate(x, sc, sh, None, 1e-6)  # noqa: E731
rms = lambda x, *_: k.rms_norm(x, None, 1e-6)  # noqa: E731


def sample_us(fn, flush):
    times = []
    for i in range(40):
        if flush:
            scratch.sum(dtype=torch.float32)
        torch.cuda._sleep(2_000_000)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for j in range(10):
            fn(*sets[j % 3])
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 100)
    return statistics.median(times)


hb.warm_up_device(dev)
for rnd in range(2):
    for name, fn in (("modulate", mod), ("rms_norm", rms)):
        for _ in range(100):
            rms(sets[_ % 3][0])
        print(f"round {rnd} {name:9} after rms_norm calls: no flush {sample_us(fn, False):.2f} us   "
              f"L2 flushed before each sample {sample_us(fn, True):.2f} us", flush=True)
