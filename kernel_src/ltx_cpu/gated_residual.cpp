// one row per step, one contiguous pass: out = x + y * gate, the gate row read through the
// batch/token strides (token stride 0 = one gate row per batch, reused by every token).
#include "convert.h"

namespace ltx_cpu {
namespace {

template <typename T>
LTX_INLINE void gated_residual_rows(T* out, const T* x, const T* y, const T* gate,
                                    int64_t row_begin, int64_t row_end, int64_t tokens,
                                    int64_t dim, int64_t batch_stride, int64_t token_stride) {
  if constexpr (std::is_same_v<T, Half>) {  // fp16: each row through fp32 (F16C), see convert.h
    Rows f(4, dim);
    for (int64_t r = row_begin; r < row_end; ++r) {
      widen(f[0], x + r * dim, dim);
      widen(f[1], y + r * dim, dim);
      widen(f[2], gate + (r / tokens) * batch_stride + (r % tokens) * token_stride, dim);
      gated_residual_rows<float>(f[3], f[0], f[1], f[2], 0, 1, 1, dim, 0, 0);
      narrow(out + r * dim, f[3], dim);
    }
    return;
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* xr = x + r * dim;
    const T* yr = y + r * dim;
    const T* gr = gate + (r / tokens) * batch_stride + (r % tokens) * token_stride;
    T* outr = out + r * dim;
    for (int64_t i = 0; i < dim; ++i) outr[i] = store<T>(load(xr[i]) + load(yr[i]) * load(gr[i]));
  }
}

}  // namespace

LTX_CPU_MULTIVERSION
void gated_residual(void* out, const void* x, const void* y, const void* gate, int64_t row_begin,
                    int64_t row_end, int64_t tokens, int64_t dim, int64_t gate_batch_stride,
                    int64_t gate_token_stride, DType dtype) {
  dispatch(dtype, [&](auto tag) LTX_ALWAYS_INLINE {
    using T = decltype(tag);
    gated_residual_rows(static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(y),
                        static_cast<const T*>(gate), row_begin, row_end, tokens, dim,
                        gate_batch_stride, gate_token_stride);
  });
}

}  // namespace ltx_cpu
