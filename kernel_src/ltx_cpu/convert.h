// convert.h: element types, fp16/bf16 <-> fp32 conversions (branch-free integer/float arithmetic,
// for one value or 16 lanes) and dtype dispatch; everything is inline and header-only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ltx_cpu.h"

// Helpers and the per-dtype lambdas of the ops are force-inlined into the per-ISA runners of vec.h:
// a helper compiled once, out of line, would be baseline x86-64 code.
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

// The ISA an op's loops are compiled for (vec.h's runners): a tag type, so overloads pick the instructions.
struct Avx512 {};
struct Avx512Bf16 : Avx512 {};  // AVX-512 plus vcvtneps2bf16 (Zen 4, Sapphire Rapids): bf16 rows only
struct Avx2 {};
struct Baseline {};

// The bytes one vector register of the ISA holds.
constexpr int register_bytes(Avx512) { return 64; }
constexpr int register_bytes(Avx2) { return 32; }
constexpr int register_bytes(Baseline) { return 16; }

// Per lane, pred(a, b) ? t : f. GCC lowers a compare or select of a vector wider than the ISA's
// registers one lane at a time (a 64-byte compare on AVX2: 16 vucomiss, or vpextrd and cmov for
// integers), so vectors are compared in register-sized pieces: vcmpps / vpcmpd plus a blend per
// register. a and b are a scalar or a vector; t and f have as many lanes of the same size.
template <typename Isa, typename Pred, typename V, typename W>
LTX_INLINE W where(Isa isa, Pred pred, V a, V b, W t, W f) {
  if constexpr (std::is_arithmetic_v<V>) {
    return pred(a, b) ? t : f;
  } else {
    using E = std::remove_cv_t<std::remove_reference_t<decltype(a[0])>>;
    using R = std::remove_cv_t<std::remove_reference_t<decltype(t[0])>>;
    constexpr int kBytes = register_bytes(isa) < int(sizeof(V)) ? register_bytes(isa) : int(sizeof(V));
    constexpr int kPieces = int(sizeof(V)) / kBytes;
    typedef E PieceV __attribute__((vector_size(kBytes)));
    typedef R PieceW __attribute__((vector_size(kBytes)));
    PieceV pa[kPieces], pb[kPieces];
    PieceW pt[kPieces], pf[kPieces], out[kPieces];
    std::memcpy(pa, &a, sizeof a);
    std::memcpy(pb, &b, sizeof b);
    std::memcpy(pt, &t, sizeof t);
    std::memcpy(pf, &f, sizeof f);
    for (int k = 0; k < kPieces; ++k) out[k] = pred(pa[k], pb[k]) ? pt[k] : pf[k];
    W r;
    std::memcpy(&r, out, sizeof r);
    return r;
  }
}

// The comparisons `where` takes (generic lambdas: one for scalars and every vector width).
constexpr auto kLess = [](auto x, auto y) { return x < y; };
constexpr auto kGreater = [](auto x, auto y) { return x > y; };
constexpr auto kGreaterEqual = [](auto x, auto y) { return x >= y; };
constexpr auto kEqual = [](auto x, auto y) { return x == y; };

