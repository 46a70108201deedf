// one row per step, q row then k row: a contiguous pass sums squares in 16 fp32 lanes, a second pass
// over (x[2i], x[2i+1]) pairs normalises, weights and rotates with the fp32 cos/sin row; no
// rounding between the norm and the rotation.
#include "norm_rope_row.h"

namespace ltx_cpu {
namespace {

using detail::norm_rope_row;

template <typename Isa, typename T>
LTX_INLINE void qk_rms_norm_rope_rows(Isa isa, T* q_out, T* k_out, const T* q, const T* k,
                                      const T* weight_q, const T* weight_k, const float* cos,
                                      const float* sin, int64_t row_begin, int64_t row_end,
                                      int64_t dim, double eps) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t o = r * dim;
    norm_rope_row(isa, q_out + o, q + o, weight_q, cos + o, sin + o, dim, eps);
    norm_rope_row(isa, k_out + o, k + o, weight_k, cos + o, sin + o, dim, eps);
  }
}

}  // namespace

void qk_rms_norm_rope(void* q_out, void* k_out, const void* q, const void* k,
                      const void* weight_q, const void* weight_k, const float* cos,
                      const float* sin, int64_t row_begin, int64_t row_end, int64_t dim,
                      double eps, DType dtype) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    run_on_cpu<T>([&](auto isa) LTX_ALWAYS_INLINE {
      qk_rms_norm_rope_rows(isa, static_cast<T*>(q_out), static_cast<T*>(k_out),
                            static_cast<const T*>(q), static_cast<const T*>(k),
                            static_cast<const T*>(weight_q), static_cast<const T*>(weight_k), cos,
                            sin, row_begin, row_end, dim, eps);
    });
  });
}

}  // namespace ltx_cpu
