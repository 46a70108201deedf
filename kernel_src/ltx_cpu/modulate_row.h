// modulate_row.h: the AdaLN epilogue of one row, shared by rms_norm_modulate and
// add_rms_norm_modulate: out = x * inv (* weight) * (1 + scale) + shift, one rounding per element.
#pragma once

#include "convert.h"

namespace ltx_cpu::detail {

// inv is the row's 1 / rms (inv_rms); scale and shift point at the row's modulation, weight is
// nullable ([dim]). One contiguous pass, force-inlined into each ISA clone of the caller.
template <typename T>
LTX_INLINE void modulate_row(T* out, const T* x, const T* scale, const T* shift, const T* weight,
                             acc_t<T> inv, int64_t dim) {
  using Acc = acc_t<T>;
  if (weight != nullptr) {
    for (int64_t i = 0; i < dim; ++i) {
      const Acc n = load(x[i]) * inv * load(weight[i]);
      out[i] = store<T>(n * (Acc(1) + load(scale[i])) + load(shift[i]));
    }
  } else {
    for (int64_t i = 0; i < dim; ++i) {
      const Acc n = load(x[i]) * inv;
      out[i] = store<T>(n * (Acc(1) + load(scale[i])) + load(shift[i]));
    }
  }
}

}  // namespace ltx_cpu::detail
