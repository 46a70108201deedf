"""H200 experiment (2026-12-01): the same rms_norm_modulate / rms_norm timings (hubkernels.bench.time_calls)
after each step `hubkernels bench` takes (float64 reference alive, first output alive, copy bandwidth, the
bench itself, empty_cache). Run from the repo root after `hubkernels build`: python scripts/exp_modulate/harness_bisect.py"""
import statistics
import torch
import hubkernels
from hubkernels import bench as hb

k = hubkernels.get_local_kernel(".", backend="cuda")
dev = torch.device("cuda"); B, S, D = 2, 6144, 2048
gen = torch.Generator(device=dev).manual_seed(1)
def rnd(*s): return torch.randn(*s, device=dev, dtype=torch.bfloat16, generator=gen)
mod_sets = [(rnd(B, S, D), 0.1 * rnd(B, 1, D), 0.1 * rnd(B, 1, D)) for _ in range(3)]
rms_sets = [(rnd(B, S, D),) for _ in range(3)]
mod = lambda x, sc, sh: k.rms_norm_modulate(x, sc, sh, None, 1e-6)
rms = lambda x: k.rms_norm(x, None, 1e-6)
def show(tag):
    a = statistics.median(hb.time_calls(mod, mod_sets, dev, 10, 50))
    b = statistics.median(hb.time_calls(rms, rms_sets, dev, 10, 50))
    print(f"{tag:34} modulate {a:6.2f}  rms_norm {b:6.2f}", flush=True)
hb.warm_up_device(dev)
show("A plain")
ref = hb._reference("rms_norm_modulate", mod_sets[0]); show("B float64 reference alive")
out = mod(*mod_sets[0]); show("C first output alive")
hb.copy_bandwidth(dev, 1 << 30, 10, 50); show("D after copy_bandwidth")
rep = hb.run(k, ops=["rms_norm_modulate", "rms_norm"], compile_peers=False)
for r in rep.rows: print("   bench.run:", r.op, r.impl, r.median_us)
show("E after bench.run")
del ref, out; torch.cuda.empty_cache(); show("F after empty_cache")
