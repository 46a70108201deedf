// rope.cuh: the LTX-Video interleaved rotation shared by rope_interleaved_qk, qk_rms_norm_rope and
// qk_rms_norm_rope_grid.
#pragma once

#include "vec.cuh"

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

// The attention prologue's output for W columns of q and of k: out_t = rope(v_t * weight_t), one
// rounding each (v: the normalised fp32 values of the two rows; c/s: the columns' cos and sin).
template <class T, int W>
__device__ __forceinline__ void weight_rotate_store(T* const (&out)[2], int64_t off,
                                                    const float (&v)[2][W], const Vec<T, W> (&w)[2],
                                                    const float (&c)[W], const float (&s)[W]) {
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    float n[W], r[W];
#pragma unroll
    for (int i = 0; i < W; ++i) n[i] = v[t][i] * w[t].f(i);
    rotate_pairs(n, c, s, r);
    Vec<T, W> y;
#pragma unroll
    for (int i = 0; i < W; ++i) y.set(i, r[i]);
    y.store(out[t] + off);
  }
}

}  // namespace ltx_cuda::detail
