// one row per step: a contiguous pass forms h = x + y (* gate) and writes it rounded, the next pass
// sums the squares of that rounded row (still in cache) in 16 fp32 lanes, a last pass normalises it
// and applies (1 + scale) and shift, read through the batch/token strides like the gate.
#include "modulate_row.h"

namespace ltx_cpu {
namespace {

using detail::modulate_row;

template <typename T>
LTX_INLINE void add_rms_norm_modulate_rows(T* h, T* out, const T* x, const T* y, const T* scale,
                                           const T* shift, const T* gate, const T* weight,
                                           int64_t row_begin, int64_t row_end, int64_t tokens,
                                           int64_t dim, int64_t mod_batch_stride,
                                           int64_t mod_token_stride, int64_t gate_batch_stride,
                                           int64_t gate_token_stride, double eps) {
  if constexpr (std::is_same_v<T, Half>) {  // fp16: each row through fp32 (F16C), see convert.h
    Rows f(7, dim);  // x, y, gate, h, scale, shift, weight
    if (weight != nullptr) widen(f[6], weight, dim);
    for (int64_t r = row_begin; r < row_end; ++r) {
      const int64_t b = r / tokens, s = r % tokens;
      widen(f[0], x + r * dim, dim);
      widen(f[1], y + r * dim, dim);
      if (gate != nullptr) {
        widen(f[2], gate + b * gate_batch_stride + s * gate_token_stride, dim);
        for (int64_t i = 0; i < dim; ++i) f[3][i] = f[0][i] + f[1][i] * f[2][i];
      } else {
        for (int64_t i = 0; i < dim; ++i) f[3][i] = f[0][i] + f[1][i];
      }
      narrow(h + r * dim, f[3], dim);  // h rounded as gated_residual rounds it; the norm reads that
      widen(f[3], h + r * dim, dim);
      const int64_t mod = b * mod_batch_stride + s * mod_token_stride;
      widen(f[4], scale + mod, dim);
      widen(f[5], shift + mod, dim);
      const float inv = inv_rms(f[3], dim, eps);
      const float* hr = f[3];
      const float* sc = f[4];
      const float* sh = f[5];
      float* o = f[0];
      if (weight != nullptr) {
        const float* w = f[6];
        for (int64_t i = 0; i < dim; ++i) o[i] = hr[i] * inv * w[i] * (1.0f + sc[i]) + sh[i];
      } else {
        for (int64_t i = 0; i < dim; ++i) o[i] = hr[i] * inv * (1.0f + sc[i]) + sh[i];
      }
      narrow(out + r * dim, o, dim);
    }
    return;
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t b = r / tokens, s = r % tokens;
    const T* xr = x + r * dim;
    const T* yr = y + r * dim;
    T* hr = h + r * dim;
    T* outr = out + r * dim;
    // h exactly as gated_residual (or an add) rounds it; the norm below reads the rounded values.
    if (gate != nullptr) {
      const T* gr = gate + b * gate_batch_stride + s * gate_token_stride;
      for (int64_t i = 0; i < dim; ++i) hr[i] = store<T>(load(xr[i]) + load(yr[i]) * load(gr[i]));
    } else {
      for (int64_t i = 0; i < dim; ++i) hr[i] = store<T>(load(xr[i]) + load(yr[i]));
    }
    const int64_t mod = b * mod_batch_stride + s * mod_token_stride;
    modulate_row(outr, hr, scale + mod, shift + mod, weight, inv_rms(hr, dim, eps), dim);
  }
}

}  // namespace

LTX_CPU_MULTIVERSION
void add_rms_norm_modulate(void* h, void* out, const void* x, const void* y, const void* scale,
                           const void* shift, const void* gate, const void* weight,
                           int64_t row_begin, int64_t row_end, int64_t tokens, int64_t dim,
                           int64_t mod_batch_stride, int64_t mod_token_stride,
                           int64_t gate_batch_stride, int64_t gate_token_stride, double eps,
                           DType dtype) {
  dispatch(dtype, [&](auto tag) LTX_ALWAYS_INLINE {
    using T = decltype(tag);
    add_rms_norm_modulate_rows(static_cast<T*>(h), static_cast<T*>(out), static_cast<const T*>(x),
                               static_cast<const T*>(y), static_cast<const T*>(scale),
                               static_cast<const T*>(shift), static_cast<const T*>(gate),
                               static_cast<const T*>(weight), row_begin, row_end, tokens, dim,
                               mod_batch_stride, mod_token_stride, gate_batch_stride,
                               gate_token_stride, eps);
  });
}

}  // namespace ltx_cpu
