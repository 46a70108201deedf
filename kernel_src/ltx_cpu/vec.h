// vec.h: 16 fp32 lanes (f32x16, a GCC/Clang vector extension) and the row loops every CPU op is
// written with. Each op's formula is one generic lambda over f32x16; map_row applies it to a row
// 16 elements at a time, the partial chunks at either end through zero-padded copies, so every
// element goes through the same instructions. Loads and stores convert the storage type per ISA:
// F16C (vcvtph2ps / vcvtps2ph) for fp16, AVX-512 / AVX2 integer widening for bf16, and portable
// integer arithmetic on the baseline. run_on_cpu compiles an op once per ISA (x86-64-v4, x86-64-v3,
// baseline; bf16 rows also x86-64-v4 with AVX512-BF16) and calls the best one the CPU supports (or
// the one LTX_CPU_ISA caps it at). Compares and selects go through convert.h's `where`, at the width
// of the runner's ISA: written on f32x16 directly, GCC lowers them lane by lane on AVX2.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "convert.h"

namespace ltx_cpu {

using f32x16 = float __attribute__((vector_size(64)));
using u32x16 = uint32_t __attribute__((vector_size(64)));
using i32x16 = int32_t __attribute__((vector_size(64)));
using u16x16 = uint16_t __attribute__((vector_size(32)));
constexpr int64_t kLanes = 16;

// ---- loads: 16 storage elements -> 16 fp32 lanes ----------------------------------------------

template <typename Isa>
LTX_INLINE f32x16 load16(Isa, const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

LTX_INLINE u16x16 bits16(const void* p) {
  u16x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Portable: bf16 is the top half of an fp32; fp16 through convert.h's integer arithmetic.
LTX_INLINE f32x16 load16(Baseline, const BFloat16* p) {
  return bits_as<f32x16>(__builtin_convertvector(bits16(p), u32x16) << 16);
}
LTX_INLINE f32x16 load16(Baseline, const Half* p) {
  return half_to_float_lanes<f32x16>(Baseline{}, __builtin_convertvector(bits16(p), u32x16));
}

// The ISA-specific overloads are plain `inline`: always_inline would have to inline them into the
// generic helpers themselves, compiled for the baseline; the runners' flatten inlines them.
#if defined(__x86_64__)
__attribute__((target("arch=x86-64-v4"))) inline f32x16 load16(Avx512, const BFloat16* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return bits_as<f32x16>(_mm512_slli_epi32(wide, 16));
}
__attribute__((target("arch=x86-64-v4"))) inline f32x16 load16(Avx512, const Half* p) {
  return bits_as<f32x16>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
}
__attribute__((target("arch=x86-64-v3"))) inline f32x16 load16(Avx2, const BFloat16* p) {
  const __m128i* q = reinterpret_cast<const __m128i*>(p);
  const __m256i lo = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(q)), 16);
  const __m256i hi = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(q + 1)), 16);
  const __m256i both[2] = {lo, hi};
  return bits_as<f32x16>(both);
}
__attribute__((target("arch=x86-64-v3"))) inline f32x16 load16(Avx2, const Half* p) {
  const __m128i* q = reinterpret_cast<const __m128i*>(p);
  const __m256 both[2] = {_mm256_cvtph_ps(_mm_loadu_si128(q)), _mm256_cvtph_ps(_mm_loadu_si128(q + 1))};
  return bits_as<f32x16>(both);
}
#endif

// ---- stores: 16 fp32 lanes -> 16 storage elements, rounded to nearest even --------------------

template <typename Isa>
LTX_INLINE void store16(Isa, float* p, f32x16 v) {
  std::memcpy(p, &v, sizeof v);
}

// bf16 and fp16 as 16 rounded bit patterns; the portable rounding is convert.h's, lane by lane.
LTX_INLINE u16x16 narrow16(Baseline, const BFloat16*, f32x16 v) {
  return __builtin_convertvector(float_to_bf16_lanes(Baseline{}, bits_as<u32x16>(v)), u16x16);
}
LTX_INLINE u16x16 narrow16(Baseline, const Half*, f32x16 v) {
  return __builtin_convertvector(float_to_half_lanes<u32x16>(Baseline{}, v), u16x16);
}

