// emu_check.cpp: every kernel of bench.cu's for_each_variant run on the CPU emulation of
// tests/cuda_emu/emu.h (each CUDA thread a fiber, under ASan/UBSan; a barrier some threads never
// reach is reported as a deadlock), on 2 x 24 rows, against the same fp32 reference and tolerance
// as bench.cu's check_kernel. Persistent kernels run with grids of 3 and 7 blocks (several row
// blocks per block, a batch change inside a block's sequence) and with one row block per block.
// Inline PTX is replaced by plain C++ here (cp.async and bulk copies become immediate copies), so
// this checks indexing, pipelining and barriers, not the memory model: the GPU run checks that.
//
//   ./emu_check.sh
#include "emu.h"

#define EXP_EMU 1
#include "bench.cu"

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace xm;

constexpr int kB = 2, kT = 24, kRowsEmu = kB * kT, kStride = 6 * kDim;
int checks = 0, failures = 0;

float to_f(bf16 v) { return __bfloat162float(v); }

struct Data {
  std::vector<bf16> x, out, mod;
  Data() : x(size_t(kRowsEmu) * kDim), out(x.size()), mod(size_t(kB) * kStride) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int r = 0; r < kRowsEmu; ++r) {
      const float row_scale = 2.05f + 2.0f * u(rng);
      for (int i = 0; i < kDim; ++i) x[size_t(r) * kDim + i] = __float2bfloat16_rn(2.0f * u(rng) * row_scale);
    }
    for (auto& m : mod) m = __float2bfloat16_rn(0.6f * u(rng));
  }
  Problem problem() {
    return {x.data(), out.data(), mod.data() + kDim, mod.data(), kRowsEmu, kT, kStride, 1e-6f};
  }
};
Data* data;

float ulp_bf16(float v) {
  v = std::fabs(v);
  if (v < 1.17549435e-38f) return 0x1p-133f;
  int e;
  std::frexp(v, &e);
  return std::ldexp(1.0f, e - 8);
}

// Poisons out, runs `launch`, compares every element with check_kernel's rule.
template <class F>
void check(const std::string& what, bool modulate, F launch) {
  ++checks;
  const Problem p = data->problem();
  for (auto& o : data->out) o = __float2bfloat16_rn(NAN);
  launch(p);
  long bad = 0;
  float worst = 0;
  for (int r = 0; r < kRowsEmu; ++r) {
    const bf16* x = p.x + size_t(r) * kDim;
    float ss = 0;
    for (int i = 0; i < kDim; ++i) ss += to_f(x[i]) * to_f(x[i]);
    const float inv = 1.0f / std::sqrt(ss / kDim + p.eps);
    const size_t m = size_t(r / kT) * kStride;
    for (int i = 0; i < kDim; ++i) {
      const float n = to_f(x[i]) * inv;
      float want = n, mag = std::fabs(n);
      if (modulate) {
        const float s = to_f(p.scale[m + i]), h = to_f(p.shift[m + i]);
        want = std::fma(n, 1.0f + s, h);
        mag = std::fabs(n * (1.0f + s)) + std::fabs(h);
      }
      const float ref = to_f(__float2bfloat16_rn(want)), got = to_f(p.out[size_t(r) * kDim + i]);
      const float d = std::fabs(got - ref), tol = ulp_bf16(ref) + mag * 0x1p-16f;
      if (!(d <= tol)) {
        if (bad++ < 3)
          std::printf("  row %d col %d: got %g want %g\n", r, i, double(got), double(ref));
      }
      worst = std::max(worst, d == d ? d / tol : INFINITY);
    }
  }
  if (bad) ++failures;
  std::printf("%s %s: %ld bad, max err/tol %.2f\n", bad ? "FAIL" : "ok  ", what.c_str(), bad, double(worst));
  std::fflush(stdout);
}

std::string grid_note(int grid) { return " grid " + std::to_string(grid); }

struct EmuSink {
  template <int G, int R, int S, Mod M, Ld L, St ST, int kMinBlocks>
  void pipe(bool persistent, int = 0) {  // (the grid-size option only matters on the GPU)
    const std::string n = std::string(persistent ? "pipe S" : "res S") + std::to_string(S) + " G" +
                          std::to_string(G) + " R" + std::to_string(R) + " mod=" + name(M) +
                          " ld=" + name(L) + " " + name(ST) + " minblk" + std::to_string(kMinBlocks);
    std::vector<int> grids{kRowsEmu / R};
    if (persistent) grids.insert(grids.begin(), {3, 7});
    for (int g : grids)
      check(n + grid_note(g), M != Mod::None, [&](const Problem& p) {
        emu::launch<&pipe_kernel<G, R, S, L, ST, M, kMinBlocks>>(emu::Config(dim3(g), dim3(G * R)), p);
      });
  }
  template <int G, int R, int S, Mod M, int kMinBlocks, bool k256, St ST>
  void cpasync(int = 0) {
    const std::string n = "cpasync S" + std::to_string(S) + " G" + std::to_string(G) + " R" +
                          std::to_string(R) + " mod=" + name(M) + " " + name(ST) + (k256 ? " 256B" : "");
    for (int g : {3, 7, kRowsEmu / R})
      check(n + grid_note(g), M != Mod::None, [&](const Problem& p) {
        emu::launch<&cpasync_kernel<G, R, S, k256, ST, M, kMinBlocks>>(emu::Config(dim3(g), dim3(G * R)), p);
      });
  }
  template <int G, int R, int S, Mod M, int kMinBlocks, St ST>
  void bulk(int = 0) {
    const std::string n = "tma S" + std::to_string(S) + " G" + std::to_string(G) + " R" +
                          std::to_string(R) + " mod=" + name(M) + " " + name(ST);
    for (int g : {3, 7, kRowsEmu / R})
      check(n + grid_note(g), M != Mod::None, [&](const Problem& p) {
        emu::launch<&bulk_kernel<G, R, S, ST, M, kMinBlocks>>(emu::Config(dim3(g), dim3(G * R)), p);
      });
  }
};

}  // namespace

int main() {
  Data d;
  data = &d;
  EmuSink sink;
  for_each_variant(sink);
  std::printf("RESULT checks=%d failed=%d\n", checks, failures);
  return failures ? 1 : 0;
}
