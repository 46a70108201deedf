// rope_interleaved_qk: flat over rows * dim; per thread 2 x (16 B of q, 16 B of k, their fp32
// cos/sin read once for both), all loads before any math; one read, one write per element.
#include "rope.cuh"
#include "vec.cuh"

namespace ltx_cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;
// Chunks per thread: 2 x (16 B of q + 16 B of k + 32 B of cos + 32 B of sin) in flight (bf16).
constexpr int kUnroll = 2;

template <class T, int W>
__global__ void __launch_bounds__(kThreads)
    rope_qk_kernel(T* __restrict__ q_out, T* __restrict__ k_out, const T* __restrict__ q,
                   const T* __restrict__ k, const float* __restrict__ cos,
                   const float* __restrict__ sin, int64_t chunks) {
  constexpr int64_t kPerBlock = int64_t(kThreads) * kUnroll;
  for (int64_t base = int64_t(blockIdx.x) * kPerBlock + threadIdx.x; base < chunks;
       base += int64_t(gridDim.x) * kPerBlock) {
    Vec<T, W> xq[kUnroll], xk[kUnroll];
    Vec<float, W> c[kUnroll], s[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t e = (base + u * kThreads) * W;  // first element of the chunk
      if (base + u * kThreads < chunks) {
        xq[u].load(q + e);
        xk[u].load(k + e);
        c[u].load(cos + e);
        s[u].load(sin + e);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t e = (base + u * kThreads) * W;
      if (base + u * kThreads < chunks) {
        float fq[W], fk[W], rq[W], rk[W];
#pragma unroll
        for (int i = 0; i < W; ++i) {
          fq[i] = xq[u].f(i);
          fk[i] = xk[u].f(i);
        }
        rotate_pairs(fq, c[u].v, s[u].v, rq);
        rotate_pairs(fk, c[u].v, s[u].v, rk);
        Vec<T, W> yq, yk;
#pragma unroll
        for (int i = 0; i < W; ++i) {
          yq.set(i, rq[i]);
          yk.set(i, rk[i]);
        }
        yq.store(q_out + e);
        yk.store(k_out + e);
      }
    }
  }
}

template <class T, int W>
void launch(T* q_out, T* k_out, const T* q, const T* k, const float* cos, const float* sin,
            int64_t n, cudaStream_t stream) {
  const int64_t chunks = n / W;
  const unsigned blocks = grid_blocks(chunks, int64_t(kThreads) * kUnroll);
  rope_qk_kernel<T, W><<<blocks, kThreads, 0, stream>>>(q_out, k_out, q, k, cos, sin, chunks);
}

}  // namespace

void rope_interleaved_qk(void* q_out, void* k_out, const void* q, const void* k, const float* cos,
                         const float* sin, int64_t rows, int64_t dim, DType dtype,
                         cudaStream_t stream) {
  const int64_t n = rows * dim;  // dim is even, so pairs never straddle rows or chunks
  if (n <= 0) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* qo = static_cast<T*>(q_out);
    T* ko = static_cast<T*>(k_out);
    const T* qi = static_cast<const T*>(q);
    const T* ki = static_cast<const T*>(k);
    // The wide path needs n % W == 0 only: chunks may run across rows, as cos/sin are [rows, dim].
    if (n % kPack<T> == 0 && aligned16({q_out, k_out, q, k, cos, sin}))
      launch<T, kPack<T>>(qo, ko, qi, ki, cos, sin, n, stream);
    else
      launch<T, 2>(qo, ko, qi, ki, cos, sin, n, stream);
  });
}

}  // namespace ltx_cuda