#if defined(__x86_64__)
__attribute__((target("arch=x86-64-v4"))) inline u16x16 narrow16(Avx512, const BFloat16*, f32x16 v) {
  const __m512i rounded = bits_as<__m512i>(float_to_bf16_lanes(Avx512{}, bits_as<u32x16>(v)));
  return bits_as<u16x16>(_mm512_cvtepi32_epi16(rounded));
}
// One instruction for 16 bf16 roundings (nearest even; NaN -> quiet NaN, as convert.h), but it
// flushes fp32 subnormal inputs to zero: a chunk holding one takes the integer rounding instead.
__attribute__((target("arch=x86-64-v4,avx512bf16"))) inline u16x16 narrow16(Avx512Bf16, const BFloat16* p,
                                                                          f32x16 v) {
  const __m512 x = bits_as<__m512>(v);
  if (__builtin_expect(_mm512_fpclass_ps_mask(x, 0x20) != 0, 0)) return narrow16(Avx512{}, p, v);
  return bits_as<u16x16>(_mm512_cvtneps_pbh(x));
}
__attribute__((target("arch=x86-64-v4"))) inline u16x16 narrow16(Avx512, const Half*, f32x16 v) {
  return bits_as<u16x16>(_mm512_cvtps_ph(bits_as<__m512>(v), _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("arch=x86-64-v3"))) inline u16x16 narrow16(Avx2, const BFloat16*, f32x16 v) {
  const u32x16 rounded = float_to_bf16_lanes(Avx2{}, bits_as<u32x16>(v));  // < 2^16: packus keeps it
  __m256i half[2];
  std::memcpy(half, &rounded, sizeof half);
  const __m256i packed = _mm256_packus_epi32(half[0], half[1]);  // 128-bit lanes interleaved
  return bits_as<u16x16>(_mm256_permute4x64_epi64(packed, 0xd8));
}
__attribute__((target("arch=x86-64-v3"))) inline u16x16 narrow16(Avx2, const Half*, f32x16 v) {
  __m256 half[2];
  std::memcpy(half, &v, sizeof half);
  return bits_as<u16x16>(_mm256_set_m128i(_mm256_cvtps_ph(half[1], _MM_FROUND_TO_NEAREST_INT),
                                          _mm256_cvtps_ph(half[0], _MM_FROUND_TO_NEAREST_INT)));
}

// AVX2 holds an f32x16 in two ymm registers, and GCC copies a 64-byte vector to memory 16 bytes at a
// time through the stack (and 16-byte halves stored apart reload as one 32-byte value only after a
// store-forwarding stall): so fp32 stores each ymm half on its own, fp16 and bf16 their 32 bytes at
// once (one 32-byte store was faster than two 16-byte ones for fp16).
__attribute__((target("arch=x86-64-v3"))) inline void store16(Avx2, float* p, f32x16 v) {
  __m256 half[2];
  std::memcpy(half, &v, sizeof half);
  _mm256_storeu_ps(p, half[0]);
  _mm256_storeu_ps(p + 8, half[1]);
}
__attribute__((target("arch=x86-64-v3"))) inline void store16(Avx2 isa, Half* p, f32x16 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bits_as<__m256i>(narrow16(isa, p, v)));
}
__attribute__((target("arch=x86-64-v3"))) inline void store16(Avx2 isa, BFloat16* p, f32x16 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bits_as<__m256i>(narrow16(isa, p, v)));
}
#endif

template <typename Isa, typename T, typename = std::enable_if_t<sizeof(T) == 2>>
LTX_INLINE void store16(Isa isa, T* p, f32x16 v) {
  const u16x16 bits = narrow16(isa, p, v);
  std::memcpy(p, &bits, sizeof bits);
}

// Non-temporal stores of one chunk (16-byte stores: `p` is 16-byte aligned). Each task that streams
// ends with stream_fence().
template <typename Isa, typename T>
LTX_INLINE void stream16(Isa isa, T* p, f32x16 v) {
#if defined(__x86_64__)
  if constexpr (sizeof(T) == 4) {
    __m128 part[4];
    std::memcpy(part, &v, sizeof part);
    for (int j = 0; j < 4; ++j) _mm_stream_ps(reinterpret_cast<float*>(p) + 4 * j, part[j]);
  } else {
    const u16x16 bits = narrow16(isa, p, v);
    __m128i part[2];
    std::memcpy(part, &bits, sizeof part);
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), part[0]);
    _mm_stream_si128(reinterpret_cast<__m128i*>(p) + 1, part[1]);
  }
#else
  store16(isa, p, v);
#endif
}

LTX_INLINE void stream_fence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

