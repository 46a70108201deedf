// attention.cu: the shipped configuration of attention.cuh. Three consumer warpgroups of 64 queries (192 per
// CTA), K/V tiles of 128 tokens, three stages, Q K^T(j) overlapped with P V(j - 1) and the consumers taking
// turns to issue them: the fastest the probe (scripts/attn_wgmma/probe.py) measured on the H200; its figures
// against cuDNN are in BENCHMARKS.md §8.
#include "attention.cuh"
#include "ltx_cuda_sm90.h"

namespace ltx_cuda_sm90 {

const char* attention(void* out, const void* q, const void* k, const void* v, void* v16, int64_t batch,
                      int64_t tokens, int64_t heads, float scale, cudaStream_t stream) {
  return launch_attention<3, 128, 3, Schedule::kOverlapOrdered>(out, q, k, v, v16, batch, tokens, heads, scale,
                                                                stream);
}

}  // namespace ltx_cuda_sm90
