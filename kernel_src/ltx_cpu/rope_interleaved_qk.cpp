// one row per step, q row then k row: one contiguous pass with the fp32 cos/sin rows, 16 elements
// per step, the pairs (x[2i], x[2i+1]) rotated in registers (vec.h's rope_pairs); fp32 math, one
// rounding per output.
#include "vec.h"

namespace ltx_cpu {
namespace {

template <typename Isa, typename T>
LTX_INLINE void rope_row(Isa isa, T* out, const T* x, const float* cos, const float* sin, int64_t dim) {
  if constexpr (std::is_same_v<T, double>) {
    for (int64_t i = 0; i < dim; i += 2) {
      const double real = x[i], imag = x[i + 1];
      out[i] = real * double(cos[i]) - imag * double(sin[i]);
      out[i + 1] = imag * double(cos[i + 1]) + real * double(sin[i + 1]);
    }
  } else {
    map_row(isa, false, out, dim, [isa](auto v, auto c, auto s) { return rope_pairs(isa, v, c, s); }, x,
            cos, sin);
  }
}

template <typename Isa, typename T>
LTX_INLINE void rope_rows(Isa isa, T* q_out, T* k_out, const T* q, const T* k, const float* cos,
                          const float* sin, int64_t row_begin, int64_t row_end, int64_t dim) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t o = r * dim;
    rope_row(isa, q_out + o, q + o, cos + o, sin + o, dim);
    rope_row(isa, k_out + o, k + o, cos + o, sin + o, dim);
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
