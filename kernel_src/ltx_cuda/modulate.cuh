// modulate.cuh: AdaLN's modulation, out = n (* weight) * (1 + scale) + shift with one rounding: the
// epilogue half shared by rms_norm_modulate and add_rms_norm_modulate. The [B,1,D] scale/shift rows
// are L1/L2 hits, loaded after the reduction with load_ordered (row_norm.cuh says why).
#pragma once

#include <type_traits>

#include "row_norm.cuh"
#include "vec.cuh"

namespace ltx_cuda::detail {

template <class T, bool kWeight>
struct Modulation {
  // Row r = (b, s) of scale/shift at b * batch_stride + s * token_stride, from column col0.
  struct Ptrs {
    const T* scale;
    const T* shift;
    const T* weight;  // used only when kWeight
  };
  __device__ static Ptrs at(const T* scale, const T* shift, const T* weight, int64_t b, int64_t s,
                            int64_t batch_stride, int64_t token_stride, int64_t col0) {
    const int64_t m = b * batch_stride + s * token_stride + col0;
    return {scale + m, shift + m, weight + col0};
  }

  template <int W>
  struct Aux {
    Vec<T, W> scale, shift, w;
  };
  template <int W>
  __device__ static void load(const Ptrs& p, int64_t off, Aux<W>& a) {
    a.scale.load_ordered(p.scale + off);
    a.shift.load_ordered(p.shift + off);
    if constexpr (kWeight) a.w.load_ordered(p.weight + off);
  }

  // Writes W modulated values of v (normalised, fp32) to out (kStream: evict-first).
  template <int W, bool kStream = false>
  __device__ static void store(T* out, const float (&v)[1][W], const Aux<W>& a) {
    Vec<T, W> y;
#pragma unroll
    for (int i = 0; i < W; ++i) {
      float n = v[0][i];
      if constexpr (kWeight) n *= a.w.f(i);
      y.set(i, fmaf(n, 1.0f + a.scale.f(i), a.shift.f(i)));
    }
    if constexpr (kStream)
      y.store_stream(out);
    else
      y.store(out);
  }
};

// LTX-Video's AdaLN call: bf16 rows of 2048 on the wide path, one [B,1,D] scale/shift row per batch
// (token stride 0), no weight. rms_norm_modulate runs its packed kernel there, and
// add_rms_norm_modulate the generic kernel's 128-thread shape, which sums in the same order, so the
// fused op equals gated_residual + rms_norm_modulate bit for bit.
template <class T, bool kWeight>
bool ltx_adaln_shape(int64_t dim, int64_t token_stride, bool wide) {
  return std::is_same_v<T, __nv_bfloat16> && !kWeight && wide && dim == 2048 && token_stride == 0;
}

}  // namespace ltx_cuda::detail
