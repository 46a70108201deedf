// rope.cuh: the LTX-Video interleaved rotation shared by rope_interleaved_qk and qk_rms_norm_rope.
#pragma once

namespace ltx_cuda::detail {

// out = x * cos + rot(x) * sin with rot(x)[2i] = -x[2i+1], rot(x)[2i+1] = x[2i] (diffusers'
// apply_rotary_emb on interleaved pairs), in fp32. The pairs of W columns starting at an even
// column lie inside the chunk, so no data crosses threads.
template <int W>
__device__ __forceinline__ void rotate_pairs(const float (&x)[W], const float (&c)[W],
                                             const float (&s)[W], float (&out)[W]) {
  static_assert(W % 2 == 0, "RoPE chunks hold whole pairs");
#pragma unroll
  for (int i = 0; i < W; i += 2) {
    out[i] = x[i] * c[i] - x[i + 1] * s[i];
    out[i + 1] = x[i + 1] * c[i + 1] + x[i] * s[i + 1];
  }
}

}  // namespace ltx_cuda::detail
