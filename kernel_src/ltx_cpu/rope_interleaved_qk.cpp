// one row per step, q row then k row: one contiguous pass over (x[2i], x[2i+1]) pairs with the fp32
// cos/sin rows, fp32 math, one rounding per output; plain loops, vectorised by the compiler for
// the runner's ISA.
#include "vec.h"

namespace ltx_cpu {
namespace {

template <typename T>
LTX_INLINE void rope_row(T* out, const T* x, const float* cos, const float* sin, int64_t dim) {
  using Acc = acc_t<T>;
  for (int64_t i = 0; i < dim; i += 2) {
    const Acc real = load(x[i]);
    const Acc imag = load(x[i + 1]);
    out[i] = store<T>(real * Acc(cos[i]) - imag * Acc(sin[i]));
    out[i + 1] = store<T>(imag * Acc(cos[i + 1]) + real * Acc(sin[i + 1]));
  }
}

template <typename Isa, typename T>
LTX_INLINE void rope_rows(Isa, T* q_out, T* k_out, const T* q, const T* k, const float* cos,
                          const float* sin, int64_t row_begin, int64_t row_end, int64_t dim) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t o = r * dim;
    rope_row(q_out + o, q + o, cos + o, sin + o, dim);
    rope_row(k_out + o, k + o, cos + o, sin + o, dim);
  }
}

}  // namespace

void rope_interleaved_qk(void* q_out, void* k_out, const void* q, const void* k, const float* cos,
                         const float* sin, int64_t row_begin, int64_t row_end, int64_t dim,
                         DType dtype) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    run_on_cpu<T>([&](auto isa) LTX_ALWAYS_INLINE {
      rope_rows(isa, static_cast<T*>(q_out), static_cast<T*>(k_out), static_cast<const T*>(q),
                static_cast<const T*>(k), cos, sin, row_begin, row_end, dim);
    });
  });
}

}  // namespace ltx_cpu
