// modulate_row.h: the AdaLN epilogue of one row, shared by rms_norm_modulate and
// add_rms_norm_modulate: out = x * inv (* weight) * (1 + scale) + shift, one rounding per element.
#pragma once

#include "vec.h"

namespace ltx_cpu::detail {

// inv is the row's 1 / rms (inv_rms); scale and shift point at the row's modulation, weight is
// nullable ([dim]). One pass, 16 elements per step.
template <typename Isa, typename T>
LTX_INLINE void modulate_row(Isa isa, bool stream, T* out, const T* x, const T* scale, const T* shift,
                             const T* weight, acc_t<T> inv, int64_t dim) {
  using Acc = acc_t<T>;
  if (weight != nullptr) {
    map_row(isa, stream, out, dim,
            [inv](auto v, auto w, auto s, auto b) { return v * inv * w * (Acc(1) + s) + b; }, x,
            weight, scale, shift);
  } else {
    map_row(isa, stream, out, dim, [inv](auto v, auto s, auto b) { return v * inv * (Acc(1) + s) + b; },
            x, scale, shift);
  }
}

}  // namespace ltx_cpu::detail
