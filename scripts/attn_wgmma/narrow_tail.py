"""The attention's last round in narrow CTAs against every item whole (shim.cu's variants 0 and 9), on the GPU machine.

python scripts/attn_wgmma/narrow_tail.py sweep   one round of narrow CTAs alone ([1, 6144, 1..2]) and 30-33 heads
python scripts/attn_wgmma/narrow_tail.py alternate [N]   the 2B shape, the two variants alternated N times (4)
Builds the shim as probe.py does (or takes ATTN_PREBUILT=1 with ATTN_SO); times every row bench-style
(hubkernels.author.bench.time_calls: bursts after a device-side sleep, 3 input sets rotated) and with do_bench.
"""

from __future__ import annotations

import sys

import probe  # the shim's build and launcher
import torch

from hubkernels.author.bench import time_calls

SHIPPED, WHOLE = 0, 9
SWEEP = [(1, 6144, 1), (1, 6144, 2), (2, 6144, 32), (2, 6144, 31), (2, 6144, 30), (2, 6144, 33), (2, 6144, 32)]


def time_variant(variant: int, shape: tuple[int, int, int]) -> tuple[str, float, float]:
    """(name, bench-style µs, do_bench µs) of one variant at [B, N, H, 64]."""
    import triton  # the GPU machine's; not on the CPU machine

    b, n, h = shape
    dev = torch.device("cuda")
    run, name = probe.attention(variant)
    sets = [tuple(torch.randn(b, n, h, 64, device=dev, dtype=torch.bfloat16) for _ in range(3)) for _ in range(3)]
    o = torch.empty_like(sets[0][0])
    times = sorted(time_calls(lambda q, k, v: run(q, k, v, o), sets, dev, warmup=5, iters=30))
    ms = triton.testing.do_bench(lambda: run(*sets[0], o), warmup=20, rep=200, return_mode="median")
    return name, times[len(times) // 2], ms * 1e3


def main(argv: list[str]) -> int:
    probe.build(set())
    if argv[:1] == ["sweep"]:
        for shape in SWEEP:
            for variant in (SHIPPED, WHOLE):
                name, bench, db = time_variant(variant, shape)
                print(*shape, variant, name, f"bench-style {bench:.1f} do_bench {db:.1f}", flush=True)
        return 0
    rounds = int(argv[1]) if len(argv) > 1 else 4
    means: dict[int, list[tuple[float, float]]] = {SHIPPED: [], WHOLE: []}
    for rnd in range(rounds):
        for variant in (SHIPPED, WHOLE) if rnd % 2 == 0 else (WHOLE, SHIPPED):  # each goes first half the time
            name, bench, db = time_variant(variant, (2, 6144, 32))
            means[variant].append((bench, db))
            print(rnd, variant, name, f"bench-style {bench:.1f} do_bench {db:.1f}", flush=True)
    for variant, rows in means.items():
        print(
            variant,
            "mean bench-style",
            sum(r[0] for r in rows) / rounds,
            "mean do_bench",
            sum(r[1] for r in rows) / rounds,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
