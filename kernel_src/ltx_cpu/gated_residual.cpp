// one row per step, one contiguous pass, 16 elements per step: out = x + y * gate, the gate row read
// through the batch/token strides (token stride 0 = one gate row per batch, reused by every token).
#include "vec.h"

namespace ltx_cpu {
namespace {

template <typename Isa, typename T>
LTX_INLINE void gated_residual_rows(Isa isa, T* out, const T* x, const T* y, const T* gate,
                                    int64_t row_begin, int64_t row_end, int64_t tokens,
                                    int64_t dim, int64_t batch_stride, int64_t token_stride,
                                    bool stream) {
  int64_t b = row_begin / tokens, s = row_begin % tokens;  // divided once, not per row
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* gr = gate + b * batch_stride + s * token_stride;
    map_row(isa, stream, out + r * dim, dim, [](auto a, auto c, auto g) { return a + c * g; },
            x + r * dim, y + r * dim, gr);
    if (++s == tokens) s = 0, ++b;
  }
  if (stream) stream_fence();
}

}  // namespace

void gated_residual(void* out, const void* x, const void* y, const void* gate, int64_t row_begin,
                    int64_t row_end, int64_t tokens, int64_t dim, int64_t gate_batch_stride,
                    int64_t gate_token_stride, DType dtype, bool stream) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    run_on_cpu<T>([&](auto isa) LTX_ALWAYS_INLINE {
      gated_residual_rows(isa, static_cast<T*>(out), static_cast<const T*>(x),
                          static_cast<const T*>(y), static_cast<const T*>(gate), row_begin,
                          row_end, tokens, dim, gate_batch_stride, gate_token_stride, stream);
    });
  });
}

}  // namespace ltx_cpu
