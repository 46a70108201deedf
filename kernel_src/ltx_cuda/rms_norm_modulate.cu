// rms_norm_modulate: the rms_norm row shape (row in registers, one read and one write of x); the
// scale/shift rows ([B,1,D]: L1/L2 hits) are read after the reduction, two vectors at a time, except
// in the packed kernel for LTX's exact shape, which reads them with x.
#include <climits>
#include <type_traits>

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
  static constexpr bool kResidual = false;
  // x skips L1 (so the scale/shift rows stay there) and y is stored evict-first, with registers
  // capped at 8 blocks of 128 threads per SM (56 instead of 72): a little faster at LTX's shape
  // before `packed` below took it over (docs/kernels.md). With a weight the cap would spill (sm_90,
  // bf16).
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

// LTX-Video's AdaLN exactly (modulate.cuh: ltx_adaln_shape): bf16 rows of 2048, one [B,1,D]
// scale/shift row per batch, no weight. One row per block of 128 threads; thread t holds chunks t and
// t + 128 (16 bytes each, packed: 8 registers) from the load to the store, and its 4 chunks of the
// batch's scale/shift row are loaded with them, before the reduction, so no load waits after it.
// The epilogue unpacks x again (Vec::f_again). The cap of 12 blocks per SM (40 registers) keeps
// 1536 threads' loads in flight; the loads and stores are plain, so the kernel's own lines displace
// what earlier kernels left in the L2 instead of being served by it. The row arithmetic is 32-bit.
// The sum of squares follows row_norm.cuh's order (even and odd columns, then their sum) and the
// reduction is its group_sum, so results equal the generic kernel's 128-thread shape bit for bit:
// the shape add_rms_norm_modulate takes here. H200 figures: BENCHMARKS.md §1.
namespace packed {
constexpr int kThreads = 128, kVecs = 2, kMinBlocks = 12;
constexpr int kDim = kThreads * kVecs * kPack<__nv_bfloat16>;
static_assert(kDim == 2048, "the width ltx_adaln_shape selects");

// The two bf16 of a 32-bit word as fp32 (exact: a bf16 is the top half of its fp32). The same values
// as Vec::f, but Vec::f in the sum below compiles to 8 more instructions (sm_90, CUDA 13.0).
__device__ __forceinline__ float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
__device__ __forceinline__ float lo_of(uint32_t w) { return bits_to_float(w << 16); }
__device__ __forceinline__ float hi_of(uint32_t w) { return bits_to_float(w & 0xffff0000u); }

__global__ void __launch_bounds__(kThreads, kMinBlocks)
    kernel(const __nv_bfloat16* x, __nv_bfloat16* out, const __nv_bfloat16* scale,
           const __nv_bfloat16* shift, int tokens, int64_t batch_stride, float eps) {
  using T = __nv_bfloat16;
  using Mod = Modulation<T, false>;
  constexpr int W = kPack<T>, kStride = kThreads * W;
  const int lane = static_cast<int>(threadIdx.x);
  const int row = static_cast<int>(blockIdx.x);  // the grid has exactly one block per row
  const int64_t at = int64_t(row) * kDim + lane * W;
  Vec<T, W> v[kVecs];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) v[j].load(x + at + j * kStride);
  const typename Mod::Ptrs mod = Mod::at(scale, shift, nullptr, row / tokens, 0, batch_stride, 0, lane * W);
  typename Mod::template Aux<W> aux[kVecs];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) Mod::load(mod, j * kStride, aux[j]);

  float even = 0.0f, odd = 0.0f;
#pragma unroll
  for (int j = 0; j < kVecs; ++j)
#pragma unroll
    for (int w = 0; w < W / 2; ++w) {
      uint32_t word;
      memcpy(&word, reinterpret_cast<const char*>(v[j].v) + 4 * w, 4);
      even = fmaf(lo_of(word), lo_of(word), even);
      odd = fmaf(hi_of(word), hi_of(word), odd);
    }
  float ss[1] = {even + odd};
  group_sum<kThreads, kThreads, 1, true>(ss);
  const float inv_rms = rsqrtf(ss[0] / static_cast<float>(kDim) + eps);

#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    float n[1][W];
#pragma unroll
    for (int i = 0; i < W; ++i) n[0][i] = v[j].f_again(i) * inv_rms;
    Mod::template store<W>(out + at + j * kStride, n, aux[j]);
  }
}
}  // namespace packed

template <class T, bool kWeight>
void launch(const ModulateEpilogue<T, kWeight>& ep, const T* x, int64_t rows, int64_t dim,
            float eps, cudaStream_t stream) {
  constexpr int W = kPack<T>;
  const bool wide = dim % W == 0 && ep.batch_stride % W == 0 && ep.token_stride % W == 0 &&
                    aligned16({ep.out, x, ep.scale, ep.shift, ep.weight});
  if constexpr (std::is_same_v<T, __nv_bfloat16> && !kWeight) {
    if (rows > 0 && rows < INT_MAX && ltx_adaln_shape<T, kWeight>(dim, ep.token_stride, wide)) {
      packed::kernel<<<static_cast<unsigned>(rows), packed::kThreads, 0, stream>>>(
          x, ep.out, ep.scale, ep.shift, static_cast<int>(ep.tokens), ep.batch_stride, eps);
      return;
    }
  }
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
