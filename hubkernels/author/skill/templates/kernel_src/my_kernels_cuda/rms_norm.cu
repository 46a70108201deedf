// rms_norm: one warp per row, 4 rows per 128-thread block. Lane l holds chunks l, l + 32, ... of its
// row (16-byte words on the wide path) from the load to the write: one read, one write per element.
// Rows longer than 32 x 8 chunks take the two-pass kernel, whose second read hits L1/L2.
#include <algorithm>

#include "vec.cuh"

namespace my_kernels_cuda {
namespace {

using namespace detail;

constexpr int kRowsPerBlock = 4;  // one warp each
constexpr int kThreads = 32 * kRowsPerBlock;
constexpr int kMaxVecs = 8;  // chunks a lane keeps in registers

// Rows are grid-strided, so any grid size is correct; the loop bound is the same for the 32 lanes
// of a warp, so every lane reaches warp_sum.
__device__ __forceinline__ int64_t first_row() {
  return int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
}
__device__ __forceinline__ int64_t row_step() { return int64_t(gridDim.x) * kRowsPerBlock; }

// The row stays in registers: kVecs chunks of W elements per lane, all loaded before any math.
template <class T, int W, int kVecs>
__global__ void __launch_bounds__(kThreads)
    rms_norm_resident(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                      int64_t rows, int64_t dim, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t chunks = dim / W;
  for (int64_t row = first_row(); row < rows; row += row_step()) {
    const T* xr = x + row * dim;
    Vec<T, W> v[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j)
      if (lane + 32 * j < chunks) v[j].load(xr + (lane + 32 * j) * W);
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kVecs; ++j)
      if (lane + 32 * j < chunks)
#pragma unroll
        for (int i = 0; i < W; ++i) ss = fmaf(v[j].f(i), v[j].f(i), ss);
    const float inv_rms = rsqrtf(warp_sum(ss) / static_cast<float>(dim) + eps);
    T* yr = out + row * dim;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t c = lane + 32 * j;
      if (c >= chunks) continue;
      Vec<T, W> w, y;
      if (weight != nullptr) w.load(weight + c * W);  // the same row for every row: an L1/L2 hit
#pragma unroll
      for (int i = 0; i < W; ++i)
        y.set(i, weight != nullptr ? v[j].f(i) * inv_rms * w.f(i) : v[j].f(i) * inv_rms);
      y.store(yr + c * W);
    }
  }
}

// Any length: pass 1 sums the squares, pass 2 reads the row again (an L1/L2 hit for rows of up to
// a few hundred KB) and writes.
template <class T, int W>
__global__ void __launch_bounds__(kThreads)
    rms_norm_two_pass(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                      int64_t rows, int64_t dim, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t chunks = dim / W;
  for (int64_t row = first_row(); row < rows; row += row_step()) {
    const T* xr = x + row * dim;
    float ss = 0.0f;
    for (int64_t c = lane; c < chunks; c += 32) {
      Vec<T, W> v;
      v.load(xr + c * W);
#pragma unroll
      for (int i = 0; i < W; ++i) ss = fmaf(v.f(i), v.f(i), ss);
    }
    const float inv_rms = rsqrtf(warp_sum(ss) / static_cast<float>(dim) + eps);
    T* yr = out + row * dim;
    for (int64_t c = lane; c < chunks; c += 32) {
      Vec<T, W> v, w, y;
      v.load(xr + c * W);
      if (weight != nullptr) w.load(weight + c * W);
#pragma unroll
      for (int i = 0; i < W; ++i)
        y.set(i, weight != nullptr ? v.f(i) * inv_rms * w.f(i) : v.f(i) * inv_rms);
      y.store(yr + c * W);
    }
  }
}

// Picks the kernel from the row length in chunks of W elements.
template <class T, int W>
void launch(T* out, const T* x, const T* weight, int64_t rows, int64_t dim, float eps,
            cudaStream_t stream) {
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(blocks, int64_t(1) << 30)));
  const int64_t chunks = dim / W;
  if (chunks <= 32)
    rms_norm_resident<T, W, 1><<<grid, kThreads, 0, stream>>>(out, x, weight, rows, dim, eps);
  else if (chunks <= 64)
    rms_norm_resident<T, W, 2><<<grid, kThreads, 0, stream>>>(out, x, weight, rows, dim, eps);
  else if (chunks <= 128)
    rms_norm_resident<T, W, 4><<<grid, kThreads, 0, stream>>>(out, x, weight, rows, dim, eps);
  else if (chunks <= 32 * kMaxVecs)
    rms_norm_resident<T, W, kMaxVecs><<<grid, kThreads, 0, stream>>>(out, x, weight, rows, dim, eps);
  else
    rms_norm_two_pass<T, W><<<grid, kThreads, 0, stream>>>(out, x, weight, rows, dim, eps);
}

}  // namespace

void rms_norm(void* out, const void* x, const void* weight, int64_t rows, int64_t dim, float eps,
              DType dtype, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;  // a zero-size grid is a launch error
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out);
    const T* xi = static_cast<const T*>(x);
    const T* w = static_cast<const T*>(weight);
    // The wide path needs every row start 16-byte aligned: aligned bases and dim a multiple of W.
    if (dim % kPack<T> == 0 && aligned16(out) && aligned16(x) && aligned16(weight))
      launch<T, kPack<T>>(o, xi, w, rows, dim, eps, stream);
    else
      launch<T, 1>(o, xi, w, rows, dim, eps, stream);
  });
}

}  // namespace my_kernels_cuda
