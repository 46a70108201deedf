// Checks attention.cuh's tiling on the CPU (tests/ltx/test_attention.py compiles and runs this): for many
// shapes and SM counts, every query of every (batch, head) is taken by exactly one CTA's consumers, the full
// CTAs come first, and the narrow ones fit in one round. Prints "ok", or the first shape that breaks a rule.
#define __host__
#define __device__
#define __forceinline__ inline
#include "tiling.cuh"

#include <cstdio>
#include <vector>

using namespace ltx_cuda_sm90;

template <int NWG>
static bool check(int batch, int tokens, int heads, int sms) {
  const Tiling t = make_tiling(batch, tokens, heads, NWG, sms);
  std::vector<int> taken(static_cast<size_t>(batch) * heads * tokens, 0);
  int narrow = 0;
  for (int cta = 0; cta < t.ctas; ++cta) {
    const Work w = work_of<NWG>(t, cta, tokens, heads);
    const bool is_full = cta < t.full;
    if (w.b < 0 || w.b >= batch || w.h < 0 || w.h >= heads || w.m0 < 0 || w.m0 >= tokens || w.nwg < 1 ||
        w.nwg > NWG || (is_full ? w.nwg != NWG : w.nwg == NWG)) {
      std::printf("NWG %d [%d, %d, %d] on %d SMs: CTA %d takes b %d h %d m0 %d with %d consumers\n", NWG, batch,
                  tokens, heads, sms, cta, w.b, w.h, w.m0, w.nwg);
      return false;
    }
    narrow += !is_full;
    for (int r = w.m0; r < w.m0 + 64 * w.nwg && r < tokens; ++r)
      ++taken[(static_cast<size_t>(w.b) * heads + w.h) * tokens + r];
  }
  for (size_t i = 0; i < taken.size(); ++i)
    if (taken[i] != 1) {
      std::printf("NWG %d [%d, %d, %d] on %d SMs: query %zu of (batch, head) %zu taken %d times\n", NWG, batch,
                  tokens, heads, sms, i % tokens, i / tokens, taken[i]);
      return false;
    }
  if (narrow > sms) {
    std::printf("NWG %d [%d, %d, %d] on %d SMs: %d narrow CTAs need a second round\n", NWG, batch, tokens, heads,
                sms, narrow);
    return false;
  }
  return true;
}

int main() {
  const int sms_list[] = {132, 114, 108, 1, 7};
  const int tokens_list[] = {1, 63, 64, 65, 77, 128, 193, 300, 1000, 4096, 6144, 6145};
  for (int sms : sms_list)
    for (int tokens : tokens_list)
      for (int batch = 1; batch <= 2; ++batch)
        for (int heads : {1, 2, 3, 4, 24, 30, 31, 32, 33})
          if (!check<3>(batch, tokens, heads, sms) || !check<2>(batch, tokens, heads, sms)) return 1;
  std::puts("ok");
  return 0;
}
