// convert.h: fp16 / bf16 storage types and their fp32 conversions (round to nearest even), dtype
// dispatch, and the ISA multiversioning macros shared by the CPU ops. Header-only plain C++. The
// scalar conversions are straight-line integer/float arithmetic with selects: they vectorise (GCC
// and Clang) only when compiled with -fno-trapping-math, and best in a loop of their own. `widen` and
// `narrow` convert whole rows that way, or with F16C for fp16. Check each ISA clone's disassembly,
// not a total: `hubkernels verify` counts packed instructions per clone.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "my_kernels_cpu.h"

// Each op entry point is compiled three times, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and
// baseline x86-64, and the dynamic loader picks the best for the running CPU once (GNU ifunc).
// Other compilers and architectures get one baseline build.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MY_KERNELS_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MY_KERNELS_MULTIVERSION
#endif

// Helpers, and the per-dtype lambda of an entry point, are force-inlined into each ISA clone of
// their caller: a helper compiled once, out of line, would be baseline code.
#define MY_KERNELS_ALWAYS_INLINE __attribute__((always_inline))
#define MY_KERNELS_INLINE inline MY_KERNELS_ALWAYS_INLINE

namespace my_kernels_cpu {

// 16-bit storage types: distinct structs, so overloads tell them apart.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

MY_KERNELS_INLINE uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

MY_KERNELS_INLINE float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

MY_KERNELS_INLINE float to_float(float v) { return v; }

// bf16 is the upper half of an fp32.
MY_KERNELS_INLINE float to_float(BFloat16 v) { return float_of(uint32_t(v.bits) << 16); }

MY_KERNELS_INLINE float to_float(Half v) {
  const uint32_t sign = uint32_t(v.bits & 0x8000u) << 16;
  const uint32_t rest = v.bits & 0x7fffu;                        // exponent and mantissa bits
  const uint32_t normal = (rest << 13) + ((127u - 15u) << 23);  // rebias the exponent
  const uint32_t special = (rest << 13) | 0x7f800000u;          // inf and NaN keep their mantissa
  const uint32_t tiny = bits_of(float(rest) * 0x1p-24f);        // zero, subnormal: rest * 2^-24
  return float_of(sign | (rest >= 0x7c00u ? special : rest >= 0x0400u ? normal : tiny));
}

template <class T>
MY_KERNELS_INLINE T from_float(float v);

template <>
MY_KERNELS_INLINE float from_float<float>(float v) {
  return v;
}

template <>
MY_KERNELS_INLINE BFloat16 from_float<BFloat16>(float v) {
  const uint32_t u = bits_of(v);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // ties go to the even result
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return {uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}

template <>
MY_KERNELS_INLINE Half from_float<Half>(float v) {
  const uint32_t u = bits_of(v);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;  // |v|
  // Normal results: rebias the exponent, then drop 13 mantissa bits rounding to nearest even.
  const uint32_t normal = (a - ((127u - 15u) << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  // |v| < 2^-14: the result is round(|v| * 2^24) in units of 2^-24; adding 1.5 * 2^23 does that
  // rounding (to nearest even) and leaves the integer in the low mantissa bits.
  const uint32_t tiny = bits_of(float_of(a) * 0x1p24f + 0x1.8p23f) - 0x4b400000u;
  const uint32_t huge = a > 0x7f800000u ? 0x7e00u : 0x7c00u;  // NaN stays NaN; >= 65520 is inf
  const uint32_t magnitude = a >= 0x477ff000u ? huge : a < 0x38800000u ? tiny : normal;
  return {uint16_t(sign | magnitude)};
}

// Whole-row conversions. On x86-64 CPUs with F16C (every AVX2 CPU) fp16 rows convert with the
// hardware's vcvtph2ps / vcvtps2ph, 8 at a time; the functions carry their own target attribute, so
// they are callable from every ISA clone (GCC and Clang), and the check runs once per process.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx,f16c"))) inline void widen_f16c(float* out, const Half* in, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = _cvtsh_ss(in[i].bits);
}

__attribute__((target("avx,f16c"))) inline void narrow_f16c(Half* out, const float* in, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i].bits = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT);
}

inline bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c");
  return yes;
}
#else
inline bool has_f16c() { return false; }
inline void widen_f16c(float*, const Half*, int64_t) {}
inline void narrow_f16c(Half*, const float*, int64_t) {}
#endif

// out[i] = in[i] as fp32, for a row of n elements.
template <class T>
MY_KERNELS_INLINE void widen(float* out, const T* in, int64_t n) {
  if constexpr (std::is_same_v<T, Half>) {
    if (has_f16c()) return widen_f16c(out, in, n);
  }
  for (int64_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

// out[i] = in[i] rounded to T (nearest even), for a row of n elements.
template <class T>
MY_KERNELS_INLINE void narrow(T* out, const float* in, int64_t n) {
  if constexpr (std::is_same_v<T, Half>) {
    if (has_f16c()) return narrow_f16c(out, in, n);
  }
  for (int64_t i = 0; i < n; ++i) out[i] = from_float<T>(in[i]);
}

// Calls fn(T{}) with the storage type of `dtype`.
template <class Fn>
MY_KERNELS_INLINE void dispatch(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::F32: fn(float{}); break;
    case DType::F16: fn(Half{}); break;
    case DType::BF16: fn(BFloat16{}); break;
  }
}

}  // namespace my_kernels_cpu
