// rms_norm: one row at a time. A contiguous pass sums x^2 in 16 independent fp32 lanes (so the
// compiler vectorises it without reassociating), a second pass over the same row (now in L1)
// scales by the inverse RMS, and the weight, and writes.
#include <cmath>

#include "convert.h"

namespace my_kernels_cpu {
namespace {

constexpr int kLanes = 16;

template <class T>
MY_KERNELS_INLINE void rms_norm_rows(T* out, const T* x, const T* weight, int64_t row_begin,
                                     int64_t row_end, int64_t dim, float eps) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* xr = x + r * dim;
    T* yr = out + r * dim;
    float lane[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= dim; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        const float v = to_float(xr[i + j]);
        lane[j] += v * v;
      }
    }
    float sum = 0.0f;
    for (; i < dim; ++i) {
      const float v = to_float(xr[i]);
      sum += v * v;
    }
    for (int j = 0; j < kLanes; ++j) sum += lane[j];
    const float inv_rms = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    if (weight != nullptr) {
      for (int64_t k = 0; k < dim; ++k)
        yr[k] = from_float<T>(to_float(xr[k]) * inv_rms * to_float(weight[k]));
    } else {
      for (int64_t k = 0; k < dim; ++k) yr[k] = from_float<T>(to_float(xr[k]) * inv_rms);
    }
  }
}

}  // namespace

MY_KERNELS_MULTIVERSION
void rms_norm(void* out, const void* x, const void* weight, int64_t row_begin, int64_t row_end,
              int64_t dim, float eps, DType dtype) {
  dispatch(dtype, [&](auto tag) MY_KERNELS_ALWAYS_INLINE {
    using T = decltype(tag);
    rms_norm_rows(static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(weight),
                  row_begin, row_end, dim, eps);
  });
}

}  // namespace my_kernels_cpu
