// one row per step: a contiguous pass sums squares in 16 fp32 lanes, a second pass normalises and
// applies (1 + scale) and shift, read through the batch/token strides (token stride 0 = one row of
// scale/shift per batch, reused by every token).
#include "modulate_row.h"

namespace ltx_cpu {
namespace {

using detail::modulate_row;

template <typename T>
LTX_INLINE void rms_norm_modulate_rows(T* out, const T* x, const T* scale, const T* shift,
                                       const T* weight, int64_t row_begin, int64_t row_end,
                                       int64_t tokens, int64_t dim, int64_t batch_stride,
                                       int64_t token_stride, double eps) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* xr = x + r * dim;
    T* yr = out + r * dim;
    const int64_t mod = (r / tokens) * batch_stride + (r % tokens) * token_stride;
    modulate_row(yr, xr, scale + mod, shift + mod, weight, inv_rms(xr, dim, eps), dim);
  }
}

}  // namespace

LTX_CPU_MULTIVERSION
void rms_norm_modulate(void* out, const void* x, const void* scale, const void* shift,
                       const void* weight, int64_t row_begin, int64_t row_end, int64_t tokens,
                       int64_t dim, int64_t mod_batch_stride, int64_t mod_token_stride, double eps,
                       DType dtype) {
  dispatch(dtype, [&](auto tag) LTX_ALWAYS_INLINE {
    using T = decltype(tag);
    rms_norm_modulate_rows(static_cast<T*>(out), static_cast<const T*>(x),
                           static_cast<const T*>(scale), static_cast<const T*>(shift),
                           static_cast<const T*>(weight), row_begin, row_end, tokens, dim,
                           mod_batch_stride, mod_token_stride, eps);
  });
}

}  // namespace ltx_cpu
