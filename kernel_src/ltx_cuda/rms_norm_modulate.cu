// rms_norm_modulate: the rms_norm row shape (one warp per row up to 2048 bf16, the row's 16-byte vectors held in registers, one read and one write of x); scale/shift rows ([B,1,D]: L1/L2 hits; per token: one more read each) are loaded with x, before the reduction.
#include "row_norm.cuh"

namespace ltx_cuda {
namespace {

using namespace detail;

// y = x_normalised (* weight) * (1 + scale) + shift, one rounding. scale and shift share strides:
// row r = (b, s) reads scale[b * batch_stride + s * token_stride + col].
template <class T>
struct ModulateEpilogue {
  static constexpr int kNarrow = 1;
  static constexpr bool kPrefetch = false;  // weight / [B,1,D] rows: L1/L2 hits
  T* out;
  const T* scale;
  const T* shift;
  const T* weight;  // nullable
  int64_t dim, tokens, batch_stride, token_stride;

  struct Row {
    T* out;
    const T* scale;
    const T* shift;
    const T* weight;
  };
  __device__ Row row(int64_t r, int64_t col0) const {
    const int64_t b = r / tokens, s = r - b * tokens;
    const int64_t m = b * batch_stride + s * token_stride + col0;
    return {out + r * dim + col0, scale + m, shift + m, weight != nullptr ? weight + col0 : nullptr};
  }

  template <int W>
  struct Aux {
    Vec<T, W> scale, shift, w;
  };
  template <int W>
  __device__ void load(const Row& rp, int64_t off, Aux<W>& a) const {
    a.scale.load(rp.scale + off);
    a.shift.load(rp.shift + off);
    if (rp.weight != nullptr) a.w.load(rp.weight + off);
  }

  template <int W>
  __device__ void store(const Row& rp, int64_t off, const float (&v)[1][W], const Aux<W>& a) const {
    Vec<T, W> y;
#pragma unroll
    for (int i = 0; i < W; ++i) {
      const float n = rp.weight != nullptr ? v[0][i] * a.w.f(i) : v[0][i];
      y.set(i, fmaf(n, 1.0f + a.scale.f(i), a.shift.f(i)));
    }
    y.store(rp.out + off);
  }
};

}  // namespace

void rms_norm_modulate(void* out, const void* x, const void* scale, const void* shift,
                       const void* weight, int64_t rows, int64_t tokens, int64_t dim,
                       int64_t mod_batch_stride, int64_t mod_token_stride, float eps, DType dtype,
                       cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const ModulateEpilogue<T> ep{static_cast<T*>(out), static_cast<const T*>(scale),
                                 static_cast<const T*>(shift), static_cast<const T*>(weight),
                                 dim, tokens, mod_batch_stride, mod_token_stride};
    constexpr int W = kPack<T>;
    const bool wide = dim % W == 0 && mod_batch_stride % W == 0 && mod_token_stride % W == 0 &&
                      aligned16({out, x, scale, shift, weight});
    launch_row_norm<T, 1>({{static_cast<const T*>(x)}}, ep, rows, dim, eps, wide, stream);
  });
}

}  // namespace ltx_cuda
