// add_rms_norm_modulate: the rms_norm row shape with a residual prologue: x and y (and a per-token
// gate) are read with the row, h = x + y (* gate) is written once and stays in registers for the
// reduction; the scale/shift rows ([B,1,D]: L1/L2 hits) are read after it, two vectors at a time.
#include "modulate.cuh"
#include "row_norm.cuh"

namespace ltx_cuda {
namespace {

using namespace detail;

// h = x + y (* gate), rounded once to T; out = h_normalised (* weight) * (1 + scale) + shift, one
// rounding. Normalising the rounded h makes the pair equal gated_residual (or ATen's add) followed
// by rms_norm_modulate. Row r = (b, s) reads scale/shift at b * mod_batch_stride + s *
// mod_token_stride and gate at b * gate_batch_stride + s * gate_token_stride (plus the column).
template <class T, bool kGate, bool kWeight>
struct AddModulateEpilogue {
  static constexpr int kNarrow = 1;
  static constexpr bool kPrefetch = false;  // [B,1,D] scale/shift rows are L1/L2 hits
  static constexpr bool kResidual = true;
  static constexpr bool kStreamX = false;
  static constexpr int kMinBlocks = 1;
  T* out;
  T* h;
  const T* y;
  const T* gate;  // used only when kGate
  const T* scale;
  const T* shift;
  const T* weight;  // used only when kWeight
  int64_t dim, tokens, mod_batch_stride, mod_token_stride, gate_batch_stride, gate_token_stride;

  using Mod = Modulation<T, kWeight>;
  struct Row {
    T* out;
    T* h;
    const T* y;
    const T* gate;
    typename Mod::Ptrs mod;
  };
  __device__ Row row(int64_t r, int64_t col0) const {
    const int64_t b = r / tokens, s = r - b * tokens;
    const int64_t off = r * dim + col0;
    const T* g = nullptr;
    if constexpr (kGate) g = gate + b * gate_batch_stride + s * gate_token_stride + col0;
    return {out + off, h + off, y + off, g,
            Mod::at(scale, shift, weight, b, s, mod_batch_stride, mod_token_stride, col0)};
  }

  // The residual prologue (row_norm.cuh): y and gate are loaded with x, through ld.global.nc.
  template <int W>
  struct Res {
    Vec<T, W> y, gate;
  };
  template <int W>
  __device__ void load_residual(const Row& rp, int64_t off, Res<W>& r) const {
    r.y.load(rp.y + off);
    if constexpr (kGate) r.gate.load(rp.gate + off);
  }
  template <int W>
  __device__ void residual(const Row& rp, int64_t off, const Res<W>& r, Vec<T, W>& x) const {
#pragma unroll
    for (int i = 0; i < W; ++i) {
      if constexpr (kGate)
        x.set(i, fmaf(r.y.f(i), r.gate.f(i), x.f(i)));  // as gated_residual
      else
        x.set(i, x.f(i) + r.y.f(i));  // as ATen's add
    }
    x.store(rp.h + off);
  }
  template <int W>
  __device__ void reload(const Row& rp, int64_t off, Vec<T, W>& x) const {
    x.load_ordered(rp.h + off);
  }

  // The modulation (modulate.cuh), as in rms_norm_modulate.
  template <int W>
  using Aux = typename Mod::template Aux<W>;
  template <int W>
  __device__ void load(const Row& rp, int64_t off, Aux<W>& a) const {
    Mod::load(rp.mod, off, a);
  }
  template <int W>
  __device__ void store(const Row& rp, int64_t off, const float (&v)[1][W], const Aux<W>& a) const {
    Mod::store(rp.out + off, v, a);
  }
};

template <class T, bool kGate, bool kWeight>
void launch(const AddModulateEpilogue<T, kGate, kWeight>& ep, const T* x, int64_t rows,
            int64_t dim, float eps, cudaStream_t stream) {
  constexpr int W = kPack<T>;
  const bool wide = dim % W == 0 && ep.mod_batch_stride % W == 0 &&
                    ep.mod_token_stride % W == 0 && ep.gate_batch_stride % W == 0 &&
                    ep.gate_token_stride % W == 0 &&
                    aligned16({ep.out, ep.h, x, ep.y, ep.gate, ep.scale, ep.shift, ep.weight});
  // Where rms_norm_modulate runs its packed kernel (bf16, no weight, LTX's shape): the 128-thread
  // shape, which sums in its order.
  constexpr bool kMayPack = std::is_same_v<T, __nv_bfloat16> && !kWeight;
  launch_row_norm<T, 1, kMayPack>({{x}}, ep, rows, dim, eps, wide, stream,
                                  ltx_adaln_shape<T, kWeight>(dim, ep.mod_token_stride, wide));
}

}  // namespace

void add_rms_norm_modulate(void* h, void* out, const void* x, const void* y, const void* scale,
                           const void* shift, const void* gate, const void* weight, int64_t rows,
                           int64_t tokens, int64_t dim, int64_t mod_batch_stride,
                           int64_t mod_token_stride, int64_t gate_batch_stride,
                           int64_t gate_token_stride, float eps, DType dtype, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* ho = static_cast<T*>(h);
    T* o = static_cast<T*>(out);
    const T* xi = static_cast<const T*>(x);
    const T* yi = static_cast<const T*>(y);
    const T* g = static_cast<const T*>(gate);
    const T* sc = static_cast<const T*>(scale);
    const T* sh = static_cast<const T*>(shift);
    const T* w = static_cast<const T*>(weight);
    const int64_t mbs = mod_batch_stride, mts = mod_token_stride;
    const int64_t gbs = g != nullptr ? gate_batch_stride : 0;
    const int64_t gts = g != nullptr ? gate_token_stride : 0;
    // gate and weight are template flags: LTX's call (neither) spends no registers on them.
    const auto run = [&](auto gate_flag, auto weight_flag) {
      constexpr bool kGate = decltype(gate_flag)::value, kWeight = decltype(weight_flag)::value;
      const AddModulateEpilogue<T, kGate, kWeight> ep{o,   ho,     yi,  g,   sc,  sh, w,
                                                      dim, tokens, mbs, mts, gbs, gts};
      launch(ep, xi, rows, dim, eps, stream);
    };
    if (g != nullptr && w != nullptr)
      run(std::true_type{}, std::true_type{});
    else if (g != nullptr)
      run(std::true_type{}, std::false_type{});
    else if (w != nullptr)
      run(std::false_type{}, std::true_type{});
    else
      run(std::false_type{}, std::false_type{});
  });
}

}  // namespace ltx_cuda
