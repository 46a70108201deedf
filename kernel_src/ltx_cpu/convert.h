// convert.h: element types, fp16/bf16 <-> fp32 conversions, dtype dispatch and the row helpers the
// ops share. Conversions are branch-free integer/float arithmetic, so gcc -O3 vectorises the loops
// that use them; everything is inline and header-only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "ltx_cpu.h"

// Every op entry point is compiled for AVX-512, AVX2+FMA and baseline x86-64, and the loader picks
// the best one for the running CPU once (GNU ifunc). The loops are plain C++; only the ISA the
// compiler may use differs. Other architectures get the single baseline build.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LTX_CPU_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LTX_CPU_MULTIVERSION
#endif

// Row helpers, and the per-dtype lambdas of the entry points, are force-inlined into each ISA clone
// of their caller: a helper compiled once, out of line, would be baseline x86-64 code.
#define LTX_ALWAYS_INLINE __attribute__((always_inline))
#define LTX_INLINE inline LTX_ALWAYS_INLINE

namespace ltx_cpu {

// 16-bit storage types; distinct structs so overloads tell them apart.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

LTX_INLINE float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

LTX_INLINE uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// bf16 is the top half of an fp32.
LTX_INLINE float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }

// Round to nearest even by adding 0x7fff plus the lowest kept bit; NaN stays a (quiet) NaN.
LTX_INLINE uint16_t float_to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// fp16 -> fp32: move exponent and mantissa into place and rebias; subnormals go through one fp32
// subtraction of a power of two (exact); Inf/NaN get the fp32 all-ones exponent.
LTX_INLINE float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t shifted = uint32_t(h & 0x7fffu) << 13;  // exponent+mantissa at fp32 positions
  const uint32_t exponent = shifted & 0x0f800000u;
  const uint32_t normal = shifted + ((127u - 15u) << 23);
  const uint32_t inf_nan = normal + ((128u - 16u) << 23);
  const float subnormal = bits_to_float(normal + (1u << 23)) - bits_to_float(113u << 23);
  const uint32_t magnitude = exponent == 0x0f800000u ? inf_nan
                             : exponent == 0       ? float_to_bits(subnormal)
                                                   : normal;
  return bits_to_float(magnitude | sign);
}

// fp32 -> fp16, round to nearest even. Too large -> Inf, NaN -> quiet NaN; results below the fp16
// normal range are rounded by one fp32 addition of a magic constant that aligns the 10 kept bits.
LTX_INLINE uint16_t float_to_half(float f) {
  const uint32_t u = float_to_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;  // |f|
  const uint32_t overflow = a > 0x7f800000u ? 0x7e00u : 0x7c00u;
  const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  const uint32_t small =
      float_to_bits(bits_to_float(a) + bits_to_float(denorm_magic)) - denorm_magic;
  const uint32_t mantissa_odd = (a >> 13) & 1u;
  const uint32_t normal = (a + ((15u - 127u) << 23) + 0xfffu + mantissa_odd) >> 13;
  const uint32_t magnitude = a >= ((127u + 16u) << 23) ? overflow
                             : a < (113u << 23)        ? small
                                                       : normal;
  return uint16_t(magnitude | sign);
}

// The type arithmetic happens in: fp32, or fp64 for fp64 tensors.
template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

LTX_INLINE float load(float v) { return v; }
LTX_INLINE double load(double v) { return v; }
LTX_INLINE float load(Half v) { return half_to_float(v.bits); }
LTX_INLINE float load(BFloat16 v) { return bf16_to_float(v.bits); }

template <typename T>
LTX_INLINE T store(acc_t<T> v) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half{float_to_half(v)};
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16{float_to_bf16(v)};
  } else {
    return v;
  }
}

// ---- whole fp16 rows -----------------------------------------------------------------------------
// With F16C (every AVX2 CPU) fp16 rows convert 8 at a time with vcvtph2ps / vcvtps2ph. The functions
// carry their own target attribute, so every ISA clone may call them; the CPU is asked once. They live
// outside ltx_cpu:: on purpose: they are the only out-of-line, single-ISA code (tests check ltx_cpu::).
}  // namespace ltx_cpu

namespace ltx_f16c {  // fp16 as raw uint16_t bits here

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx,f16c"))) inline void widen_f16c(float* out, const uint16_t* in, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = _cvtsh_ss(in[i]);
}

__attribute__((target("avx,f16c"))) inline void narrow_f16c(uint16_t* out, const float* in, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT);
}

inline bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c");
  return yes;
}
#else
inline bool has_f16c() { return false; }
inline void widen_f16c(float*, const uint16_t*, int64_t) {}
inline void narrow_f16c(uint16_t*, const float*, int64_t) {}
#endif

// fp32 scratch rows for the fp16 paths: `count` rows of `dim` floats, one allocation per call.
struct Rows {
  Rows(int count, int64_t dim) : data_(new float[count * dim]), dim_(dim) {}
  float* operator[](int i) { return data_.get() + i * dim_; }

 private:
  std::unique_ptr<float[]> data_;
  int64_t dim_;
};
}  // namespace ltx_f16c

namespace ltx_cpu {
using ltx_f16c::has_f16c;
using ltx_f16c::narrow_f16c;
using ltx_f16c::Rows;
using ltx_f16c::widen_f16c;

// out[i] = in[i] as fp32 for n contiguous fp16 elements.
LTX_INLINE void widen(float* out, const Half* in, int64_t n) {
  if (has_f16c()) return widen_f16c(out, reinterpret_cast<const uint16_t*>(in), n);
  for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(in[i].bits);
}

// out[i] = in[i] rounded to fp16 (nearest even) for n contiguous elements.
LTX_INLINE void narrow(Half* out, const float* in, int64_t n) {
  if (has_f16c()) return narrow_f16c(reinterpret_cast<uint16_t*>(out), in, n);
  for (int64_t i = 0; i < n; ++i) out[i] = Half{float_to_half(in[i])};
}

// Calls fn(T{}) with the storage type for `dtype`.
template <typename Fn>
LTX_INLINE void dispatch(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::F32: fn(float{}); break;
    case DType::F16: fn(Half{}); break;
    case DType::BF16: fn(BFloat16{}); break;
    case DType::F64: fn(double{}); break;
  }
}

// 1 / sqrt(mean(x^2) + eps) of one row: the sum runs in 16 independent lanes, so the compiler
// keeps them in vector registers without reassociating a single accumulator.
template <typename T>
LTX_INLINE acc_t<T> inv_rms(const T* x, int64_t dim, double eps) {
  using Acc = acc_t<T>;
  constexpr int kLanes = 16;
  Acc lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= dim; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const Acc v = load(x[i + j]);
      lane[j] += v * v;
    }
  }
  Acc tail = 0;
  for (; i < dim; ++i) {
    const Acc v = load(x[i]);
    tail += v * v;
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) lane[j] += lane[j + width];
  }
  const Acc mean = (lane[0] + tail) / Acc(dim);
  return Acc(1) / std::sqrt(mean + Acc(eps));
}

}  // namespace ltx_cpu
