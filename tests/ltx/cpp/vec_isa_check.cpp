// vec_isa_check.cpp: every ISA compilation of ltx_cpu's vec.h that this CPU can run, checked bit for
// bit against convert.h's scalar conversions. The ops call only the best ISA, so on an AVX-512
// machine their tests never run the AVX2 or baseline code; this does. Prints one line per ISA and
// exits 1 on the first mismatch (tests/test_ltx_kernels.py builds and runs it).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "vec.h"

namespace {

using namespace ltx_cpu;

int failures = 0;

void fail(const char* isa, const char* what, long long at, unsigned got, unsigned want) {
  if (failures++ < 10)
    std::printf("FAIL %s %s at %lld: got 0x%08x, want 0x%08x\n", isa, what, at, got, want);
}

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || bits_as<uint32_t>(a) == bits_as<uint32_t>(b);
}
bool same_half(uint16_t a, uint16_t b) {
  return ((a & 0x7fff) > 0x7c00 && (b & 0x7fff) > 0x7c00) || a == b;
}
bool same_bf16(uint16_t a, uint16_t b) {
  return ((a & 0x7fff) > 0x7f80 && (b & 0x7fff) > 0x7f80) || a == b;
}

// Floats that exercise every rounding path: random bit patterns, ties, the fp16 subnormal and
// overflow edges, zeros, infinities, NaNs.
std::vector<float> probe_floats() {
  std::vector<float> v;
  std::mt19937 gen(1234);
  for (int i = 0; i < 65536; ++i) v.push_back(bits_as<float>(uint32_t(gen())));
  for (uint32_t h = 0; h < 0x10000; h += 7) {  // around every 7th fp16 and bf16 value: exact, ties
    const float f = half_to_float(uint16_t(h));
    const uint32_t u = bits_as<uint32_t>(f);
    for (uint32_t d : {0u, 1u, 0xfffu, 0x1000u, 0x1001u}) v.push_back(bits_as<float>(u + d));
    v.push_back(bits_as<float>((h << 16) | 0x8000u));  // a bf16 tie
    v.push_back(bits_as<float>((h << 16) | 0x7fffu));
  }
  for (float f : {0.0f, -0.0f, 65504.0f, 65520.0f, 65519.99f, 5.96e-8f, 2.98e-8f, 1e-45f, INFINITY,
                  -INFINITY, NAN, 3.4e38f})
    v.push_back(f);
  while (v.size() % kLanes) v.push_back(1.0f);
  return v;
}

template <typename Isa>
void check(Isa isa, const char* name) {
  const int before = failures;
  // Widening: all 65536 fp16 and bf16 patterns.
  std::vector<uint16_t> all(0x10000);
  for (uint32_t i = 0; i < 0x10000; ++i) all[i] = uint16_t(i);
  for (int64_t i = 0; i < 0x10000; i += kLanes) {
    float h[kLanes], b[kLanes];
    store16(isa, h, load16(isa, reinterpret_cast<const Half*>(all.data() + i)));
    store16(isa, b, load16(isa, reinterpret_cast<const BFloat16*>(all.data() + i)));
    for (int j = 0; j < kLanes; ++j) {
      const uint16_t bits = all[i + j];
      if (!same_float(h[j], half_to_float(bits)))
        fail(name, "fp16 widen", bits, bits_as<uint32_t>(h[j]), bits_as<uint32_t>(half_to_float(bits)));
      if (!same_float(b[j], bf16_to_float(bits)))
        fail(name, "bf16 widen", bits, bits_as<uint32_t>(b[j]), bits_as<uint32_t>(bf16_to_float(bits)));
    }
  }
  // Narrowing: round to nearest even, NaN stays NaN.
  const std::vector<float> f = probe_floats();
  for (size_t i = 0; i < f.size(); i += kLanes) {
    Half h[kLanes];
    BFloat16 b[kLanes];
    store16(isa, h, load16(isa, f.data() + i));
    store16(isa, b, load16(isa, f.data() + i));
    for (int j = 0; j < kLanes; ++j) {
      if (!same_half(h[j].bits, float_to_half(f[i + j])))
        fail(name, "fp16 narrow", (long long)(i + j), h[j].bits, float_to_half(f[i + j]));
      if (!same_bf16(b[j].bits, float_to_bf16(f[i + j])))
        fail(name, "bf16 narrow", (long long)(i + j), b[j].bits, float_to_bf16(f[i + j]));
    }
  }
  // map_row at every offset and length, streamed or not: out = 2x + 1 (exact in fp32, so FMA or
  // not, every ISA must give the scalar rounding of it).
  std::vector<BFloat16> in(300), out(300 + 64);
  for (int i = 0; i < 300; ++i) in[i] = BFloat16{float_to_bf16(float(i % 37) * 0.37f - 5.0f)};
  for (int offset = 0; offset < 32; ++offset) {
    for (int n = 0; n <= 200; n += (n < 40 ? 1 : 13)) {
      for (bool stream : {false, true}) {
        for (auto& o : out) o.bits = 0xdead;
        map_row(isa, stream, out.data() + offset, n, [](auto v) { return v * 2.0f + 1.0f; }, in.data());
        if (stream) stream_fence();
        for (int i = 0; i < n; ++i) {
          const uint16_t want = float_to_bf16(bf16_to_float(in[i].bits) * 2.0f + 1.0f);
          if (out[offset + i].bits != want) fail(name, "map_row", offset * 1000 + i, out[offset + i].bits, want);
        }
        if (out[offset + n].bits != 0xdead) fail(name, "map_row past the end", offset * 1000 + n, out[offset + n].bits, 0xdead);
      }
    }
  }
  // inv_rms against a double sum, every length up to 3 chunks of 64.
  for (int n = 1; n <= 200; ++n) {
    std::vector<float> x(n);
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += double(x[i] = std::sin(1.3 * i) + 0.5) * x[i];
    const double want = 1.0 / std::sqrt(sum / n + 1e-6);
    const float got = inv_rms(isa, x.data(), n, 1e-6);
    if (std::fabs(got - want) > 1e-5 * want) fail(name, "inv_rms", n, bits_as<uint32_t>(got), 0);
  }
  std::printf("%s %s\n", failures > before ? "FAIL" : "ok", name);
}

}  // namespace

int main() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("x86-64-v4")) run_avx512([](auto isa) { check(isa, "avx512"); });
  else std::printf("skip avx512 (not on this CPU)\n");
  if (cpu_has_avx512bf16()) run_avx512bf16([](auto isa) { check(isa, "avx512bf16"); });
  else std::printf("skip avx512bf16 (not on this CPU)\n");
  if (__builtin_cpu_supports("x86-64-v3")) run_avx2([](auto isa) { check(isa, "avx2"); });
  else std::printf("skip avx2 (not on this CPU)\n");
#endif
  run_baseline([](auto isa) { check(isa, "baseline"); });
  return failures ? 1 : 0;
}
