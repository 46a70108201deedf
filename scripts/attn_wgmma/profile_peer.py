"""The shipped attention and flash-attn-4 side by side under Nsight Compute, on LTX-Video's self-attention shape.

ncu --nvtx --nvtx-include "peer/" --clock-control none --set full python scripts/attn_wgmma/profile_peer.py
(on the GPU machine, flash-attn-4 installed): one launch of each inside the NVTX range "peer", after a warm-up
launch of each outside it (flash-attn-4 compiles its kernel on the first call).
"""

from __future__ import annotations

import ctypes

import probe  # the probe's build of the shipped kernel and its inputs
import torch
from flash_attn.cute import flash_attn_func


def main() -> None:
    probe.build(set())
    lib = ctypes.CDLL(str(probe.SO))
    lib.ltx_attn_fwd.argtypes = (
        [ctypes.c_void_p] * 4 + [ctypes.c_int] * 3 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    )
    q, k, v = probe.sets(torch, torch.device("cuda"), 3)["gaussian"]
    o = torch.empty_like(q)
    b, n, h, d = q.shape

    def ours() -> None:
        stream = torch.cuda.current_stream().cuda_stream
        if rc := lib.ltx_attn_fwd(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), b, n, h, d**-0.5, stream, 0):
            raise RuntimeError(f"ltx_attn_fwd returned {rc}")

    for _ in range(2):
        ours()
        flash_attn_func(q, k, v)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("peer")
    ours()
    flash_attn_func(q, k, v)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    main()