// ---- rows ---------------------------------------------------------------------------------------

// 16 elements from p, of which the first `n` (< 16) exist; the rest read as zero.
template <typename Isa, typename T>
LTX_INLINE f32x16 load_part(Isa isa, const T* p, int64_t n) {
  T tmp[kLanes] = {};
  std::memcpy(tmp, p, size_t(n) * sizeof(T));
  return load16(isa, tmp);
}

template <typename Isa, typename T>
LTX_INLINE void store_part(Isa isa, T* p, f32x16 v, int64_t n) {
  T tmp[kLanes];
  store16(isa, tmp, v);
  std::memcpy(p, tmp, size_t(n) * sizeof(T));
}

// out[i] = fn(in[i]...) for i in [0, n): the inputs widened to fp32 lanes, the result rounded once.
// With `stream`, whole chunks from the first 64-byte boundary of out on are stored non-temporally.
// fp64 rows (gradcheck) run fn on doubles, one element at a time.
template <typename Isa, typename T, typename Fn, typename... In>
LTX_INLINE void map_row(Isa isa, bool stream, T* out, int64_t n, Fn fn, const In*... in) {
  if constexpr (std::is_same_v<T, double>) {
    for (int64_t i = 0; i < n; ++i) out[i] = fn(load(in[i])...);
  } else {
    int64_t i = 0;
    const int64_t last = n - kLanes;  // the last whole chunk's start: one compare per step, no add
    if (stream) {
      const int64_t head = std::min<int64_t>(n, (64 - reinterpret_cast<uintptr_t>(out) % 64) % 64 / sizeof(T));
      while (i < head) {
        const int64_t k = std::min<int64_t>(kLanes, head - i);
        store_part(isa, out + i, fn(load_part(isa, in + i, k)...), k);
        i += k;
      }
      for (; i <= last; i += kLanes) stream16(isa, out + i, fn(load16(isa, in + i)...));
    }
    for (; i <= last; i += kLanes) store16(isa, out + i, fn(load16(isa, in + i)...));
    if (i < n) store_part(isa, out + i, fn(load_part(isa, in + i, n - i)...), n - i);
  }
}

// Per pair of lanes (2i, 2i+1): (-v[2i+1], v[2i]), the rotation of interleaved RoPE. Shuffled in
// register-sized pieces, as `where` compares: one shuffle and one xor per register.
template <typename Isa>
LTX_INLINE f32x16 rotate_pairs(Isa isa, f32x16 v) {
  constexpr int kBytes = register_bytes(isa);
  constexpr int kPieces = int(sizeof(f32x16)) / kBytes;
  using I32 = std::conditional_t<std::is_void_v<Isa>, void, int32_t>;  // dependent: vector_size applies
  typedef float Piece __attribute__((vector_size(kBytes)));
  typedef I32 Index __attribute__((vector_size(kBytes)));
  typedef std::make_unsigned_t<I32> Bits __attribute__((vector_size(kBytes)));
  Index swap;
  Bits even_sign;
  for (int j = 0; j < kBytes / 4; ++j) {
    swap[j] = j ^ 1;
    even_sign[j] = j % 2 == 0 ? 0x80000000u : 0u;
  }
  Piece p[kPieces];
  std::memcpy(p, &v, sizeof v);
  for (int k = 0; k < kPieces; ++k) {
    p[k] = bits_as<Piece>(bits_as<Bits>(__builtin_shuffle(p[k], swap)) ^ even_sign);
  }
  f32x16 r;
  std::memcpy(&r, p, sizeof r);
  return r;
}

// Interleaved RoPE of 16 lanes: v * c + rotate_pairs(v) * s, i.e. per pair (2i, 2i+1)
// (v[2i] c[2i] - v[2i+1] s[2i], v[2i+1] c[2i+1] + v[2i] s[2i+1]), the product with s rounded
// first. AVX2 and AVX-512: one vpermilps, one vmulps and one vfmaddsub per register.
LTX_INLINE f32x16 rope_pairs(Baseline isa, f32x16 v, f32x16 c, f32x16 s) {
  return v * c + rotate_pairs(isa, v) * s;
}

