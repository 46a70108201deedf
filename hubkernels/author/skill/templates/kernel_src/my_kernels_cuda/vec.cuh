// vec.cuh: what the CUDA ops share: Vec<T, N> (a 16-byte word of elements, or one element), fp32
// conversions, the warp sum, dtype dispatch. Every conversion is an explicit intrinsic, so torch's
// -D__CUDA_NO_HALF_OPERATORS__ / -D__CUDA_NO_BFLOAT16_OPERATORS__ flags do not matter.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "my_kernels_cuda.h"

namespace my_kernels_cuda::detail {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v) {  // round to nearest even
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "T is float, __half or __nv_bfloat16");
    return __float2bfloat16_rn(v);
  }
}

// Elements per 16-byte word: 4 fp32, 8 fp16 / bf16. The wide path of every op moves these.
template <class T>
inline constexpr int kPack = 16 / sizeof(T);

// N consecutive elements in registers: N == kPack<T> moves them as one 16-byte load or store
// (LDG.E.128 / STG.E.128; the address must be 16-byte aligned), N == 1 as one element (any
// address: the narrow fallback path).
template <class T, int N>
struct alignas(N == kPack<T> ? 16 : alignof(T)) Vec {
  static_assert(N == 1 || N == kPack<T>, "a Vec is one element or one 16-byte word");
  T v[N];

  // Inputs never alias outputs, so loads take the read-only path (ld.global.nc). The word moves
  // into v by memcpy, which compiles to register moves (no type punning).
  __device__ __forceinline__ void load(const T* p) {
    if constexpr (N == kPack<T>) {
      const uint4 word = __ldg(reinterpret_cast<const uint4*>(p));
      memcpy(v, &word, sizeof word);
    } else {
      v[0] = *p;
    }
  }

  __device__ __forceinline__ void store(T* p) const {
    if constexpr (N == kPack<T>) {
      uint4 word;
      memcpy(&word, v, sizeof word);
      *reinterpret_cast<uint4*>(p) = word;
    } else {
      *p = v[0];
    }
  }

  __device__ __forceinline__ float f(int i) const { return to_float(v[i]); }
  __device__ __forceinline__ void set(int i, float x) { v[i] = from_float<T>(x); }
};

// Sum over the 32 lanes of a warp; every lane gets the same total. All 32 lanes must call it.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with the element type of `dtype`.
template <class F>
void dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32: f(TypeTag<float>{}); break;
    case DType::F16: f(TypeTag<__half>{}); break;
    case DType::BF16: f(TypeTag<__nv_bfloat16>{}); break;
  }
}

// nullptr counts as aligned (an absent weight).
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace my_kernels_cuda::detail
