// row_norm.cuh: the skeleton of the row ops (rms_norm, rms_norm_modulate, add_rms_norm_modulate,
// qk_rms_norm_rope, qk_rms_norm_rope_grid). A group of threads owns one row of K tensors (K = 2: q
// and k share the row index and the RoPE angles), sums x^2 in fp32, and hands
// x * rsqrt(mean(x^2) + eps) to the op's epilogue, which applies weight / modulation / RoPE and writes.
//
// Epilogue contract (rms_norm.cu has the smallest one):
//   struct Ep {
//     static constexpr int kNarrow;     // chunk width of the fallback path (2: whole RoPE pairs)
//     static constexpr bool kPrefetch;  // Aux streams from HBM (cos/sin): load it together with x
//     static constexpr bool kResidual;  // the residual prologue below (add_rms_norm_modulate)
//     static constexpr bool kStreamX;   // load x with Vec::load_stream (skip L1) instead of Vec::load
//     static constexpr int kMinBlocks;  // blocks per SM the registers must allow (shapes of <= 4
//                                       // vectors a thread; 1 = no cap)
//     static constexpr int kPairGroup;  // K = 2 only: threads per row for rows of 129..256 chunks,
//                                       // 128 (2 vectors of q and of k) or 256 (1 vector)
//     static constexpr int kPairRows;   // K = 2, kPairGroup = 256 only: rows a block walks, pipelined
//                                       // (row_norm_pipelined_kernel); 1 = the resident kernel
//     struct Row {...};                 // pointers to column `col0` of row r, computed once
//     __device__ Row row(int64_t r, int64_t col0) const;
//     template <int W> struct Aux {...};  // what it reads for W columns (weight, cos, ...)
//     template <int W> __device__ void load(const Row&, int64_t off, Aux<W>&) const;
//     template <int W> __device__ void store(const Row&, int64_t off, const float (&v)[K][W],
//                                            const Aux<W>&) const;
//   };
// v holds the normalised fp32 values of columns [col0 + off, col0 + off + W) of the row, one array
// per tensor. In the resident kernel `off` is a compile-time constant, so each access is one base
// register plus an immediate offset.
//
// kPairGroup = 256 suits qk_rms_norm_rope_grid, whose epilogue is ALU work that more warps hide.
//
// Residual prologue (K = 1; add_rms_norm_modulate.cu): the row that is normalised is
// h = x + y (* gate), which the op also returns. An epilogue with kResidual = true adds
//     template <int W> struct Res {...};  // y (and gate) for W columns
//     template <int W> __device__ void load_residual(const Row&, int64_t off, Res<W>&) const;
//     template <int W> __device__ void residual(const Row&, int64_t off, const Res<W>&,
//                                               Vec<T, W>& x) const;  // x := h, rounded; stores h
//     template <int W> __device__ void reload(const Row&, int64_t off, Vec<T, W>& x) const;
// The resident kernel loads all of x, then all of y (and gate), then combines: the HBM loads stay
// together. The two-pass kernel forms and stores h in pass 1 and reloads it in pass 2 with a
// coherent load (the thread reads back its own stores; ld.global.nc could return stale data).
//
// Where Aux is loaded is a register budget. With kPrefetch every chunk's Aux is loaded with x,
// before the reduction, so the HBM latencies overlap (qk_rms_norm_rope: cos/sin are 2/3 of the
// bytes read). Otherwise Aux is L1/L2-resident (weight, [B,1,D] scale/shift) and is loaded after
// the reduction, kAuxBatch chunks at a time, so registers hold x and little else: x in flight per
// SM is what keeps HBM busy. Such an epilogue loads with Vec::load_ordered, which the compiler
// cannot move above the previous batch's stores (with ld.global.nc it hoists every load to the
// top: 106 -> 179 registers for bf16 modulate).
#pragma once

#include <type_traits>

#include "vec.cuh"

