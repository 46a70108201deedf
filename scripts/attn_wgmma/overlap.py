"""Whether the q/k prologue's memory traffic can hide under the attention's compute: the published ops
(`qk_rms_norm_rope_grid`, `attention`) at LTX-Video 2B's shape, one after the other as the attention
processor calls them, against the batch split over two streams, so that batch 1's prologue runs while
batch 0's attention computes.

python scripts/attn_wgmma/overlap.py [BUILD_DIR]   (on the GPU machine; BUILD_DIR: `hubkernels build` output)
Times each schedule as `hubkernels bench` does (bursts after a device-side sleep, inputs rotated past the
L2) and checks that every schedule returns the sequential one's output bit for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE.parent.parent / "benchmarks"))
from benchmark_ops import ltx_positions, rope_freqs  # noqa: E402

from hubkernels.author.bench import time_calls, warm_up_device  # noqa: E402
from hubkernels.fetch.load import get_local_kernel  # noqa: E402

B, S, HID = 2, 6144, 2048


def main(argv: list[str]) -> int:
    kernel = get_local_kernel(argv[0] if argv else "build")
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)

    def inputs():  # type: ignore[no-untyped-def]
        q, k, v = (torch.randn(B, S, HID, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(3))
        wq, wk = (1 + 0.1 * torch.randn(HID, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(2))
        return q, k, v, wq, wk, ltx_positions(B, S, dev), rope_freqs(HID, 10000.0, dev)

    def heads(x):  # type: ignore[no-untyped-def]
        return x.view(*x.shape[:2], HID // 64, 64)

    def seq(q, k, v, wq, wk, pos, freqs):  # type: ignore[no-untyped-def]
        qn, kn = kernel.qk_rms_norm_rope_grid(q, k, wq, wk, pos, freqs, 1e-5)
        return kernel.attention(heads(qn), heads(kn), heads(v))

    def halves(q, k, v, wq, wk, pos, freqs):  # type: ignore[no-untyped-def]
        """The same on one stream, batch by batch: what splitting the launches costs by itself."""
        outs = []
        for b in range(B):
            sl = slice(b, b + 1)
            qn, kn = kernel.qk_rms_norm_rope_grid(q[sl], k[sl], wq, wk, pos[sl], freqs, 1e-5)
            outs.append(kernel.attention(heads(qn), heads(kn), heads(v[sl])))
        return torch.cat(outs)

    high, normal = torch.cuda.Stream(priority=-1), torch.cuda.Stream(priority=0)

    def streams(q, k, v, wq, wk, pos, freqs, attn_on_side=False, side=high):  # type: ignore[no-untyped-def]
        """high: the side's blocks take an SM as soon as one frees; normal: after main's queued blocks."""
        main = torch.cuda.current_stream()
        qn0, kn0 = kernel.qk_rms_norm_rope_grid(q[:1], k[:1], wq, wk, pos[:1], freqs, 1e-5)
        side.wait_stream(main)
        o0 = kernel.attention(heads(qn0), heads(kn0), heads(v[:1]))
        with torch.cuda.stream(side):
            qn1, kn1 = kernel.qk_rms_norm_rope_grid(q[1:], k[1:], wq, wk, pos[1:], freqs, 1e-5)
            if attn_on_side:
                o1 = kernel.attention(heads(qn1), heads(kn1), heads(v[1:]))
        if not attn_on_side:
            main.wait_stream(side)
            o1 = kernel.attention(heads(qn1), heads(kn1), heads(v[1:]))
        main.wait_stream(side)
        for t in (qn1, kn1, o1):
            t.record_stream(main)
        return torch.cat([o0, o1])

    def streams_side(*a):  # type: ignore[no-untyped-def]
        return streams(*a, attn_on_side=True)

    def streams_side_normal(*a):  # type: ignore[no-untyped-def]
        return streams(*a, attn_on_side=True, side=normal)

    def prologue(q, k, v, wq, wk, pos, freqs):  # type: ignore[no-untyped-def]
        return kernel.qk_rms_norm_rope_grid(q, k, wq, wk, pos, freqs, 1e-5)

    def attention(q, k, v, wq, wk, pos, freqs):  # type: ignore[no-untyped-def]
        return kernel.attention(heads(q), heads(k), heads(v))

    sets = [inputs() for _ in range(3)]
    want = seq(*sets[0])
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    for rnd in range(3):
        for name, fn in [("prologue", prologue), ("attention", attention), ("sequential", seq),
                         ("batch halves, one stream", halves), ("two streams, attention(1) on main", streams),
                         ("two streams, attention(1) on side", streams_side),
                         ("the same, side at normal priority", streams_side_normal)]:  # fmt: skip
            if name not in ("prologue", "attention"):
                got = fn(*sets[0])
                torch.cuda.synchronize()
                same = bool(torch.equal(got.reshape(want.shape), want))
            else:
                same = None
            warm_up_device(dev)
            times = sorted(time_calls(fn, sets, dev, 10, 50))
            print(f"round {rnd + 1} {name:36} {times[len(times) // 2]:8.1f} us  same as sequential: {same}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