#if defined(__x86_64__)
__attribute__((target("arch=x86-64-v3"))) inline f32x16 rope_pairs(Avx2, f32x16 v, f32x16 c, f32x16 s) {
  __m256 pv[2], pc[2], ps[2], out[2];
  std::memcpy(pv, &v, sizeof v);
  std::memcpy(pc, &c, sizeof c);
  std::memcpy(ps, &s, sizeof s);
  for (int k = 0; k < 2; ++k) {
    out[k] = _mm256_fmaddsub_ps(pv[k], pc[k], _mm256_mul_ps(_mm256_permute_ps(pv[k], 0xb1), ps[k]));
  }
  return bits_as<f32x16>(out);
}
__attribute__((target("arch=x86-64-v4"))) inline f32x16 rope_pairs(Avx512, f32x16 v, f32x16 c, f32x16 s) {
  const __m512 x = bits_as<__m512>(v);
  const __m512 rotated = _mm512_mul_ps(_mm512_permute_ps(x, 0xb1), bits_as<__m512>(s));
  return bits_as<f32x16>(_mm512_fmaddsub_ps(x, bits_as<__m512>(c), rotated));
}
#endif

// The sum of the 16 lanes, pairwise: lane j plus lane j + 8, then j + 4, j + 2, j + 1, as halves
// of vectors (a loop over an array of lanes stayed a loop through the stack, once per row).
LTX_INLINE float sum_lanes(f32x16 v) {
  typedef float f32x8 __attribute__((vector_size(32)));
  typedef float f32x4 __attribute__((vector_size(16)));
  typedef float f32x2 __attribute__((vector_size(8)));
  f32x8 h8[2];
  std::memcpy(h8, &v, sizeof v);
  const f32x8 s8 = h8[0] + h8[1];
  f32x4 h4[2];
  std::memcpy(h4, &s8, sizeof s8);
  const f32x4 s4 = h4[0] + h4[1];
  f32x2 h2[2];
  std::memcpy(h2, &s4, sizeof s4);
  const f32x2 s2 = h2[0] + h2[1];
  return s2[0] + s2[1];
}

// The sum of squares of chunk(i, n) over a row of `dim` elements, chunk giving the 16 lanes from i
// (n < 16: a partial chunk, zero-padded): four independent accumulators, always in the same order,
// so every op that normalises a row gets the same bits for it.
// The accumulators are held as register-sized pieces of the ISA (lane for lane the same sums): a
// loop-carried f32x16 wider than the registers stayed in memory on AVX2, copied through general
// registers every step (8 vpinsrq per 16 elements).
template <typename Isa, typename Chunk>
LTX_INLINE float sum_squares(Isa isa, int64_t dim, Chunk chunk) {
  constexpr int kBytes = register_bytes(isa);
  constexpr int kPieces = int(sizeof(f32x16)) / kBytes;
  typedef float Piece __attribute__((vector_size(kBytes)));
  Piece acc[4][kPieces] = {};
  const auto add = [&](int j, f32x16 v) LTX_ALWAYS_INLINE {
    Piece p[kPieces];
    std::memcpy(p, &v, sizeof v);
    for (int k = 0; k < kPieces; ++k) acc[j][k] += p[k] * p[k];
  };
  int64_t i = 0;
  for (; i + 4 * kLanes <= dim; i += 4 * kLanes) {
    for (int j = 0; j < 4; ++j) add(j, chunk(i + j * kLanes, kLanes));
  }
  for (; i + kLanes <= dim; i += kLanes) add(0, chunk(i, kLanes));
  if (i < dim) add(1, chunk(i, dim - i));
  Piece total[kPieces];
  for (int k = 0; k < kPieces; ++k) total[k] = (acc[0][k] + acc[1][k]) + (acc[2][k] + acc[3][k]);
  f32x16 lanes;
  std::memcpy(&lanes, total, sizeof lanes);
  return sum_lanes(lanes);
}

LTX_INLINE float inv_rms_of(float sum_of_squares, int64_t dim, double eps) {
  return 1.0f / std::sqrt(sum_of_squares / float(dim) + float(eps));
}

// 1 / sqrt(mean(x^2) + eps) of one row.
template <typename Isa, typename T>
LTX_INLINE acc_t<T> inv_rms(Isa isa, const T* x, int64_t dim, double eps) {
  if constexpr (std::is_same_v<T, double>) {
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) sum += x[i] * x[i];
    return 1.0 / std::sqrt(sum / double(dim) + eps);
  } else {
    return inv_rms_of(sum_squares(isa, dim, [&](int64_t i, int64_t n) LTX_ALWAYS_INLINE {
                        return n == kLanes ? load16(isa, x + i) : load_part(isa, x + i, n);
                      }),
                      dim, eps);
  }
}