namespace ltx_cuda::detail {

// The row inputs: K tensors of `rows` x `dim`, contiguous, sharing a row index.
template <class T, int K>
struct RowInputs {
  const T* x[K];
};

// A block runs at least 4 warps: groups smaller than 128 threads share a block, one row each.
__host__ __device__ constexpr int rows_per_block(int group) {
  return group >= 128 ? 1 : 128 / group;
}
__host__ __device__ constexpr int block_threads(int group) { return group * rows_per_block(group); }

// Chunks whose (L1/L2-resident) Aux a resident thread loads at once after the reduction.
constexpr int kAuxBatch = 2;

// Blocks per SM the resident kernel's registers must allow (__launch_bounds__'s second argument):
// the epilogue's kMinBlocks for shapes of up to 4 vectors a thread, else 1.
template <class Ep, int kVecs>
constexpr int min_blocks() {
  return kVecs <= 4 ? Ep::kMinBlocks : 1;
}

// The resident kernels sum x^2 of a thread's chunks in two fmaf chains, the even and the odd columns
// in chunk order, then add them: packed kernels that must give the same bits (rms_norm_modulate.cu)
// sum in this order too. W is even on the wide path (8 or 4 elements a vector). Two chains halve
// the dependent fmaf latency.
template <int kVecs, class T, int W>
__device__ __forceinline__ float sum_squares(const Vec<T, W>* x) {
  float even = 0.0f, odd = 0.0f;
#pragma unroll
  for (int j = 0; j < kVecs; ++j)
#pragma unroll
    for (int i = 0; i < W; i += 2) {
      even = fmaf(x[j].f(i), x[j].f(i), even);
      odd = fmaf(x[j].f(i + 1), x[j].f(i + 1), odd);
    }
  return even + odd;
}

// 1 / rms of a row from its sum of squares (every row kernel's, so their outputs agree).
__device__ __forceinline__ float inv_rms_of(float ss, int64_t dim, float eps) {
  return rsqrtf(ss / static_cast<float>(dim) + eps);
}

// Register-resident: thread `lane` of the row's group holds chunks lane, lane + kGroup, ...
// (kVecs of them, W elements each) of every tensor from the load to the write, so x is read once.
// A warp's loads of one chunk index cover 32 * W consecutive elements (fully coalesced).
// One row per group and no grid-stride loop: nothing is kept live across rows.
template <class T, int W, int kGroup, int kVecs, int K, class Ep>
__global__ void __launch_bounds__(block_threads(kGroup), (min_blocks<Ep, kVecs>()))
    row_norm_resident_kernel(RowInputs<T, K> in, Ep ep, int64_t rows, int64_t dim, float eps) {
  static_assert(W % 2 == 0, "the wide path: even and odd columns");
  constexpr int kRows = rows_per_block(kGroup);
  constexpr int kStride = kGroup * W;  // columns between a thread's consecutive chunks
  const int64_t first = linear_block_index() * kRows;
  if (first >= rows) return;  // whole block: no group_sum partner is left waiting
  const int lane = threadIdx.x % kGroup;
  const int64_t row = first + threadIdx.x / kGroup;
  const int64_t chunks = dim / W;
  const int64_t col0 = int64_t(lane) * W;  // this thread's first column
  // Chunks j < n of this thread lie inside the row (n = 0 past the last row: such threads only
  // take part in the reduction).
  int n = 0;
  if (row < rows && lane < chunks)
    n = static_cast<int>(min(int64_t(kVecs), (chunks - lane + kGroup - 1) / kGroup));

  // Every HBM load of the row first: x, then (kPrefetch) the epilogue's streamed operands.
  const auto rp = ep.row(row, col0);  // formed for rows past the end too, never dereferenced
  Vec<T, W> x[K][kVecs];
  typename Ep::template Aux<W> aux[kVecs];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const T* xr = in.x[k] + row * dim + col0;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      if (j >= n)
        x[k][j].zero();
      else if constexpr (Ep::kStreamX)
        x[k][j].load_stream(xr + j * kStride);
      else
        x[k][j].load(xr + j * kStride);
    }
  }
  if constexpr (Ep::kResidual) {
    static_assert(K == 1, "a residual prologue serves one tensor");
    typename Ep::template Res<W> res[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j)
      if (j < n) ep.load_residual(rp, j * kStride, res[j]);
#pragma unroll
    for (int j = 0; j < kVecs; ++j)
      if (j < n) ep.residual(rp, j * kStride, res[j], x[0][j]);  // x := h (rounded), h stored
  }
  if constexpr (Ep::kPrefetch) {
#pragma unroll
    for (int j = 0; j < kVecs; ++j)
      if (j < n) ep.load(rp, j * kStride, aux[j]);
  }

  float ss[K];
