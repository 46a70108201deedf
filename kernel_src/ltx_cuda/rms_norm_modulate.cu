// rms_norm_modulate: the rms_norm row shape (row in registers, one read and one write of x); the
// scale/shift rows ([B,1,D]: L1/L2 hits) are read after the reduction, two vectors at a time.
#include "modulate.cuh"
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
  // x skips L1 (so the scale/shift rows stay there) and y is stored evict-first, with registers
  // capped at 8 blocks of 128 threads per SM (56 instead of 72). H200, bf16 [2,6144,2048]
  // (2026-11-30): 29.1 us against 29.4-29.7 without; scripts/exp_modulate's standalone kernel
  // with the same hints reached 27.4. With a weight the cap would spill (sm_90, bf16).
  static constexpr bool kStreamX = true;
  static constexpr int kMinBlocks = kWeight ? 1 : 8;
  T* out;
  const T* scale;
  const T* shift;
  const T* weight;  // used only when kWeight
  int64_t dim, tokens, batch_stride, token_stride;

  using Mod = Modulation<T, kWeight>;
  struct Row {
    T* out;
    typename Mod::Ptrs mod;
  };
  __device__ Row row(int64_t r, int64_t col0) const {
    const int64_t b = r / tokens, s = r - b * tokens;
    return {out + r * dim + col0, Mod::at(scale, shift, weight, b, s, batch_stride, token_stride, col0)};
  }

  template <int W>
  using Aux = typename Mod::template Aux<W>;
  template <int W>
  __device__ void load(const Row& rp, int64_t off, Aux<W>& a) const {
    Mod::load(rp.mod, off, a);
  }
  template <int W>
  __device__ void store(const Row& rp, int64_t off, const float (&v)[1][W], const Aux<W>& a) const {
    Mod::template store<W, true>(rp.out + off, v, a);
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
