// one contiguous pass over [begin, end), 16 elements per step: gelu_tanh(x) = x * sigmoid(2u) =
// x / (1 + exp(-2u)), u = sqrt(2/pi) * (x + 0.044715 x^3), with a branch-free fp32 exp.
#include <limits>

#include "vec.h"

namespace ltx_cpu {
namespace {

// exp(v) within 3 ulp: v = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 polynomial, 2^n
// built in the exponent bits. v is clamped to [-87, 88] (finite, normal results); NaN stays NaN.
template <typename Isa>
LTX_INLINE f32x16 exp_fp32(Isa isa, f32x16 v) {
  const f32x16 hi = f32x16{} + 88.0f, lo = f32x16{} - 87.0f;
  v = where(isa, kGreater, v, hi, hi, v);
  v = where(isa, kLess, v, lo, lo, v);
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 split so n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const f32x16 n = (v * kLog2e + kRound) - kRound;
  const f32x16 r = (v - n * kLn2Hi) - n * kLn2Lo;
  f32x16 p = f32x16{} + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const i32x16 biased = __builtin_convertvector(n, i32x16) + 127;
  return p * bits_as<f32x16>(biased << 23);
}

constexpr double kSqrt2OverPi = 0.797884560802865355879892119868763737;
constexpr double kCubic = 0.044715;

// Below this, gelu_tanh(x) = x * sigmoid(2u) rounds to -0 in fp32 (|result| < 2^-150 from
// x = -11 down), and so does the limit at -inf; above it the quotient below is used.
constexpr float kUnderflowBelow = -11.0f;

// fp32: x * sigmoid(2u) through the exp above; -0 below kUnderflowBelow (-inf included, where the
// quotient would be -inf / finite), NaN stays NaN, +inf stays +inf.
template <typename Isa>
LTX_INLINE f32x16 gelu_tanh_value(Isa isa, f32x16 v) {
  const f32x16 u = float(kSqrt2OverPi) * (v + float(kCubic) * v * v * v);
  const f32x16 y = v / (1.0f + exp_fp32(isa, -2.0f * u));
  const f32x16 minus_zero = bits_as<f32x16>(u32x16{} + 0x80000000u);
  return where(isa, kLess, v, f32x16{} + kUnderflowBelow, minus_zero, y);
}

// fp64 (gradcheck only): the textbook formula with libm's tanh (a symbol old enough for
// manylinux_2_28, unlike exp); at -inf, 0.5 * x * (1 + tanh) would be -inf * 0, so the limit -0.
template <typename Isa>
LTX_INLINE double gelu_tanh_value(Isa, double v) {
  const double y = 0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + kCubic * v * v * v)));
  return v < -std::numeric_limits<double>::max() ? -0.0 : y;
}

}  // namespace

void gelu_tanh(void* out, const void* x, int64_t begin, int64_t end, DType dtype, bool stream) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    run_on_cpu<T>([&](auto isa) LTX_ALWAYS_INLINE {
      map_row(isa, stream, static_cast<T*>(out) + begin, end - begin,
              [isa](auto v) { return gelu_tanh_value(isa, v); }, static_cast<const T*>(x) + begin);
      if (stream) stream_fence();
    });
  });
}

}  // namespace ltx_cpu
