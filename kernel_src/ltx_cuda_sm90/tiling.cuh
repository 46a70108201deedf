// tiling.cuh: which queries each CTA of attention.cuh's kernel takes. Plain C++ (no CUDA types), so that a CPU
// test compiles it alone and checks that every query of every head is covered exactly once.
#pragma once

#include <cstdint>

namespace ltx_cuda_sm90 {

// Which queries each CTA takes. The grid is one-dimensional: CTAs 0 .. full - 1 take BM = 64 * NWG queries
// each, in (query block, head, batch) order. The items that would fill only part of a last wave (leaving the
// other SMs idle for a whole item's time: at the 2B shape 68 of 2,048 items on 132 SMs, a 16th wave for 15.5
// waves of work) are cut instead into narrow CTAs of 64 * (NWG - 1) queries, NWG - 1 consumers each (one where
// a head's rows run out), launched last: a narrow CTA with two consumers takes 4/5 of a full one's time (57
// against 71 µs on the H200), so the last round ends that much sooner (the 2B shape: 1,188 -> 1,169 µs).
// The narrow CTAs run from query `row0` of (batch, head) `bh0` to the end of its rows (`first` CTAs), then over
// every query of each later (batch, head) (`per_head` CTAs each).
struct Tiling {
  int qblocks;   // BM-query blocks per (batch, head)
  int full;      // CTAs of BM queries
  int bh0;       // batch * heads + head of the first narrow CTA
  int row0;      // its first query
  int first;     // narrow CTAs in (batch, head) bh0
  int per_head;  // narrow CTAs in each later (batch, head)
  int ctas;      // the grid
};

// What one CTA computes: queries m0 .. m0 + 64 * nwg - 1 (those below `tokens`) of head h of batch b, with
// consumers 0 .. nwg - 1.
struct Work {
  int b, h, m0, nwg;
};

template <int NWG>
__host__ __device__ __forceinline__ Work work_of(const Tiling& t, int cta, int tokens, int heads) {
  constexpr int kNarrow = 64 * (NWG - 1);
  int bh, m0, nwg = NWG;
  if (cta < t.full) {
    bh = cta / t.qblocks;
    m0 = (cta - bh * t.qblocks) * 64 * NWG;
  } else {
    int n = cta - t.full;
    if (n < t.first) {
      bh = t.bh0;
      m0 = t.row0 + n * kNarrow;
    } else {
      n -= t.first;
      bh = t.bh0 + 1 + n / t.per_head;
      m0 = (n % t.per_head) * kNarrow;
    }
    const int left = (tokens - m0 + 63) / 64;  // 64-query blocks left in the head
    nwg = left < NWG - 1 ? left : NWG - 1;
  }
  return {bh / heads, bh % heads, m0, nwg};
}

// The tiling of `batch` x `heads` x `tokens` queries for `sms` SMs, one CTA each at a time; balance = false keeps
// every item whole (the probe's baseline).
inline Tiling make_tiling(int64_t batch, int64_t tokens, int64_t heads, int nwg, int sms, bool balance = true) {
  const int64_t bm = 64 * nwg, narrow = bm - 64;
  const int64_t qblocks = (tokens + bm - 1) / bm, items = qblocks * heads * batch;
  const Tiling whole{static_cast<int>(qblocks), static_cast<int>(items), 0, 0, 0, 1, static_cast<int>(items)};
  const int64_t rest = sms > 0 ? items % sms : 0;
  if (!balance || rest == 0) return whole;
  const int64_t start = items - rest, bh0 = start / qblocks, row0 = (start - bh0 * qblocks) * bm;
  const int64_t first = (tokens - row0 + narrow - 1) / narrow, per_head = (tokens + narrow - 1) / narrow;
  const int64_t narrow_ctas = first + (batch * heads - bh0 - 1) * per_head;
  if (narrow_ctas > sms) return whole;  // they would need a second round
  return {static_cast<int>(qblocks), static_cast<int>(start), static_cast<int>(bh0),     static_cast<int>(row0),
          static_cast<int>(first),   static_cast<int>(per_head), static_cast<int>(start + narrow_ctas)};
}

}  // namespace ltx_cuda_sm90