#pragma unroll
  for (int k = 0; k < K; ++k) ss[k] = sum_squares<kVecs>(x[k]);
  group_sum<kGroup, block_threads(kGroup)>(ss);
  float inv_rms[K];
#pragma unroll
  for (int k = 0; k < K; ++k) inv_rms[k] = inv_rms_of(ss[k], dim, eps);

  constexpr int kBatch = Ep::kPrefetch || kVecs < kAuxBatch ? kVecs : kAuxBatch;
  static_assert(kVecs % kBatch == 0, "batches tile the thread's chunks");
#pragma unroll
  for (int j0 = 0; j0 < kVecs; j0 += kBatch) {
    if constexpr (!Ep::kPrefetch) {
#pragma unroll
      for (int j = j0; j < j0 + kBatch; ++j)
        if (j < n) ep.load(rp, j * kStride, aux[j]);
    }
#pragma unroll
    for (int j = j0; j < j0 + kBatch; ++j) {
      if (j < n) {
        float v[K][W];
#pragma unroll
        for (int k = 0; k < K; ++k)
#pragma unroll
          for (int i = 0; i < W; ++i) v[k][i] = x[k][j].f(i) * inv_rms[k];
        ep.store(rp, j * kStride, v, aux[j]);
      }
    }
  }
}

// Pipelined (K tensors, one vector of each per thread: rows of kGroup chunks or fewer): a block of
// kGroup threads takes kRows consecutive rows and copies row i + 1's x into shared memory (cp.async,
// no registers held) while it reduces and writes row i, so only the first row's HBM latency is
// exposed (the resident kernel exposes it once per row). Each thread reads back only the words it
// copied, so the ring needs no barrier. The sums are the resident kernel's with kVecs = 1: the
// output is the same to the bit. qk_rms_norm_rope_grid on the H200: 62.9 against 67.8 µs; the next
// row held in registers instead took 65.5 (64 registers, spilling) or 78 (96 uncapped, 2 blocks).
// The walk, for this kernel and for variants with another ending: `finish(row, rp, has, x, ss, aux)` gets each
// row's x, its sums of squares over the row and the epilogue's aux values.
template <class T, int W, int kGroup, int kRows, int K, class Ep, class Finish>
__device__ __forceinline__ void walk_rows_pipelined(const RowInputs<T, K>& in, const Ep& ep, int64_t rows,
                                                    int64_t dim, const Finish& finish) {
  static_assert(W % 2 == 0, "the wide path: even and odd columns");
  __shared__ uint4 ring[2][K][kGroup];  // [row % 2][tensor][thread]: one 16-byte vector each
  const int64_t first = linear_block_index() * kRows;
  if (first >= rows) return;  // whole block
  const int64_t col0 = int64_t(threadIdx.x) * W;
  const bool has = col0 < dim;  // dim is a multiple of W on the wide path
  const int64_t last = min(rows, first + kRows);
  const auto fetch = [&](int64_t row) {  // one commit group per row, empty past the last
    if (has && row < last) {
#pragma unroll
      for (int k = 0; k < K; ++k)
        copy_async<T, W>(&ring[(row - first) % 2][k][threadIdx.x], in.x[k] + row * dim + col0);
    }
    async_commit();
  };
  fetch(first);
#pragma unroll 1
  for (int64_t row = first; row < last; ++row) {  // the same trip count for the whole block
    fetch(row + 1);
    async_wait<1>();  // row's group has landed; row + 1's may still be in flight
    Vec<T, W> x[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (has)
        x[k].load_ordered(reinterpret_cast<const T*>(&ring[(row - first) % 2][k][threadIdx.x]));
      else
        x[k].zero();
    }
    const auto rp = ep.row(row, col0);
    typename Ep::template Aux<W> aux;
    if (has) ep.load(rp, 0, aux);
    float ss[K];
#pragma unroll
    for (int k = 0; k < K; ++k) ss[k] = sum_squares<1>(&x[k]);
    group_sum<kGroup, kGroup>(ss);
    finish(row, rp, has, x, ss, aux);
  }
}

