// one row per step: a contiguous pass sums squares in 16 fp32 lanes, a second pass scales by the
// inverse RMS (and the weight) and writes the row.
#include "convert.h"

namespace ltx_cpu {
namespace {

template <typename T>
LTX_INLINE void rms_norm_rows(T* out, const T* x, const T* weight, int64_t row_begin,
                              int64_t row_end, int64_t dim, double eps) {
  using Acc = acc_t<T>;
  if constexpr (std::is_same_v<T, Half>) {  // fp16: each row through fp32 (F16C), see convert.h
    Rows f(3, dim);
    if (weight != nullptr) widen(f[2], weight, dim);
    for (int64_t r = row_begin; r < row_end; ++r) {
      widen(f[0], x + r * dim, dim);
      rms_norm_rows<float>(f[1], f[0], weight != nullptr ? f[2] : nullptr, 0, 1, dim, eps);
      narrow(out + r * dim, f[1], dim);
    }
    return;
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* xr = x + r * dim;
    T* yr = out + r * dim;
    const Acc inv = inv_rms(xr, dim, eps);
    if (weight != nullptr) {
      for (int64_t i = 0; i < dim; ++i) yr[i] = store<T>(load(xr[i]) * inv * load(weight[i]));
    } else {
      for (int64_t i = 0; i < dim; ++i) yr[i] = store<T>(load(xr[i]) * inv);
    }
  }
}

}  // namespace

LTX_CPU_MULTIVERSION
void rms_norm(void* out, const void* x, const void* weight, int64_t row_begin, int64_t row_end,
              int64_t dim, double eps, DType dtype) {
  dispatch(dtype, [&](auto tag) LTX_ALWAYS_INLINE {
    using T = decltype(tag);
    rms_norm_rows(static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(weight),
                  row_begin, row_end, dim, eps);
  });
}

}  // namespace ltx_cpu
