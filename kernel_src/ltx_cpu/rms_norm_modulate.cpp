// one row per step: a pass sums squares in 4 x 16 fp32 lanes, a second pass normalises and applies
// (1 + scale) and shift, read through the batch/token strides (token stride 0 = one row of
// scale/shift per batch, reused by every token), 16 elements per step.
#include "modulate_row.h"

namespace ltx_cpu {
namespace {

using detail::modulate_row;

template <typename Isa, typename T>
LTX_INLINE void rms_norm_modulate_rows(Isa isa, T* out, const T* x, const T* scale, const T* shift,
                                       const T* weight, int64_t row_begin, int64_t row_end,
                                       int64_t tokens, int64_t dim, int64_t batch_stride,
                                       int64_t token_stride, double eps, bool stream) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* xr = x + r * dim;
    const int64_t mod = (r / tokens) * batch_stride + (r % tokens) * token_stride;
    modulate_row(isa, stream, out + r * dim, xr, scale + mod, shift + mod, weight,
                 inv_rms(isa, xr, dim, eps), dim);
  }
  if (stream) stream_fence();
}

}  // namespace

void rms_norm_modulate(void* out, const void* x, const void* scale, const void* shift,
                       const void* weight, int64_t row_begin, int64_t row_end, int64_t tokens,
                       int64_t dim, int64_t mod_batch_stride, int64_t mod_token_stride, double eps,
                       DType dtype, bool stream) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    run_on_cpu<T>([&](auto isa) LTX_ALWAYS_INLINE {
      rms_norm_modulate_rows(isa, static_cast<T*>(out), static_cast<const T*>(x),
                             static_cast<const T*>(scale), static_cast<const T*>(shift),
                             static_cast<const T*>(weight), row_begin, row_end, tokens, dim,
                             mod_batch_stride, mod_token_stride, eps, stream);
    });
  });
}

}  // namespace ltx_cpu