template <class T, int W, int kGroup, int kRows, int K, class Ep>
__global__ void __launch_bounds__(kGroup, 4)
    row_norm_pipelined_kernel(RowInputs<T, K> in, Ep ep, int64_t rows, int64_t dim, float eps) {
  walk_rows_pipelined<T, W, kGroup, kRows, K>(
      in, ep, rows, dim,
      [&](int64_t, const auto& rp, bool has, const Vec<T, W>(&x)[K], const float(&ss)[K], const auto& aux) {
        if (!has) return;
        float v[K][W];
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const float inv_rms = inv_rms_of(ss[k], dim, eps);
#pragma unroll
          for (int i = 0; i < W; ++i) v[k][i] = x[k].f(i) * inv_rms;
        }
        ep.store(rp, 0, v, aux);
      });
}

template <class T, int W, int kGroup, int kRows, int K, class Ep>
void launch_pipelined(const RowInputs<T, K>& in, const Ep& ep, int64_t rows, int64_t dim, float eps,
                      cudaStream_t stream) {
  if (rows <= 0) return;  // a zero-size grid is a launch error
  const dim3 grid = linear_grid(ceil_div(rows, kRows));
  row_norm_pipelined_kernel<T, W, kGroup, kRows, K, Ep><<<grid, kGroup, 0, stream>>>(in, ep, rows, dim, eps);
}

// Two passes: for rows too long to hold in registers, and for the narrow (unaligned) path. Pass 1
// sums x^2, pass 2 reads x again (an L1/L2 hit for rows of up to a few hundred KB) and writes.
// With a residual prologue pass 1 also forms and stores h, and pass 2 reads h back instead of x.
template <class T, int W, int kGroup, int K, class Ep>
__global__ void __launch_bounds__(block_threads(kGroup), 1)
    row_norm_two_pass_kernel(RowInputs<T, K> in, Ep ep, int64_t rows, int64_t dim, float eps) {
  constexpr int kRows = rows_per_block(kGroup);
  const int64_t first = linear_block_index() * kRows;
  if (first >= rows) return;  // whole block
  const int lane = threadIdx.x % kGroup;
  const int64_t row = first + threadIdx.x / kGroup;
  const bool active = row < rows;
  const int64_t chunks = dim / W;
  const auto rp = ep.row(row, 0);  // formed for rows past the end too, never dereferenced

  float ss[K];
#pragma unroll
  for (int k = 0; k < K; ++k) ss[k] = 0.0f;
  if (active) {
#pragma unroll 4
    for (int64_t c = lane; c < chunks; c += kGroup) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        Vec<T, W> x;
        x.load(in.x[k] + row * dim + c * W);
        if constexpr (Ep::kResidual) {
          typename Ep::template Res<W> res;
          ep.load_residual(rp, c * W, res);
          ep.residual(rp, c * W, res, x);  // x := h (rounded), h stored
        }
#pragma unroll
        for (int i = 0; i < W; ++i) ss[k] = fmaf(x.f(i), x.f(i), ss[k]);
      }
    }
  }
  group_sum<kGroup, block_threads(kGroup)>(ss);
  if (!active) return;
  float inv_rms[K];
#pragma unroll
  for (int k = 0; k < K; ++k) inv_rms[k] = inv_rms_of(ss[k], dim, eps);

  for (int64_t c = lane; c < chunks; c += kGroup) {
    typename Ep::template Aux<W> aux;
    ep.load(rp, c * W, aux);
    float v[K][W];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      Vec<T, W> x;
      if constexpr (Ep::kResidual)
        ep.reload(rp, c * W, x);  // this thread's own h from pass 1
      else
        x.load(in.x[k] + row * dim + c * W);
#pragma unroll
      for (int i = 0; i < W; ++i) v[k][i] = x.f(i) * inv_rms[k];
    }
    ep.store(rp, c * W, v, aux);
  }
}

template <class T, int W, int kGroup, int kVecs, int K, class Ep>
void launch_resident(const RowInputs<T, K>& in, const Ep& ep, int64_t rows, int64_t dim, float eps,
                     cudaStream_t stream) {
  const dim3 grid = linear_grid(ceil_div(rows, rows_per_block(kGroup)));
  row_norm_resident_kernel<T, W, kGroup, kVecs, K, Ep>
      <<<grid, block_threads(kGroup), 0, stream>>>(in, ep, rows, dim, eps);
}

