// one row per step: the row's cos/sin (one angle per pair, from the token's position) into a
// per-task buffer, then the q row and the k row as in qk_rms_norm_rope; no tables in memory.
#include <cmath>
#include <vector>

#include "norm_rope_row.h"

namespace ltx_cpu {
namespace {

using detail::norm_rope_row;

// diffusers' LTXVideoRotaryPosEmbed for one token: column c >= pad (dim % 6) belongs to pair
// m = (c - pad) / 2, frequency f = m / 3 of axis m % 3, angle freqs[f] * (2 * pos[axis] - 1)
// in fp32 as there; padding columns get cos 1, sin 0.
LTX_INLINE void rope_row(float* cos, float* sin, const float* pos, const float* freqs, int64_t dim) {
  const int64_t pad = dim % 6;
  for (int64_t c = 0; c < pad; ++c) {
    cos[c] = 1.0f;
    sin[c] = 0.0f;
  }
  for (int64_t c = pad; c < dim; c += 2) {
    const int64_t m = (c - pad) / 2;
    const float signed_pos = pos[m % 3] * 2.0f - 1.0f;
    const float angle = freqs[m / 3] * signed_pos;
    cos[c] = cos[c + 1] = std::cos(angle);
    sin[c] = sin[c + 1] = std::sin(angle);
  }
}

template <typename Isa, typename T>
LTX_INLINE void qk_rms_norm_rope_grid_rows(Isa isa, T* q_out, T* k_out, const T* q, const T* k,
                                           const T* weight_q, const T* weight_k, const float* pos,
                                           const float* freqs, int64_t row_begin, int64_t row_end,
                                           int64_t dim, double eps) {
  std::vector<float> cos(dim), sin(dim);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t o = r * dim;
    rope_row(cos.data(), sin.data(), pos + 3 * r, freqs, dim);
    norm_rope_row(isa, q_out + o, q + o, weight_q, cos.data(), sin.data(), dim, eps);
    norm_rope_row(isa, k_out + o, k + o, weight_k, cos.data(), sin.data(), dim, eps);
  }
}

}  // namespace

void qk_rms_norm_rope_grid(void* q_out, void* k_out, const void* q, const void* k,
                           const void* weight_q, const void* weight_k, const float* pos,
                           const float* freqs, int64_t row_begin, int64_t row_end, int64_t dim,
                           double eps, DType dtype) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    run_on_cpu<T>([&](auto isa) LTX_ALWAYS_INLINE {
      qk_rms_norm_rope_grid_rows(isa, static_cast<T*>(q_out), static_cast<T*>(k_out),
                                 static_cast<const T*>(q), static_cast<const T*>(k),
                                 static_cast<const T*>(weight_q), static_cast<const T*>(weight_k),
                                 pos, freqs, row_begin, row_end, dim, eps);
    });
  });
}

}  // namespace ltx_cpu
