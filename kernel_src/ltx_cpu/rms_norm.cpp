// one row per step: a pass sums squares in 4 x 16 fp32 lanes, a second pass scales by the inverse
// RMS (and the weight) and writes the row, 16 elements per step.
#include "vec.h"

namespace ltx_cpu {
namespace {

template <typename Isa, typename T>
LTX_INLINE void rms_norm_rows(Isa isa, T* out, const T* x, const T* weight, int64_t row_begin,
                              int64_t row_end, int64_t dim, double eps, bool stream) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* xr = x + r * dim;
    const acc_t<T> inv = inv_rms(isa, xr, dim, eps);
    if (weight != nullptr) {
      map_row(isa, stream, out + r * dim, dim, [inv](auto v, auto w) { return v * inv * w; }, xr, weight);
    } else {
      map_row(isa, stream, out + r * dim, dim, [inv](auto v) { return v * inv; }, xr);
    }
  }
  if (stream) stream_fence();
}

}  // namespace

void rms_norm(void* out, const void* x, const void* weight, int64_t row_begin, int64_t row_end,
              int64_t dim, double eps, DType dtype, bool stream) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    run_on_cpu<T>([&](auto isa) LTX_ALWAYS_INLINE {
      rms_norm_rows(isa, static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(weight),
                    row_begin, row_end, dim, eps, stream);
    });
  });
}

}  // namespace ltx_cpu
