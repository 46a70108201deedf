// one row per step: a pass forms h = x + y (* gate), rounded, in a row that stays in L1 (h's own
// row, or a scratch row copied out with streaming stores) and sums its squares; a second pass
// normalises it and applies (1 + scale) and shift, read through the batch/token strides like the
// gate; 16 elements per step.
#include <vector>

#include "modulate_row.h"

namespace ltx_cpu {
namespace {

using detail::modulate_row;

template <typename Isa, typename T>
LTX_INLINE void add_rms_norm_modulate_rows(Isa isa, T* h, T* out, const T* x, const T* y,
                                           const T* scale, const T* shift, const T* gate,
                                           const T* weight, int64_t row_begin, int64_t row_end,
                                           int64_t tokens, int64_t dim, int64_t mod_batch_stride,
                                           int64_t mod_token_stride, int64_t gate_batch_stride,
                                           int64_t gate_token_stride, double eps, bool stream) {
  std::vector<T> scratch(stream ? dim : 0);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t b = r / tokens, s = r % tokens;
    const T* xr = x + r * dim;
    const T* yr = y + r * dim;
    T* hr = stream ? scratch.data() : h + r * dim;
    // h exactly as gated_residual (or an add) rounds it; the norm reads the rounded values, summed
    // in the same pass.
    acc_t<T> inv;
    if (gate != nullptr) {
      const T* gr = gate + b * gate_batch_stride + s * gate_token_stride;
      inv = map_row_inv_rms(isa, hr, dim, eps, [](auto a, auto c, auto g) { return a + c * g; }, xr,
                            yr, gr);
    } else {
      inv = map_row_inv_rms(isa, hr, dim, eps, [](auto a, auto c) { return a + c; }, xr, yr);
    }
    if (stream) stream_copy(h + r * dim, hr, dim * int64_t(sizeof(T)));
    const int64_t mod = b * mod_batch_stride + s * mod_token_stride;
    modulate_row(isa, stream, out + r * dim, hr, scale + mod, shift + mod, weight, inv, dim);
  }
  if (stream) stream_fence();
}

}  // namespace

void add_rms_norm_modulate(void* h, void* out, const void* x, const void* y, const void* scale,
                           const void* shift, const void* gate, const void* weight,
                           int64_t row_begin, int64_t row_end, int64_t tokens, int64_t dim,
                           int64_t mod_batch_stride, int64_t mod_token_stride,
                           int64_t gate_batch_stride, int64_t gate_token_stride, double eps,
                           DType dtype, bool stream) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    run_on_cpu<T>([&](auto isa) LTX_ALWAYS_INLINE {
      add_rms_norm_modulate_rows(isa, static_cast<T*>(h), static_cast<T*>(out),
                                 static_cast<const T*>(x), static_cast<const T*>(y),
                                 static_cast<const T*>(scale), static_cast<const T*>(shift),
                                 static_cast<const T*>(gate), static_cast<const T*>(weight),
                                 row_begin, row_end, tokens, dim, mod_batch_stride,
                                 mod_token_stride, gate_batch_stride, gate_token_stride, eps,
                                 stream);
    });
  });
}

}  // namespace ltx_cpu