// The conversions are written once for a uint32_t / float and for 16 lanes of them (vec.h); their
// comparisons and selects go through `where`, at the width of `isa`.
// The bytes of u as an F of the same size (u by reference: an array of register halves never decays).
template <typename F, typename U>
LTX_INLINE F bits_as(const U& u) {
  static_assert(sizeof(F) == sizeof(U));
  F f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// x in every lane of U (a uint32_t, or a vector of them).
template <typename U>
LTX_INLINE U splat(uint32_t x) {
  return U{} + x;
}

// u (a uint32_t or a vector of them) as signed 32-bit lanes. Magnitudes (sign bit clear) order the
// same either way, and AVX2 and SSE2 compare signed lanes in one instruction, unsigned ones in two
// or three (the bf16 rounding's NaN test; in the fp16 one GCC's selects came out longer).
template <typename U>
LTX_INLINE auto as_signed(U u) {
  if constexpr (std::is_arithmetic_v<U>) {
    return int32_t(u);
  } else {
    using I32 = std::conditional_t<std::is_void_v<U>, void, int32_t>;  // dependent: vector_size applies
    typedef I32 S __attribute__((vector_size(sizeof(U))));
    return bits_as<S>(u);
  }
}

// Round to nearest even by adding 0x7fff plus the lowest kept bit; NaN stays a (quiet) NaN. U holds
// fp32 bit patterns; the result holds the bf16 patterns in the low 16 bits.
template <typename Isa, typename U>
LTX_INLINE U float_to_bf16_lanes(Isa isa, U u) {
  const U rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const U quiet_nan = (u >> 16) | 0x0040u;
  return where(isa, kGreater, as_signed(U(u & 0x7fffffffu)), as_signed(splat<U>(0x7f800000u)), quiet_nan,
               rounded);
}

// fp16 -> fp32: move exponent and mantissa into place and rebias; subnormals go through one fp32
// subtraction of a power of two (exact); Inf/NaN get the fp32 all-ones exponent. h holds fp16
// patterns in 32-bit lanes.
template <typename F, typename Isa, typename U>
LTX_INLINE F half_to_float_lanes(Isa isa, U h) {
  const U sign = (h & 0x8000u) << 16;
  const U shifted = (h & 0x7fffu) << 13;  // exponent+mantissa at fp32 positions
  const U exponent = shifted & 0x0f800000u;
  const U normal = shifted + ((127u - 15u) << 23);
  const U inf_nan = normal + ((128u - 16u) << 23);
  const F subnormal = bits_as<F>(normal + (1u << 23)) - bits_as<float>(113u << 23);
  const U magnitude = where(isa, kEqual, exponent, splat<U>(0x0f800000u), inf_nan,
                            where(isa, kEqual, exponent, splat<U>(0u), bits_as<U>(subnormal), normal));
  return bits_as<F>(magnitude | sign);
}

// fp32 -> fp16, round to nearest even. Too large -> Inf, NaN -> quiet NaN; results below the fp16
// normal range are rounded by one fp32 addition of a magic constant that aligns the 10 kept bits.
// The result holds the fp16 patterns in the low 16 bits of each lane.
template <typename U, typename Isa, typename F>
LTX_INLINE U float_to_half_lanes(Isa isa, F f) {
  const U u = bits_as<U>(f);
  const U sign = (u >> 16) & 0x8000u;
  const U a = u & 0x7fffffffu;  // |f|
  const U overflow = where(isa, kGreater, a, splat<U>(0x7f800000u), splat<U>(0x7e00u), splat<U>(0x7c00u));
  constexpr uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  const U small = bits_as<U>(bits_as<F>(a) + bits_as<float>(denorm_magic)) - denorm_magic;
  const U mantissa_odd = (a >> 13) & 1u;
  const U normal = (a + ((15u - 127u) << 23) + 0xfffu + mantissa_odd) >> 13;
  const U magnitude = where(isa, kGreaterEqual, a, splat<U>((127u + 16u) << 23), overflow,
                            where(isa, kLess, a, splat<U>(113u << 23), small, normal));
  return magnitude | sign;
}

LTX_INLINE float bf16_to_float(uint16_t h) { return bits_as<float>(uint32_t(h) << 16); }
LTX_INLINE uint16_t float_to_bf16(float f) {
  return uint16_t(float_to_bf16_lanes(Baseline{}, bits_as<uint32_t>(f)));
}
LTX_INLINE float half_to_float(uint16_t h) { return half_to_float_lanes<float>(Baseline{}, uint32_t(h)); }
LTX_INLINE uint16_t float_to_half(float f) { return uint16_t(float_to_half_lanes<uint32_t>(Baseline{}, f)); }

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

}  // namespace ltx_cpu
