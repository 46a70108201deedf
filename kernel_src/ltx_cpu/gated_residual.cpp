// one row per step, one contiguous pass: out = x + y * gate, the gate row read through the
// batch/token strides (token stride 0 = one gate row per batch, reused by every token).
#include "convert.h"

namespace ltx_f16c {  // fp16 as raw uint16_t bits; see convert.h

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// One fused pass over an fp16 row with F16C: 8 elements of x, y and gate widened, combined in fp32,
// rounded once and stored.
__attribute__((target("avx,f16c"))) inline void gated_residual_row_f16c(
    uint16_t* out, const uint16_t* x, const uint16_t* y, const uint16_t* gate, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    const __m256 yv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i)));
    const __m256 gv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gate + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_add_ps(xv, _mm256_mul_ps(yv, gv)), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i)
    out[i] = _cvtss_sh(_cvtsh_ss(x[i]) + _cvtsh_ss(y[i]) * _cvtsh_ss(gate[i]), _MM_FROUND_TO_NEAREST_INT);
}
#else
inline void gated_residual_row_f16c(uint16_t*, const uint16_t*, const uint16_t*, const uint16_t*,
                                    int64_t) {}
#endif

}  // namespace ltx_f16c

namespace ltx_cpu {
namespace {

template <typename T>
LTX_INLINE void gated_residual_rows(T* out, const T* x, const T* y, const T* gate,
                                    int64_t row_begin, int64_t row_end, int64_t tokens,
                                    int64_t dim, int64_t batch_stride, int64_t token_stride) {
  if constexpr (std::is_same_v<T, Half>) {  // fp16: each row through fp32 (F16C), see convert.h
    if (has_f16c()) {
      for (int64_t r = row_begin; r < row_end; ++r) {
        const T* gr = gate + (r / tokens) * batch_stride + (r % tokens) * token_stride;
        ltx_f16c::gated_residual_row_f16c(reinterpret_cast<uint16_t*>(out + r * dim),
                                          reinterpret_cast<const uint16_t*>(x + r * dim),
                                          reinterpret_cast<const uint16_t*>(y + r * dim),
                                          reinterpret_cast<const uint16_t*>(gr), dim);
      }
      return;
    }
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
