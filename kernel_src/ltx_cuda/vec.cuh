// vec.cuh: what every LTX CUDA op shares: a vector of N elements moved as 16-byte words when it is
// 16 bytes wide, fp32 conversions, the warp / row-group sum, dtype dispatch, launch arithmetic.
// Device code only needs the CUDA headers (no ATen); torch's -D__CUDA_NO_HALF_*__ flags are fine
// because every conversion below is an explicit intrinsic.
#pragma once

#include <climits>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ltx_cuda.h"

namespace ltx_cuda::detail {

// ---- fp32 conversions (one rounding, round-to-nearest-even) -------------------------------------

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(x);
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "T must be float, __half or __nv_bfloat16");
    return __float2bfloat16_rn(x);
  }
}

// ---- Vec: N consecutive elements held in registers ----------------------------------------------

// Elements per 16-byte vector: 8 for fp16/bf16, 4 for fp32. The "wide" path of every op uses this.
template <class T>
inline constexpr int kPack = 16 / sizeof(T);

// N consecutive elements. When the N elements are a multiple of 16 bytes (the wide path) they are
// loaded and stored as 16-byte words (LDG.128 / STG.128), so the address must be 16-byte aligned;
// otherwise element by element (the narrow fallback path: any alignment, any size).
template <class T, int N>
struct alignas((sizeof(T) * N) % 16 == 0 ? 16 : alignof(T)) Vec {
  static constexpr int kBytes = static_cast<int>(sizeof(T)) * N;
  static constexpr bool kWide = kBytes % 16 == 0;
  T v[N];

  // Read-only loads go through the non-coherent path (ld.global.nc); inputs never alias outputs.
  // 16-byte words move in and out of v by memcpy (no type punning; it compiles to register moves).
  __device__ __forceinline__ void load(const T* p) {
    if constexpr (kWide) {
#pragma unroll
      for (int w = 0; w < kBytes / 16; ++w) {
        const uint4 word = __ldg(reinterpret_cast<const uint4*>(p) + w);
        memcpy(reinterpret_cast<char*>(v) + 16 * w, &word, 16);
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = __ldg(p + i);
    }
  }

  // A plain (coherent) load. The compiler keeps it after this thread's earlier stores (it cannot
  // prove they do not alias), which is how the row kernels stop it from hoisting every operand
  // load to the top of the kernel and spending the registers that should hold rows in flight.
  __device__ __forceinline__ void load_ordered(const T* p) {
    if constexpr (kWide) {
#pragma unroll
      for (int w = 0; w < kBytes / 16; ++w) {
        const uint4 word = reinterpret_cast<const uint4*>(p)[w];
        memcpy(reinterpret_cast<char*>(v) + 16 * w, &word, 16);
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = p[i];
    }
  }

  // Streaming variants for a row op's x and output (16-byte words; element-wise as above
  // otherwise): the load takes the non-coherent path without allocating in L1
  // (ld.global.nc.L1::no_allocate), so x does not evict the small L1-resident operands; the store
  // is evict-first (st.global.cs). Inline PTX on the device; plain accesses in host compiles.
  __device__ __forceinline__ void load_stream(const T* p) {
    if constexpr (kWide) {
#pragma unroll
      for (int w = 0; w < kBytes / 16; ++w) {
        uint4 word;
#if defined(__CUDA_ARCH__)
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(word.x), "=r"(word.y), "=r"(word.z), "=r"(word.w)
                     : "l"(reinterpret_cast<const uint4*>(p) + w));
#else
        word = reinterpret_cast<const uint4*>(p)[w];
#endif
        memcpy(reinterpret_cast<char*>(v) + 16 * w, &word, 16);
      }
    } else {
      load(p);
    }
  }
  __device__ __forceinline__ void store_stream(T* p) const {
    if constexpr (kWide) {
#pragma unroll
      for (int w = 0; w < kBytes / 16; ++w) {
        uint4 word;
        memcpy(&word, reinterpret_cast<const char*>(v) + 16 * w, 16);
#if defined(__CUDA_ARCH__)
        asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
                     :: "l"(reinterpret_cast<uint4*>(p) + w), "r"(word.x), "r"(word.y), "r"(word.z),
                        "r"(word.w)
                     : "memory");
#else
        reinterpret_cast<uint4*>(p)[w] = word;
#endif
      }
    } else {
      store(p);
    }
  }

