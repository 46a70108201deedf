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
// 64 threads per row hold its 4 x 16-byte vectors packed (16 registers) from the streaming load to
// the evict-first store; the epilogue unpacks them again (Vec::f_again) instead of keeping 32 fp32
// copies alive across the reduction. Every load is unconditional (a past-the-end row reads the last
// row and stores nothing), the row arithmetic is 32-bit, and the batch row of scale/shift is
// located while the loads are in flight. The sum of squares follows row_norm.cuh's order (even and
// odd columns, then their sum), so results equal the generic kernel's bit for bit. H200 figures:
// BENCHMARKS.md §1.
namespace packed {
constexpr int kGroup = 64, kVecs = 4, kRows = 2, kMinBlocks = 8;
constexpr int kDim = kGroup * kVecs * kPack<__nv_bfloat16>;  // 2048

// The two bf16 of a 32-bit word as fp32 (exact: a bf16 is the top half of its fp32).
__device__ __forceinline__ float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
__device__ __forceinline__ float lo_of(uint32_t w) { return bits_to_float(w << 16); }
__device__ __forceinline__ float hi_of(uint32_t w) { return bits_to_float(w & 0xffff0000u); }

__global__ void __launch_bounds__(kGroup * kRows, kMinBlocks)
    kernel(const __nv_bfloat16* x, __nv_bfloat16* out, const __nv_bfloat16* scale,
           const __nv_bfloat16* shift, int rows, int tokens, int64_t batch_stride, float eps) {
  using T = __nv_bfloat16;
  constexpr int W = kPack<T>, kStride = kGroup * W;
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const int row = static_cast<int>(blockIdx.x) * kRows + static_cast<int>(threadIdx.x) / kGroup;
  const bool active = row < rows;  // the last block's second row may be past the end
  const int src = active ? row : rows - 1;
  const int64_t at = int64_t(src) * kDim + lane * W;
  Vec<T, W> v[kVecs];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) v[j].load_stream(x + at + j * kStride);
  using Mod = Modulation<T, false>;
  const typename Mod::Ptrs mod = Mod::at(scale, shift, nullptr, src / tokens, 0, batch_stride, 0, lane * W);

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
  group_sum<kGroup, kGroup * kRows, 1, true>(ss);
  if (!active) return;
  const float inv_rms = rsqrtf(ss[0] / static_cast<float>(kDim) + eps);

#pragma unroll
  for (int j0 = 0; j0 < kVecs; j0 += kAuxBatch) {
    typename Mod::template Aux<W> aux[kAuxBatch];
#pragma unroll
    for (int j = 0; j < kAuxBatch; ++j) Mod::load(mod, (j0 + j) * kStride, aux[j]);
#pragma unroll
    for (int j = 0; j < kAuxBatch; ++j) {
      float n[1][W];
#pragma unroll
      for (int i = 0; i < W; ++i) n[0][i] = v[j0 + j].f_again(i) * inv_rms;
      Mod::template store<W, true>(out + at + (j0 + j) * kStride, n, aux[j]);
    }
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
      const int blocks = static_cast<int>(ceil_div(rows, packed::kRows));
      packed::kernel<<<blocks, packed::kGroup * packed::kRows, 0, stream>>>(
          x, ep.out, ep.scale, ep.shift, static_cast<int>(rows), static_cast<int>(ep.tokens),
          ep.batch_stride, eps);
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
