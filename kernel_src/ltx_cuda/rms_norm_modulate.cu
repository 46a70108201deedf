// rms_norm_modulate: the rms_norm row shape (row in registers, one read and one write of x); the
// scale/shift rows ([B,1,D]: L1/L2 hits) are read after the reduction, two vectors at a time.
#include "row_norm.cuh"

namespace ltx_cuda {
namespace {

using namespace detail;

// y = x_normalised (* weight) * (1 + scale) + shift, one rounding. scale and shift share strides:
// row r = (b, s) reads scale[b * batch_stride + s * token_stride + col]. kWeight as in rms_norm.cu.
template <class T, bool kWeight>
struct ModulateEpilogue {
  static constexpr int kNarrow = 1;
  static constexpr bool kPrefetch = false;  // [B,1,D] scale/shift rows are L1/L2 hits
  T* out;
  const T* scale;
  const T* shift;
  const T* weight;  // used only when kWeight
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
    return {out + r * dim + col0, scale + m, shift + m, weight + col0};
  }

  template <int W>
  struct Aux {
    Vec<T, W> scale, shift, w;
  };
  template <int W>
  __device__ void load(const Row& rp, int64_t off, Aux<W>& a) const {
    a.scale.load_ordered(rp.scale + off);
    a.shift.load_ordered(rp.shift + off);
    if constexpr (kWeight) a.w.load_ordered(rp.weight + off);
  }

  template <int W>
  __device__ void store(const Row& rp, int64_t off, const float (&v)[1][W], const Aux<W>& a) const {
    Vec<T, W> y;
#pragma unroll
    for (int i = 0; i < W; ++i) {
      float n = v[0][i];
      if constexpr (kWeight) n *= a.w.f(i);
      y.set(i, fmaf(n, 1.0f + a.scale.f(i), a.shift.f(i)));
    }
    y.store(rp.out + off);
  }
};

template <class T, bool kWeight>
void launch(const ModulateEpilogue<T, kWeight>& ep, const T* x, int64_t rows, int64_t dim,
            float eps, cudaStream_t stream) {
  constexpr int W = kPack<T>;
  const bool wide = dim % W == 0 && ep.batch_stride % W == 0 && ep.token_stride % W == 0 &&
                    aligned16({ep.out, x, ep.scale, ep.shift, ep.weight});
  launch_row_norm<T, 1>({{x}}, ep, rows, dim, eps, wide, stream);
}

}  // namespace

void rms_norm_modulate(void* out, const void* x, const void* scale, const void* shift,
                       const void* weight, int64_t rows, int64_t tokens, int64_t dim,
                       int64_t mod_batch_stride, int64_t mod_token_stride, float eps, DType dtype,
                       cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out);
    const T* sc = static_cast<const T*>(scale);
    const T* sh = static_cast<const T*>(shift);
    const T* w = static_cast<const T*>(weight);
    const T* xi = static_cast<const T*>(x);
    const int64_t bs = mod_batch_stride, ts = mod_token_stride;
    if (w != nullptr)
      launch(ModulateEpilogue<T, true>{o, sc, sh, w, dim, tokens, bs, ts}, xi, rows, dim, eps,
             stream);
    else
      launch(ModulateEpilogue<T, false>{o, sc, sh, w, dim, tokens, bs, ts}, xi, rows, dim, eps,
             stream);
  });
}

}  // namespace ltx_cuda