  __device__ __forceinline__ void store(T* p) const {
    if constexpr (kWide) {
#pragma unroll
      for (int w = 0; w < kBytes / 16; ++w) {
        uint4 word;
        memcpy(&word, reinterpret_cast<const char*>(v) + 16 * w, 16);
        reinterpret_cast<uint4*>(p)[w] = word;
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) p[i] = v[i];
    }
  }

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = from_float<T>(0.0f);
  }

  __device__ __forceinline__ float f(int i) const { return to_float(v[i]); }

  // f(i) once more, spelled so that the compiler computes it again from the packed 16-bit word
  // instead of keeping the fp32 value of an earlier f(i) alive: a bf16 row held across its
  // reduction then takes 4 registers per 16-byte vector instead of 8 (a byte permute here, a
  // shift or mask in f). Other types: f(i).
  __device__ __forceinline__ float f_again(int i) const {
    if constexpr (std::is_same_v<T, __nv_bfloat16> && kWide) {
#if defined(__CUDA_ARCH__)
      uint32_t word, r;
      memcpy(&word, reinterpret_cast<const char*>(v) + 4 * (i / 2), 4);
      if (i % 2 == 0)
        asm("prmt.b32 %0, %1, 0, 0x1044;" : "=r"(r) : "r"(word));  // bytes 0, 0, w.b0, w.b1
      else
        asm("prmt.b32 %0, %1, 0, 0x3244;" : "=r"(r) : "r"(word));  // bytes 0, 0, w.b2, w.b3
      return __uint_as_float(r);
#else
      return f(i);
#endif
    } else {
      return f(i);
    }
  }
  __device__ __forceinline__ void set(int i, float x) { v[i] = from_float<T>(x); }
};

// ---- asynchronous copies (cp.async: global to shared, not through registers) --------------------

// Starts copying the 16-byte words of a wide Vec<T, N> at global p to shared dst (16-byte aligned).
// The copies a thread started before its async_commit() form one group; async_wait<n>() returns
// once all but the thread's n most recent groups have landed, and the thread may then read them.
// Host compiles (the CPU emulation) copy at once and wait for nothing; the empty #else branches are the
// shape tests/ltx/cuda_emu/harness.py strips device-only code by.
template <class T, int N>
__device__ __forceinline__ void copy_async(void* dst, const T* p) {
  static_assert(Vec<T, N>::kWide, "whole 16-byte words");
#pragma unroll
  for (int w = 0; w < Vec<T, N>::kBytes / 16; ++w) {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<uint32_t>(
                     __cvta_generic_to_shared(static_cast<char*>(dst) + 16 * w))),
                 "l"(reinterpret_cast<const uint4*>(p) + w)
                 : "memory");
#else
    memcpy(static_cast<char*>(dst) + 16 * w, reinterpret_cast<const uint4*>(p) + w, 16);
#endif
  }
}
__device__ __forceinline__ void async_commit() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;" ::: "memory");
#else
#endif
}
template <int kPending>
__device__ __forceinline__ void async_wait() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
#else
#endif
}

// ---- reductions ---------------------------------------------------------------------------------

// Sum over the 32 lanes of a warp; every lane gets the total (same order on every lane).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// THE block reduction of this library: sums v[0..K) over each group of kGroup consecutive threads
// (kGroup = 32, or a multiple of 32 dividing kBlock = blockDim.x); every thread gets its group's
// totals, in the same order on every thread. For kGroup > 32 it synchronises the block, so every
// thread of the block must call it (threads without work pass zeros; none may return early).
// kOnce: the kernel calls it once, so `partial` needs no barrier after its last read.
template <int kGroup, int kBlock, int K, bool kOnce = false>
__device__ __forceinline__ void group_sum(float (&v)[K]) {
  static_assert(kGroup % 32 == 0 && kBlock % kGroup == 0, "groups: whole warps tiling the block");
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum(v[k]);
  if constexpr (kGroup > 32) {
    constexpr int kWarpsPerGroup = kGroup / 32;
    __shared__ float partial[kBlock / 32][K];
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) {
#pragma unroll
      for (int k = 0; k < K; ++k) partial[warp][k] = v[k];
    }
    __syncthreads();
    const int first = warp / kWarpsPerGroup * kWarpsPerGroup;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarpsPerGroup; ++w) total += partial[first + w][k];
      v[k] = total;
    }
    if constexpr (!kOnce) __syncthreads();  // `partial` is free again for a second call
  }
}

// ---- host-side helpers --------------------------------------------------------------------------

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with T the element type of `dtype`. The binding only passes the three
// values of DType, so there is no other case to handle.
template <class F>
void dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32: f(TypeTag<float>{}); break;
    case DType::F16: f(TypeTag<__half>{}); break;
    case DType::BF16: f(TypeTag<__nv_bfloat16>{}); break;
  }
}

// True when every pointer is 16-byte aligned (nullptr counts as aligned: an absent weight).
inline bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return true;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride launch over `work` items at `per_block` items per block: the kernels
// that use it loop, so capping at the grid-size limit keeps any size correct.
inline unsigned grid_blocks(int64_t work, int64_t per_block) {
  const int64_t blocks = ceil_div(work, per_block);
  return static_cast<unsigned>(blocks < INT_MAX ? blocks : INT_MAX);
}

// A grid of exactly `blocks` linear block indices or a few more (x first, y only past 2^31 - 1
// blocks); kernels read their index with linear_block_index() and skip indices >= blocks.
inline dim3 linear_grid(int64_t blocks) {
  const int64_t x = blocks < INT_MAX ? blocks : INT_MAX;
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(ceil_div(blocks, x)));
}
__device__ __forceinline__ int64_t linear_block_index() {
  return int64_t(blockIdx.y) * gridDim.x + blockIdx.x;
}

}  // namespace ltx_cuda::detail