// map_row without streaming, returning 1 / rms of the row it wrote (rounded to T, as inv_rms(out)
// would compute it) from the same pass.
template <typename Isa, typename T, typename Fn, typename... In>
LTX_INLINE acc_t<T> map_row_inv_rms(Isa isa, T* out, int64_t n, double eps, Fn fn, const In*... in) {
  if constexpr (std::is_same_v<T, double>) {
    map_row(isa, false, out, n, fn, in...);
    return inv_rms(isa, out, n, eps);
  } else {
    return inv_rms_of(sum_squares(isa, n, [&](int64_t i, int64_t k) LTX_ALWAYS_INLINE {
                        if (k == kLanes) {
                          store16(isa, out + i, fn(load16(isa, in + i)...));
                          return load16(isa, out + i);  // the rounded values, forwarded from the store
                        }
                        store_part(isa, out + i, fn(load_part(isa, in + i, k)...), k);
                        return load_part(isa, out + i, k);
                      }),
                      n, eps);
  }
}

// Copies `bytes` from src to dst, 16-byte non-temporal stores from dst's first 16-byte boundary on.
LTX_INLINE void stream_copy(void* dst, const void* src, int64_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
#if defined(__x86_64__)
  const int64_t head = std::min<int64_t>(bytes, int64_t((16 - reinterpret_cast<uintptr_t>(d) % 16) % 16));
  std::memcpy(d, s, size_t(head));
  int64_t i = head;
  for (; i + 16 <= bytes; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  }
  std::memcpy(d + i, s + i, size_t(bytes - i));
#else
  std::memcpy(d, s, size_t(bytes));
#endif
}

// ---- one compilation per ISA ----------------------------------------------------------------------
// op(isa) is inlined whole (flatten) into a runner compiled for that ISA; nothing it calls stays out
// of line at the baseline ISA. The runners are the op's only compiled code.

template <typename Op>
__attribute__((flatten, noinline)) void run_baseline(const Op& op) {
  op(Baseline{});
}

#if defined(__x86_64__)
template <typename Op>
__attribute__((target("arch=x86-64-v4"), flatten, noinline)) void run_avx512(const Op& op) {
  op(Avx512{});
}

template <typename Op>
__attribute__((target("arch=x86-64-v4,avx512bf16"), flatten, noinline)) void run_avx512bf16(const Op& op) {
  op(Avx512Bf16{});
}

template <typename Op>
__attribute__((target("arch=x86-64-v3"), flatten, noinline)) void run_avx2(const Op& op) {
  op(Avx2{});
}

enum class CpuIsa { Avx512, Avx2, Baseline };

// LTX_CPU_ISA=avx512bf16|avx512|avx2|baseline caps the compilation the ops pick (read once, at the
// first op call): to time or test on this CPU the code another CPU runs. Unset or unknown: no cap;
// an ISA this CPU lacks is never picked.
inline int isa_cap() {
  static const int cap = [] {
    const char* v = std::getenv("LTX_CPU_ISA");
    if (v == nullptr) return 3;
    if (std::strcmp(v, "baseline") == 0) return 0;
    if (std::strcmp(v, "avx2") == 0) return 1;
    if (std::strcmp(v, "avx512") == 0) return 2;
    return 3;
  }();
  return cap;
}

inline bool cpu_has_avx512bf16() {
  static const bool yes =
      isa_cap() >= 3 && __builtin_cpu_supports("x86-64-v4") && __builtin_cpu_supports("avx512bf16");
  return yes;
}

inline CpuIsa cpu_isa() {
  static const CpuIsa isa = isa_cap() >= 2 && __builtin_cpu_supports("x86-64-v4")   ? CpuIsa::Avx512
                            : isa_cap() >= 1 && __builtin_cpu_supports("x86-64-v3") ? CpuIsa::Avx2
                                                                                    : CpuIsa::Baseline;
  return isa;
}
#endif

// Calls op(isa) compiled for the best ISA this CPU has, for rows stored as T.
template <typename T, typename Op>
void run_on_cpu(const Op& op) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (cpu_has_avx512bf16()) return run_avx512bf16(op);
  }
  switch (cpu_isa()) {
    case CpuIsa::Avx512: return run_avx512(op);
    case CpuIsa::Avx2: return run_avx2(op);
    case CpuIsa::Baseline: break;
  }
#endif
  run_baseline(op);
}

}  // namespace ltx_cpu
