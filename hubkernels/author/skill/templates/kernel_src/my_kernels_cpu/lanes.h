// lanes.h: the next step when an op's plain loops stay scalar or lose to torch.compile (the skill's CPU
// guide, "When the plain loops stop" and "Compares at the ISA's width"). An op's formula is written once
// on f32x16 (16 fp32 lanes, a GCC/Clang vector type) and compiled once per ISA: run_on_cpu(op) calls
// op(isa) inside a runner compiled for AVX-512 (x86-64-v4), AVX2 + FMA + F16C (x86-64-v3) or the
// baseline, picked once for the running CPU; everything op calls must be MY_KERNELS_INLINE so it is
// compiled into each runner. Arithmetic on f32x16 splits into the ISA's registers by itself; compares
// and selects do not (GCC lowers a 64-byte compare one lane at a time on AVX2), so write them with
// where(isa, ...), which compares in register-sized pieces. `hubkernels verify` judges each runner at
// its ISA's width and names lane-by-lane compares.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "convert.h"

namespace my_kernels_cpu {

using f32x16 = float __attribute__((vector_size(64)));
constexpr int64_t kVecLanes = 16;

// The ISA a runner is compiled for: a tag type passed to the op, so helpers can take it.
struct Avx512 {};
struct Avx2 {};
struct Baseline {};

constexpr int register_bytes(Avx512) { return 64; }
constexpr int register_bytes(Avx2) { return 32; }
constexpr int register_bytes(Baseline) { return 16; }

// 16 floats from p (n < 16: the first n, the rest zero) and back.
MY_KERNELS_INLINE f32x16 load16(const float* p, int64_t n = kVecLanes) {
  f32x16 v = {};
  std::memcpy(&v, p, sizeof(float) * size_t(n));
  return v;
}
MY_KERNELS_INLINE void store16(float* p, f32x16 v, int64_t n = kVecLanes) {
  std::memcpy(p, &v, sizeof(float) * size_t(n));
}

// Per lane pred(a, b) ? t : f, compared in pieces of the ISA's register width (one vcmpps and one
// blend per register on AVX2 and AVX-512, instead of 16 vucomiss and blends).
template <typename Isa, typename Pred>
MY_KERNELS_INLINE f32x16 where(Isa isa, Pred pred, f32x16 a, f32x16 b, f32x16 t, f32x16 f) {
  constexpr int kBytes = register_bytes(isa);
  constexpr int kPieces = int(sizeof(f32x16)) / kBytes;
  typedef float Piece __attribute__((vector_size(kBytes)));
  Piece pa[kPieces], pb[kPieces], pt[kPieces], pf[kPieces], out[kPieces];
  std::memcpy(pa, &a, sizeof a);
  std::memcpy(pb, &b, sizeof b);
  std::memcpy(pt, &t, sizeof t);
  std::memcpy(pf, &f, sizeof f);
  for (int k = 0; k < kPieces; ++k) out[k] = pred(pa[k], pb[k]) ? pt[k] : pf[k];
  f32x16 r;
  std::memcpy(&r, out, sizeof r);
  return r;
}

constexpr auto kLess = [](auto x, auto y) { return x < y; };
constexpr auto kGreater = [](auto x, auto y) { return x > y; };

template <typename Op>
__attribute__((flatten, noinline)) void run_baseline(const Op& op) {
  op(Baseline{});
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
template <typename Op>
__attribute__((target("arch=x86-64-v4"), flatten, noinline)) void run_avx512(const Op& op) {
  op(Avx512{});
}

template <typename Op>
__attribute__((target("arch=x86-64-v3"), flatten, noinline)) void run_avx2(const Op& op) {
  op(Avx2{});
}
#endif

// op(isa) compiled for the best ISA this CPU has.
template <typename Op>
void run_on_cpu(const Op& op) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const int level = __builtin_cpu_supports("x86-64-v4")   ? 2
                           : __builtin_cpu_supports("x86-64-v3") ? 1
                                                                 : 0;
  if (level == 2) return run_avx512(op);
  if (level == 1) return run_avx2(op);
#endif
  run_baseline(op);
}

}  // namespace my_kernels_cpu
