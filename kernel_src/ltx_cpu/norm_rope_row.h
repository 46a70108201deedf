// norm_rope_row.h: one row of the attention prologue (RMSNorm with weight, then interleaved RoPE
// with fp32 cos/sin), shared by qk_rms_norm_rope (tables read from memory) and
// qk_rms_norm_rope_grid (tables computed per row).
#pragma once

#include "vec.h"

namespace ltx_cpu::detail {

// A pass summing squares (vec.h), then a pass that normalises, weights and rotates 16 elements per
// step, the pairs (x[2i], x[2i+1]) in registers; no rounding between the norm and the rotation.
template <typename Isa, typename T>
LTX_INLINE void norm_rope_row(Isa isa, T* out, const T* x, const T* weight, const float* cos,
                              const float* sin, int64_t dim, double eps) {
  const acc_t<T> inv = inv_rms(isa, x, dim, eps);
  if constexpr (std::is_same_v<T, double>) {
    for (int64_t i = 0; i < dim; i += 2) {
      const double real = x[i] * inv * weight[i];
      const double imag = x[i + 1] * inv * weight[i + 1];
      out[i] = real * double(cos[i]) - imag * double(sin[i]);
      out[i + 1] = imag * double(cos[i + 1]) + real * double(sin[i + 1]);
    }
  } else {
    map_row(
        isa, false, out, dim,
        [isa, inv](auto v, auto w, auto c, auto s) {
          const auto y = v * inv * w;
          return rope_pairs(isa, y, c, s);
        },
        x, weight, cos, sin);
  }
}

}  // namespace ltx_cpu::detail
