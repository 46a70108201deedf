// gelu_tanh: flat over n elements, 4 16-byte vectors per thread (each warp access 512 contiguous
// bytes), all loads before any math; one read and one write per element; block 0 does the tail.
#include <type_traits>

#include "vec.cuh"

namespace ltx_cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // 16-byte vectors in flight per thread

// 2^t in one MUFU.EX2 (relative error ~2^-22; subnormal results flush to 0, which only makes
// 1 + 2^t == 1 a little earlier).
__device__ __forceinline__ float exp2_approx(float t) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(t));
  return r;
}

// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as x * sigmoid(2u):
// 0.5 (1 + tanh(u)) == 1 / (1 + exp(-2u)) exactly, and this form has no cancellation where
// tanh(u) is near -1 (x < -2), which would cost relative accuracy in the small negative tail.
// fp32: expf and an IEEE division (within a few ulp of the float64 formula). fp16/bf16:
// exp(-2u) = 2^(kC (x + b x^3)) in one ex2 with the constants folded, and a fast reciprocal
// (relative error ~1e-6, far below the output's rounding): about 12 instructions per element
// including the conversions, so the kernel stays memory-bound.
// The numerator is max(x, -FLT_MAX) (one FMNMX): at x = -inf the quotient is then
// -FLT_MAX / inf = -0, the limit, instead of -inf / inf = NaN; a NaN x still gives NaN through the
// denominator, +inf stays +inf, and every finite x is unchanged.
template <class T>
__device__ __forceinline__ float gelu_tanh_f32(float x) {
  constexpr float kAlpha = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kBeta = 0.044715f;
  const float num = fmaxf(x, -3.402823466e38f);
  if constexpr (std::is_same_v<T, float>) {
    const float u = kAlpha * fmaf(kBeta * x, x * x, x);
    return num / (1.0f + expf(-2.0f * u));
  } else {
    constexpr float kC = -2.0f * kAlpha * 1.4426950408889634f;   // -2 sqrt(2/pi) log2(e)
    const float e = exp2_approx(x * fmaf(kC * kBeta, x * x, kC));  // exp(-2u)
    return __fdividef(num, 1.0f + e);
  }
}

template <class T, int W>
__global__ void __launch_bounds__(kThreads) gelu_tanh_kernel(T* __restrict__ out,
                                                             const T* __restrict__ x, int64_t n) {
  const int64_t chunks = n / W;
  constexpr int64_t kPerBlock = int64_t(kThreads) * kUnroll;
  for (int64_t base = int64_t(blockIdx.x) * kPerBlock + threadIdx.x; base < chunks;
       base += int64_t(gridDim.x) * kPerBlock) {
    Vec<T, W> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * kThreads < chunks) v[u].load(x + (base + u * kThreads) * W);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * kThreads < chunks) {
        Vec<T, W> y;
#pragma unroll
        for (int i = 0; i < W; ++i) y.set(i, gelu_tanh_f32<T>(v[u].f(i)));
        y.store(out + (base + u * kThreads) * W);
      }
    }
  }
  // The n % W elements after the last whole chunk (W > 1 only).
  if (blockIdx.x == 0 && threadIdx.x < n - chunks * W) {
    const int64_t i = chunks * W + threadIdx.x;
    out[i] = from_float<T>(gelu_tanh_f32<T>(to_float(x[i])));
  }
}

template <class T, int W>
void launch(T* out, const T* x, int64_t n, cudaStream_t stream) {
  // At least one block, so that the tail of an n < W tensor is written.
  const unsigned blocks = grid_blocks(n / W > 0 ? n / W : 1, int64_t(kThreads) * kUnroll);
  gelu_tanh_kernel<T, W><<<blocks, kThreads, 0, stream>>>(out, x, n);
}

}  // namespace

void gelu_tanh(void* out, const void* x, int64_t n, DType dtype, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out);
    const T* xi = static_cast<const T*>(x);
    if (aligned16({out, x}))
      launch<T, kPack<T>>(o, xi, n, stream);
    else
      launch<T, 1>(o, xi, n, stream);
  });
}

}  // namespace ltx_cuda
