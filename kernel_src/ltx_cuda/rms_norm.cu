// rms_norm: one warp per row up to 256 16-byte vectors (2048 bf16), else 64..256 threads per row, the row held in registers between the fp32 sum of squares and the write (one read and one write per element); weight is a 2*dim-byte L1/L2 hit; unaligned rows or huge dim: two passes.
#include "row_norm.cuh"

namespace ltx_cuda {
namespace {

using namespace detail;

// y = x_normalised (* weight), one rounding.
template <class T>
struct RmsNormEpilogue {
  static constexpr int kNarrow = 1;
  static constexpr bool kPrefetch = false;  // weight / [B,1,D] rows: L1/L2 hits
  T* out;
  const T* weight;  // nullable
  int64_t dim;

  struct Row {
    T* out;
    const T* weight;
  };
  __device__ Row row(int64_t r, int64_t col0) const {
    return {out + r * dim + col0, weight != nullptr ? weight + col0 : nullptr};
  }

  template <int W>
  struct Aux {
    Vec<T, W> w;
  };
  template <int W>
  __device__ void load(const Row& rp, int64_t off, Aux<W>& a) const {
    if (rp.weight != nullptr) a.w.load(rp.weight + off);
  }

  template <int W>
  __device__ void store(const Row& rp, int64_t off, const float (&v)[1][W], const Aux<W>& a) const {
    Vec<T, W> y;
#pragma unroll
    for (int i = 0; i < W; ++i) y.set(i, rp.weight != nullptr ? v[0][i] * a.w.f(i) : v[0][i]);
    y.store(rp.out + off);
  }
};

}  // namespace

void rms_norm(void* out, const void* x, const void* weight, int64_t rows, int64_t dim, float eps,
              DType dtype, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const RmsNormEpilogue<T> ep{static_cast<T*>(out), static_cast<const T*>(weight), dim};
    const bool wide = dim % kPack<T> == 0 && aligned16({out, x, weight});
    launch_row_norm<T, 1>({{static_cast<const T*>(x)}}, ep, rows, dim, eps, wide, stream);
  });
}

}  // namespace ltx_cuda
