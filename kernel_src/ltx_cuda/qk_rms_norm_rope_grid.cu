// qk_rms_norm_rope_grid: qk_rms_norm_rope's row shape (q and k rows in registers, read once,
// written once) with the RoPE angles computed in the kernel from the token's (frame, height,
// width) position: no cos/sin tables, so q and k are all the bytes it moves (half of
// qk_rms_norm_rope's). Positions and frequencies are L1 hits; the angles' sin/cos is the ALU work
// that the launch shape hides behind the loads of x.
#include "rope.cuh"
#include "row_norm.cuh"

namespace ltx_cuda {
namespace {

using namespace detail;

// out_t = rope(x_t_normalised * weight_t) for t in {q, k}, one rounding each. Column c >= pad
// belongs to pair m = (c - pad) / 2, frequency f = m / 3 of axis m % 3, at the angle
// freqs[f] * (2 * pos[axis] - 1): diffusers' LTXVideoRotaryPosEmbed, each step rounded as there.
// Columns below pad (dim % 6) are its padding: cos 1, sin 0.
// sin and cos of x for |x| up to ~1e5: one Cody-Waite step to [-pi, pi] (k * 2pi_hi exact inside
// the FMA), then the hardware approximation (absolute error below 5e-7 in all): for 16-bit outputs,
// whose own rounding is 1e3 times coarser.
__device__ __forceinline__ void sincos_fast(float x, float* s, float* c) {
  const float k = rintf(x * 0.15915494309189535f);
  float r = fmaf(-k, 6.28318548202514648f, x);
  r = fmaf(-k, -1.7484555314695172e-07f, r);
  __sincosf(r, s, c);
}

// The angles are ALU work: they are computed while x is in flight (kPrefetch: before the reduction),
// and LTX-Video's width runs 256 threads with one vector of q and of k each, so more warps hide it;
// such a block walks 4 rows with the next one copied ahead (kPairRows; the variants timed:
// docs/kernels.md).
template <class T, bool kFast>
struct QkNormRopeGridEpilogue {
  static constexpr int kNarrow = 2;         // the fallback path still moves whole pairs
  static constexpr bool kPrefetch = true;   // weights, positions, freqs: L1 hits; the rest is ALU
  static constexpr int kPairGroup = 256;
  static constexpr int kPairRows = 4;  // pipelined (row_norm.cuh)
  static constexpr bool kResidual = false;
  static constexpr bool kStreamX = false;
  static constexpr int kMinBlocks = 1;
  T* q_out;
  T* k_out;
  const T* weight_q;
  const T* weight_k;
  const float* pos;    // [rows, 3]
  const float* freqs;  // [dim / 6]
  int64_t dim;
  int pad;

  struct Row {
    T* out[2];
    const T* weight[2];
    const float* pos;
    int64_t col0;
  };
  __device__ Row row(int64_t r, int64_t col0) const {
    const int64_t off = r * dim + col0;
    return {{q_out + off, k_out + off}, {weight_q + col0, weight_k + col0}, pos + 3 * r, col0};
  }

  template <int W>
  struct Aux {
    float cos[W], sin[W];
    Vec<T, W> w[2];
  };
  template <int W>
  __device__ void load(const Row& rp, int64_t off, Aux<W>& a) const {
    a.w[0].load_ordered(rp.weight[0] + off);
    a.w[1].load_ordered(rp.weight[1] + off);
#pragma unroll
    for (int i = 0; i < W; i += 2) {
      const int64_t col = rp.col0 + off + i;  // even: chunks start at even columns
      float c = 1.0f, s = 0.0f;
      if (col >= pad) {
        const int m = static_cast<int>((col - pad) >> 1);
        const int f = m / 3;
        const float p = rp.pos[m - 3 * f];
        const float angle = __fmul_rn(freqs[f], __fsub_rn(__fmul_rn(p, 2.0f), 1.0f));
        if constexpr (kFast)
          sincos_fast(angle, &s, &c);
        else
          sincosf(angle, &s, &c);
      }
      a.cos[i] = a.cos[i + 1] = c;
      a.sin[i] = a.sin[i + 1] = s;
    }
  }

  template <int W>
  __device__ void store(const Row& rp, int64_t off, const float (&v)[2][W], const Aux<W>& a) const {
    weight_rotate_store(rp.out, off, v, a.w, a.cos, a.sin);
  }
};

}  // namespace

void qk_rms_norm_rope_grid(void* q_out, void* k_out, const void* q, const void* k,
                           const void* weight_q, const void* weight_k, const float* pos,
                           const float* freqs, int64_t rows, int64_t dim, float eps, DType dtype,
                           cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr bool kFast = sizeof(T) == 2;  // fp32 outputs keep the full-precision sincosf
    const QkNormRopeGridEpilogue<T, kFast> ep{static_cast<T*>(q_out),
                                              static_cast<T*>(k_out),
                                              static_cast<const T*>(weight_q),
                                              static_cast<const T*>(weight_k),
                                              pos,
                                              freqs,
                                              dim,
                                              static_cast<int>(dim % 6)};
    const bool wide =
        dim % kPack<T> == 0 && aligned16({q_out, k_out, q, k, weight_q, weight_k});
    const RowInputs<T, 2> in{{static_cast<const T*>(q), static_cast<const T*>(k)}};
    launch_row_norm<T, 2>(in, ep, rows, dim, eps, wide, stream);
  });
}

}  // namespace ltx_cuda
