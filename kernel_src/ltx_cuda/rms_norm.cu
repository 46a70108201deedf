// rms_norm: 32..256 threads per row (64 at LTX's 2048 bf16, see row_norm.cuh), the row's 16-byte vectors
// held in registers from the fp32 sum of squares to the write: one read, one write per element.
#include "row_norm.cuh"

namespace ltx_cuda {
namespace {

using namespace detail;

// y = x_normalised (* weight), one rounding. kWeight is a template parameter so that the
// weightless kernel (LTX's norm1/norm2) spends no registers or branches on weight.
template <class T, bool kWeight>
struct RmsNormEpilogue {
  static constexpr int kNarrow = 1;
  static constexpr bool kPrefetch = false;  // the weight row is an L1/L2 hit
  static constexpr bool kResidual = false;
  static constexpr bool kStreamX = false;
  static constexpr int kMinBlocks = 1;
  T* out;
  const T* weight;  // used only when kWeight
  int64_t dim;

  struct Row {
    T* out;
    const T* weight;
  };
  __device__ Row row(int64_t r, int64_t col0) const {
    return {out + r * dim + col0, weight + col0};
  }

  template <int W>
  struct Aux {
    Vec<T, W> w;
  };
  template <int W>
  __device__ void load(const Row& rp, int64_t off, Aux<W>& a) const {
    if constexpr (kWeight) a.w.load_ordered(rp.weight + off);
  }

  template <int W>
  __device__ void store(const Row& rp, int64_t off, const float (&v)[1][W], const Aux<W>& a) const {
    Vec<T, W> y;
#pragma unroll
    for (int i = 0; i < W; ++i) {
      if constexpr (kWeight)
        y.set(i, v[0][i] * a.w.f(i));
      else
        y.set(i, v[0][i]);
    }
    y.store(rp.out + off);
  }
};

template <class T, bool kWeight>
void launch(T* out, const T* x, const T* weight, int64_t rows, int64_t dim, float eps,
            cudaStream_t stream) {
  const RmsNormEpilogue<T, kWeight> ep{out, weight, dim};
  const bool wide = dim % kPack<T> == 0 && aligned16({out, x, weight});
  launch_row_norm<T, 1>({{x}}, ep, rows, dim, eps, wide, stream);
}

}  // namespace

void rms_norm(void* out, const void* x, const void* weight, int64_t rows, int64_t dim, float eps,
              DType dtype, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out);
    const T* xi = static_cast<const T*>(x);
    const T* w = static_cast<const T*>(weight);
    if (w != nullptr)
      launch<T, true>(o, xi, w, rows, dim, eps, stream);
    else
      launch<T, false>(o, xi, w, rows, dim, eps, stream);
  });
}

}  // namespace ltx_cuda
