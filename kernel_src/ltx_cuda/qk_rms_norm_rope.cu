// qk_rms_norm_rope: a thread group holds row r of q and of k in registers plus row r of cos/sin
// (read once for both); normalise, weight, rotate pairs inside each 16-byte vector, write both.
#include "rope.cuh"
#include "row_norm.cuh"

namespace ltx_cuda {
namespace {

using namespace detail;

// out_t = rope(x_t_normalised * weight_t) for t in {q, k}, one rounding each.
template <class T>
struct QkNormRopeEpilogue {
  static constexpr int kNarrow = 2;        // the fallback path still moves whole pairs
  static constexpr bool kPrefetch = true;  // cos/sin are 2/3 of the bytes read
  static constexpr bool kResidual = false;
  static constexpr bool kStreamX = false;
  static constexpr int kMinBlocks = 1;
  static constexpr int kPairGroup = 128;  // 2 vectors of q and of k a thread
  static constexpr int kPairRows = 1;
  T* q_out;
  T* k_out;
  const T* weight_q;
  const T* weight_k;
  const float* cos;
  const float* sin;
  int64_t dim;

  struct Row {
    T* out[2];
    const T* weight[2];
    const float* cos;
    const float* sin;
  };
  __device__ Row row(int64_t r, int64_t col0) const {
    const int64_t off = r * dim + col0;
    return {{q_out + off, k_out + off}, {weight_q + col0, weight_k + col0}, cos + off, sin + off};
  }

  template <int W>
  struct Aux {
    Vec<float, W> cos, sin;
    Vec<T, W> w[2];
  };
  template <int W>
  __device__ void load(const Row& rp, int64_t off, Aux<W>& a) const {
    a.cos.load(rp.cos + off);
    a.sin.load(rp.sin + off);
    a.w[0].load(rp.weight[0] + off);
    a.w[1].load(rp.weight[1] + off);
  }

  template <int W>
  __device__ void store(const Row& rp, int64_t off, const float (&v)[2][W], const Aux<W>& a) const {
    weight_rotate_store(rp.out, off, v, a.w, a.cos.v, a.sin.v);
  }
};

}  // namespace

void qk_rms_norm_rope(void* q_out, void* k_out, const void* q, const void* k,
                      const void* weight_q, const void* weight_k, const float* cos,
                      const float* sin, int64_t rows, int64_t dim, float eps, DType dtype,
                      cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const QkNormRopeEpilogue<T> ep{static_cast<T*>(q_out),         static_cast<T*>(k_out),
                                   static_cast<const T*>(weight_q), static_cast<const T*>(weight_k),
                                   cos,                             sin,
                                   dim};
    const bool wide = dim % kPack<T> == 0 &&
                      aligned16({q_out, k_out, q, k, weight_q, weight_k, cos, sin});
    const RowInputs<T, 2> in{{static_cast<const T*>(q), static_cast<const T*>(k)}};
    launch_row_norm<T, 2>(in, ep, rows, dim, eps, wide, stream);
  });
}

}  // namespace ltx_cuda