template <class T, int W, int kGroup, int K, class Ep>
void launch_two_pass(const RowInputs<T, K>& in, const Ep& ep, int64_t rows, int64_t dim, float eps,
                     cudaStream_t stream) {
  const dim3 grid = linear_grid(ceil_div(rows, rows_per_block(kGroup)));
  row_norm_two_pass_kernel<T, W, kGroup, K, Ep>
      <<<grid, block_threads(kGroup), 0, stream>>>(in, ep, rows, dim, eps);
}

// Picks the launch shape from dim. `wide`: every row-indexed pointer is 16-byte aligned and dim is
// a multiple of kPack<T> (the caller checks its own pointers and strides). A thread holds at most
// 8 16-byte vectors of x for K = 1 and 2 per tensor for K = 2 (where cos/sin, twice the bytes of
// x, are in registers too): one warp per row up to 1024 bf16, two warps (4 vectors a lane) for
// 1025..2048 bf16 (LTX's width: the fastest of the four shapes timed, docs/kernels.md), else
// 64..512 threads per row, else two passes. kPackedOrder (K = 1): the caller may pass
// packed_order = true to get 128 threads x 2 vectors for that 1025..2048 class instead, which sums
// in the order of rms_norm_modulate's packed kernel; other callers do not instantiate that shape.
template <class T, int K, bool kPackedOrder = false, class Ep>
void launch_row_norm(const RowInputs<T, K>& in, const Ep& ep, int64_t rows, int64_t dim, float eps,
                     bool wide, cudaStream_t stream, bool packed_order = false) {
  if (rows <= 0 || dim <= 0) return;  // a zero-size grid is a launch error
  if (!wide) {
    constexpr int N = Ep::kNarrow;
    if (dim / N <= 1024)
      launch_two_pass<T, N, 32, K>(in, ep, rows, dim, eps, stream);
    else
      launch_two_pass<T, N, 256, K>(in, ep, rows, dim, eps, stream);
    return;
  }
  constexpr int W = kPack<T>;
  const int64_t chunks = dim / W;
  if constexpr (K == 1) {
    if (chunks <= 32) return launch_resident<T, W, 32, 1>(in, ep, rows, dim, eps, stream);
    if (chunks <= 64) return launch_resident<T, W, 32, 2>(in, ep, rows, dim, eps, stream);
    if (chunks <= 128) return launch_resident<T, W, 32, 4>(in, ep, rows, dim, eps, stream);
    if (chunks <= 256) {
      if constexpr (kPackedOrder) {
        if (packed_order) return launch_resident<T, W, 128, 2>(in, ep, rows, dim, eps, stream);
      }
      return launch_resident<T, W, 64, 4>(in, ep, rows, dim, eps, stream);
    }
    if (chunks <= 512) return launch_resident<T, W, 64, 8>(in, ep, rows, dim, eps, stream);
    if (chunks <= 1024) return launch_resident<T, W, 128, 8>(in, ep, rows, dim, eps, stream);
    if (chunks <= 2048) return launch_resident<T, W, 256, 8>(in, ep, rows, dim, eps, stream);
  } else {
    static_assert(K == 2, "rows of one or two tensors");
    if (chunks <= 32) return launch_resident<T, W, 32, 1>(in, ep, rows, dim, eps, stream);
    if (chunks <= 64) return launch_resident<T, W, 32, 2>(in, ep, rows, dim, eps, stream);
    if (chunks <= 128) return launch_resident<T, W, 64, 2>(in, ep, rows, dim, eps, stream);
    constexpr int kPair = Ep::kPairGroup;
    static_assert(kPair == 128 || kPair == 256, "129..256 chunks: 128 or 256 threads per row");
    if (chunks <= 256) {
      if constexpr (kPair == 256 && Ep::kPairRows > 1)
        return launch_pipelined<T, W, 256, Ep::kPairRows, 2>(in, ep, rows, dim, eps, stream);
      else
        return launch_resident<T, W, kPair, 256 / kPair, 2>(in, ep, rows, dim, eps, stream);
    }
    if (chunks <= 512) return launch_resident<T, W, 256, 2>(in, ep, rows, dim, eps, stream);
    if (chunks <= 1024) return launch_resident<T, W, 512, 2>(in, ep, rows, dim, eps, stream);
  }
  launch_two_pass<T, W, 256, K>(in, ep, rows, dim, eps, stream);
}

}  // namespace ltx_cuda::detail
