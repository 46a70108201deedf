// qfold.cuh: the Q fold, a probe experiment. LTX-Video's q RMSNorm (across all heads), its weight and the
// interleaved 3-D RoPE move from the prologue into the attention kernel, applied to each consumer's 64 rows of the
// Q tile in shared memory; the prologue then writes k and q's 1/rms only (150 MB moved instead of 201). The
// arithmetic is the grid op's, step for step, so q's folded rows and k equal its outputs to the bit.
// Include after qk_rms_norm_rope_grid.cu (kernel_src/ltx_cuda: sincos_fast, the grid epilogue, the row kernels).
#pragma once

#include "attention.cuh"

namespace ltx_cuda {
namespace qfold {

using namespace detail;
using Grid = QkNormRopeGridEpilogue<__nv_bfloat16, true>;

// The grid op's pipelined row kernel (row_norm.cuh's walk: 256 threads, 8 columns of q and of k each, kRows rows
// a block with the next copied ahead) with another ending: k's output, and q's 1/rms instead of q's output.
template <int kRows>
__global__ void __launch_bounds__(256, 4) k_rope_q_rms_kernel(RowInputs<__nv_bfloat16, 2> in, Grid ep,
                                                             float* q_inv_rms, int64_t rows, int64_t dim, float eps) {
  using T = __nv_bfloat16;
  constexpr int W = 8;
  walk_rows_pipelined<T, W, 256, kRows, 2>(
      in, ep, rows, dim,
      [&](int64_t row, const auto& rp, bool has, const Vec<T, W>(&x)[2], const float(&ss)[2], const auto& aux) {
        if (threadIdx.x == 0) q_inv_rms[row] = inv_rms_of(ss[0], dim, eps);
        if (!has) return;
        // weight_rotate_store's k half, on the values the shipped ending computes
        const float inv_rms = inv_rms_of(ss[1], dim, eps);
        float v[W], n[W], r[W];
#pragma unroll
        for (int i = 0; i < W; ++i) v[i] = x[1].f(i) * inv_rms;
#pragma unroll
        for (int i = 0; i < W; ++i) n[i] = v[i] * aux.w[1].f(i);
        rotate_pairs(n, aux.cos, aux.sin, r);
        Vec<T, W> y;
#pragma unroll
        for (int i = 0; i < W; ++i) y.set(i, r[i]);
        y.store(rp.out[1]);
      });
}

inline void k_rope_q_rms(void* k_out, float* q_inv_rms, const void* q, const void* k, const void* weight_q,
                         const void* weight_k, const float* pos, const float* freqs, int64_t rows, int64_t dim,
                         float eps, cudaStream_t stream) {
  using T = __nv_bfloat16;
  const Grid ep{nullptr, static_cast<T*>(k_out), static_cast<const T*>(weight_q), static_cast<const T*>(weight_k),
                pos, freqs, dim, static_cast<int>(dim % 6)};
  const RowInputs<T, 2> in{{static_cast<const T*>(q), static_cast<const T*>(k)}};
  constexpr int kRows = 4;
  k_rope_q_rms_kernel<kRows><<<linear_grid(ceil_div(rows, kRows)), 256, 0, stream>>>(in, ep, q_inv_rms, rows, dim,
                                                                                     eps);
}

}  // namespace qfold
}  // namespace ltx_cuda

namespace ltx_cuda_sm90 {

// The bf16 scores of q as the projection leaves it: before the first Q K^T, each consumer rewrites its 64 rows
// of the Q tile as rope(q * inv_rms * weight), rounded once, as the grid op writes q. Thread t takes the 16-byte
// chunk t % 8 (8 columns: 4 RoPE pairs) of rows t / 8 + 16 i, i < 4; the angles are worked out before Q lands.
struct QFoldScores : Bf16Scores {
  static constexpr bool kFoldQ = true;
  const float* inv_rms;         // [B * S]: q's 1/rms per token, from the prologue
  const __nv_bfloat16* weight;  // [H * 64]: q's norm weight
  const float* pos;             // [B * S, 3]
  const float* freqs;           // [H * 64 / 6]
  int pad;                      // H * 64 % 6: the leading columns RoPE leaves alone

  struct Fold {
    float c[4][4], s[4][4];  // [row][pair]
    float inv[4];            // 0 past the last token: that row stays as the copy left it (zeros)
    float w[8];
  };

  __device__ __forceinline__ Fold fold_start(int b, int h, int row_base, int tokens, int t) const {
    Fold f;
    const int col0 = h * kHeadDim + 8 * (t % 8);
    ltx_cuda::detail::Vec<__nv_bfloat16, 8> w;
    w.load_ordered(weight + col0);
#pragma unroll
    for (int e = 0; e < 8; ++e) f.w[e] = w.f(e);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = row_base + t / 8 + 16 * i;
      const bool valid = row < tokens;
      const int64_t token = int64_t(b) * tokens + (valid ? row : 0);
      f.inv[i] = valid ? inv_rms[token] : 0.f;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int col = col0 + 2 * k;
        float c = 1.0f, s = 0.0f;
        if (col >= pad) {  // the grid epilogue's angle, step for step
          const int m = (col - pad) >> 1;
          const int fi = m / 3;
          const float p = pos[3 * token + (m - 3 * fi)];
          const float angle = __fmul_rn(freqs[fi], __fsub_rn(__fmul_rn(p, 2.0f), 1.0f));
          ltx_cuda::sincos_fast(angle, &s, &c);
        }
        f.c[i][k] = c;
        f.s[i][k] = s;
      }
    }
    return f;
  }

  __device__ __forceinline__ void fold_finish(const Fold& f, uint8_t* q_rows, int t) const {
    const int j = t % 8;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (f.inv[i] == 0.f) continue;
      const int r = t / 8 + 16 * i;
      // the 128-byte swizzle: a row's 16-byte chunk j lies at j ^ (row % 8)
      __nv_bfloat16* p = reinterpret_cast<__nv_bfloat16*>(q_rows + r * kRowBytes + ((j ^ (r & 7)) << 4));
      ltx_cuda::detail::Vec<__nv_bfloat16, 8> x, y;
      x.load_ordered(p);
      float n[8], c[8], s[8], out[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        n[e] = x.f(e) * f.inv[i] * f.w[e];
        c[e] = f.c[i][e / 2];
        s[e] = f.s[i][e / 2];
      }
      ltx_cuda::detail::rotate_pairs(n, c, s, out);
#pragma unroll
      for (int e = 0; e < 8; ++e) y.set(e, out[e]);
      y.store(p);
    }
  }
};

// The Q fold's attention: q raw, k from k_rope_q_rms, the shipped configuration.
inline const char* launch_attention_qfold(void* out, const void* q, const void* k, const void* v, void* v16,
                                          const float* inv_rms, const void* weight, const float* pos,
                                          const float* freqs, int64_t batch, int64_t tokens, int64_t heads,
                                          float scale, cudaStream_t stream) {
  const QFoldScores scores{{{}, scale * 1.4426950408889634f},
                           inv_rms,
                           static_cast<const __nv_bfloat16*>(weight),
                           pos,
                           freqs,
                           static_cast<int>(heads * kHeadDim % 6)};
  return launch_with<QFoldScores, 3, 128, 3, Schedule::kOverlapOrdered>(scores, out, q, k, v, v16, batch, tokens,
                                                                         heads, stream);
}

}  // namespace ltx_cuda_sm90
