"""The shipped attention and flash-attn-4 side by side under Nsight Compute, on LTX-Video's self-attention shape.

ncu --nvtx --nvtx-include "peer/" --clock-control none --set full python scripts/attn_wgmma/profile_peer.py
(on the GPU machine, flash-attn-4 installed): one launch of each inside the NVTX range "peer", after a warm-up
launch of each outside it (flash-attn-4 compiles its kernel on the first call).
Per instruction: add `--import-source no -o $OUT/peer`, then `ncu -i $OUT/peer.ncu-rep --page source --csv
--print-source sass -k regex:attention_kernel` (and `-k regex:flash`) into two CSVs for ncu_sass.py.
"""

from __future__ import annotations

import probe  # the probe's build of the shipped kernel, its launcher and its inputs
import torch
from flash_attn.cute import flash_attn_func


def main() -> None:
    probe.build(set())
    run, _ = probe.attention(0)
    q, k, v = probe.sets(torch, torch.device("cuda"), 3)["gaussian"]
    o = torch.empty_like(q)
    for _ in range(2):
        run(q, k, v, o)
        flash_attn_func(q, k, v)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("peer")
    run(q, k, v, o)
    flash_attn_func(q, k, v)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    main()
