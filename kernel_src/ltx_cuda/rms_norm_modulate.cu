// rms_norm_modulate: the rms_norm row shape (row in registers, one read and one write of x); the
// scale/shift rows ([B,1,D]: L1/L2 hits) are read after the reduction, two vectors at a time.
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
  // x skips L1 (so the scale/shift rows stay there) and y is stored evict-first, with registers
  // capped at 8 blocks of 128 threads per SM (56 instead of 72). H200, bf16 [2,6144,2048]
  // (2026-11-30): 29.1 us against 29.4-29.7 without (LTX's exact shape now takes `packed` below).
  // With a weight the cap would spill (sm_90, bf16).
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

// LTX-Video's AdaLN exactly: bf16 rows of 2048, one [B,1,D] scale/shift row per batch, no weight.
// One row per block of 128 threads, each holding 2 of the row's 256 16-byte chunks packed
// (8 registers) from the load to the store; the epilogue unpacks them again (Vec::f_again). The cap
// of 12 blocks per SM (40 registers) keeps 1536 threads' loads in flight, and the loads and stores
// are plain, so the kernel's own lines displace what earlier kernels left in the L2 rather than
// being served by it. The row arithmetic is 32-bit; the batch row of scale/shift is located while
// the loads are in flight.
//
// Same bits as the generic kernel's default shape (64 threads x 4 chunks, which the fused
// add_rms_norm_modulate uses and is checked against): there, thread l < 64 sums x^2 over chunks
// l, l+64, l+128, l+192 in two fmaf chains (even and odd columns), then a butterfly over l = 0..31
// and one over l = 32..63 are added. Here the chain of l is split across one warp: lane l%16 ("front")
// holds chunks l and l+64 of l = 16 * warp + lane % 16, lane 16 + l%16 ("back") chunks l+128 and
// l+192; the back lane continues the front lane's chains, and after one barrier every thread repeats
// the two butterflies on the 64 sums. Each load instruction of a warp covers two aligned 256-byte
// spans. H200 figures and the 64-thread streaming kernel it replaced: BENCHMARKS.md §1.
namespace packed {
constexpr int kThreads = 128, kMinBlocks = 12;
constexpr int kDim = 2048, kChunks = kDim / kPack<__nv_bfloat16>;  // 256 chunks of 16 bytes

// The two bf16 of a 32-bit word as fp32 (exact: a bf16 is the top half of its fp32).
__device__ __forceinline__ float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
__device__ __forceinline__ float lo_of(uint32_t w) { return bits_to_float(w << 16); }
__device__ __forceinline__ float hi_of(uint32_t w) { return bits_to_float(w & 0xffff0000u); }

// The even- and odd-column fmaf chains of x^2 continued over one chunk, in column order.
template <class V>
__device__ __forceinline__ void sum_squares(const V& v, float& even, float& odd) {
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    uint32_t word;
    memcpy(&word, reinterpret_cast<const char*>(v.v) + 4 * w, 4);
    even = fmaf(lo_of(word), lo_of(word), even);
    odd = fmaf(hi_of(word), hi_of(word), odd);
  }
}

__global__ void __launch_bounds__(kThreads, kMinBlocks)
    kernel(const __nv_bfloat16* x, __nv_bfloat16* out, const __nv_bfloat16* scale,
           const __nv_bfloat16* shift, int tokens, int64_t batch_stride, float eps) {
  using T = __nv_bfloat16;
  constexpr int W = kPack<T>, kQuarter = kChunks / 4 * W;  // columns between a thread's chunks: 64 chunks
  const int t = static_cast<int>(threadIdx.x), lane = t % 32;
  const bool back = lane >= 16;
  const int l = t / 32 * 16 + lane % 16;                  // the generic kernel's thread of this chain
  const int col = (l + (back ? kChunks / 2 : 0)) * W;     // first column of this thread's first chunk
  const int row = static_cast<int>(blockIdx.x);           // the grid has exactly one block per row
  const int64_t at = int64_t(row) * kDim + col;
  Vec<T, W> v[2];
  v[0].load(x + at);
  v[1].load(x + at + kQuarter);
  using Mod = Modulation<T, false>;
  const typename Mod::Ptrs mod = Mod::at(scale, shift, nullptr, row / tokens, 0, batch_stride, 0, col);

  float even = 0.0f, odd = 0.0f;
  if (!back) {
    sum_squares(v[0], even, odd);
    sum_squares(v[1], even, odd);
  }
  even = __shfl_sync(0xffffffffu, even, lane % 16);  // the back lane takes over its front lane's chains
  odd = __shfl_sync(0xffffffffu, odd, lane % 16);
  __shared__ float sums[kChunks / 4];  // x^2 over chunks l, l+64, l+128, l+192, by l
  if (back) {
    sum_squares(v[0], even, odd);
    sum_squares(v[1], even, odd);
    sums[l] = even + odd;
  }
  __syncthreads();
  const float first = warp_sum(sums[lane]), second = warp_sum(sums[32 + lane]);
  const float inv_rms = rsqrtf((0.0f + first + second) / static_cast<float>(kDim) + eps);

  typename Mod::template Aux<W> aux[2];
  Mod::load(mod, 0, aux[0]);
  Mod::load(mod, kQuarter, aux[1]);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    float n[1][W];
#pragma unroll
    for (int i = 0; i < W; ++i) n[0][i] = v[j].f_again(i) * inv_rms;
    Mod::template store<W>(out + at + j * kQuarter, n, aux[j]);
  }
}

// Whether `launch` below takes this kernel (the generic one otherwise; LTX_ROW_GROUP sweeps the
// generic shapes, so it switches this one off).
bool fits(int64_t rows, int64_t dim, int64_t token_stride, bool wide) {
  return wide && dim == kDim && token_stride == 0 && rows < INT_MAX && row_group_override() == 0;
}
}  // namespace packed

template <class T, bool kWeight>
void launch(const ModulateEpilogue<T, kWeight>& ep, const T* x, int64_t rows, int64_t dim,
            float eps, cudaStream_t stream) {
  constexpr int W = kPack<T>;
  const bool wide = dim % W == 0 && ep.batch_stride % W == 0 && ep.token_stride % W == 0 &&
                    aligned16({ep.out, x, ep.scale, ep.shift, ep.weight});
  if constexpr (std::is_same_v<T, __nv_bfloat16> && !kWeight) {
    if (rows > 0 && packed::fits(rows, dim, ep.token_stride, wide)) {
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
