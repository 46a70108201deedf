// norm_rope_row.h: one row of the attention prologue (RMSNorm with weight, then interleaved RoPE
// with fp32 cos/sin), shared by qk_rms_norm_rope (tables read from memory) and
// qk_rms_norm_rope_grid (tables computed per row).
#pragma once

#include "vec.h"

namespace ltx_cpu::detail {

// A pass summing squares (vec.h), then a plain-loop pass over (x[2i], x[2i+1]) pairs that normalises, weights and
// rotates; no rounding between the norm and the rotation.
template <typename Isa, typename T>
LTX_INLINE void norm_rope_row(Isa isa, T* out, const T* x, const T* weight, const float* cos,
                              const float* sin, int64_t dim, double eps) {
  using Acc = acc_t<T>;
  const Acc inv = inv_rms(isa, x, dim, eps);
  for (int64_t i = 0; i < dim; i += 2) {
    const Acc real = load(x[i]) * inv * load(weight[i]);
    const Acc imag = load(x[i + 1]) * inv * load(weight[i + 1]);
    out[i] = store<T>(real * Acc(cos[i]) - imag * Acc(sin[i]));
    out[i + 1] = store<T>(imag * Acc(cos[i + 1]) + real * Acc(sin[i + 1]));
  }
}

}  // namespace ltx_cpu::detail
