// gated_residual: blocks of (columns x rows), one 16-byte vector of x, y and gate per thread (a
// [B,1,D] gate row is an L1 hit); one read of x and y and one write per element.
#include "vec.cuh"

namespace ltx_cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;

// out = x + y * gate, fp32 math, one rounding. blockDim = (columns, rows): threadIdx.x walks the
// row's chunks, threadIdx.y picks one of the block's rows.
template <class T, int W>
__global__ void __launch_bounds__(kThreads)
    gated_residual_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ y,
                          const T* __restrict__ gate, int64_t rows, int64_t tokens, int64_t dim,
                          int64_t gate_batch_stride, int64_t gate_token_stride) {
  const int64_t chunks = dim / W;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += int64_t(gridDim.x) * blockDim.y) {
    const int64_t b = row / tokens, s = row - b * tokens;
    const T* g = gate + b * gate_batch_stride + s * gate_token_stride;
    const int64_t off = row * dim;
    for (int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; c < chunks;
         c += int64_t(gridDim.y) * blockDim.x) {
      Vec<T, W> xv, yv, gv, o;
      xv.load(x + off + c * W);
      yv.load(y + off + c * W);
      gv.load(g + c * W);
#pragma unroll
      for (int i = 0; i < W; ++i) o.set(i, fmaf(yv.f(i), gv.f(i), xv.f(i)));
      o.store(out + off + c * W);
    }
  }
}

template <class T, int W>
void launch(T* out, const T* x, const T* y, const T* gate, int64_t rows, int64_t tokens,
            int64_t dim, int64_t gbs, int64_t gts, cudaStream_t stream) {
  const int64_t chunks = dim / W;
  // Columns per block: the row's chunks rounded up to a power of two in [32, 256]; the rest of
  // the 256 threads take further rows (short rows still fill whole blocks).
  int bx = 32;
  while (bx < kThreads && bx < chunks) bx *= 2;
  const int by = kThreads / bx;
  const dim3 block(bx, by);
  const unsigned column_blocks = grid_blocks(chunks, bx);
  const dim3 grid(grid_blocks(rows, by), column_blocks < 65535 ? column_blocks : 65535);
  gated_residual_kernel<T, W>
      <<<grid, block, 0, stream>>>(out, x, y, gate, rows, tokens, dim, gbs, gts);
}

}  // namespace

void gated_residual(void* out, const void* x, const void* y, const void* gate, int64_t rows,
                    int64_t tokens, int64_t dim, int64_t gate_batch_stride,
                    int64_t gate_token_stride, DType dtype, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int W = kPack<T>;
    T* o = static_cast<T*>(out);
    const T* xi = static_cast<const T*>(x);
    const T* yi = static_cast<const T*>(y);
    const T* g = static_cast<const T*>(gate);
    const bool wide = dim % W == 0 && gate_batch_stride % W == 0 && gate_token_stride % W == 0 &&
                      aligned16({out, x, y, gate});
    if (wide)
      launch<T, W>(o, xi, yi, g, rows, tokens, dim, gate_batch_stride, gate_token_stride, stream);
    else
      launch<T, 1>(o, xi, yi, g, rows, tokens, dim, gate_batch_stride, gate_token_stride, stream);
  });
}

}  // namespace ltx_cuda
