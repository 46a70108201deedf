// attention.cuh: self-attention forward on Hopper (sm_90a), head dim 64, bf16 in and out, fp32 softmax and
// accumulators. q, k, v and the output are [B, S, H, 64] with contiguous rows (the projection's own layout).
//
// One CTA: BM = 64 * NWG queries of one (batch, head) (fewer in the last round: Tiling). Warpgroup 0 produces:
// one thread copies the Q tile once and K/V tiles of BN tokens into a STAGES-deep ring with the bulk tensor
// copy engine (128-byte swizzle, which is the wgmma operand layout). Warpgroups 1..NWG consume 64 queries each:
// S = Q K^T by wgmma from shared memory, online softmax in registers (exp2 domain), O += P V by wgmma with P in
// registers and V read transposed. How a consumer orders that work is the kernel's Schedule (below): the
// shipped one issues Q K^T(j) and P V(j - 1) together, and the consumers take turns to issue them.
// The overlapped schedules run two passes at most. The first takes V in fp16 (cast by the launch into the
// caller's scratch) and the bf16 scores against one softmax offset per row, tile 0's maximum, with fp16 P V: no
// running maximum and no rescale of O. A row whose exponentials pass 2^15 takes that tile the exact way (new
// maximum, O rescaled). Each consumer then judges its rows by their output: not finite (a V past fp16's range)
// or a mean |o| under 2^-12 (fp16's subnormals could cost V precision) sends the CTA through its tiles again the
// online way over the bf16 V, so the output is as accurate as the online softmax's on every input.
// Each consumer stages its normalised O rows in its own rows of the Q tile and stores them with one bulk tensor
// copy. Out-of-range tokens of the last tiles arrive as zeros; their scores are masked and their rows not stored.
// How a tile's scores come to be is the kernel's Scores policy: Bf16Scores here (bf16 q and k, bf16 wgmma);
// the probe's 8-bit draft (scripts/attn_wgmma/int8.cuh) plugs INT8 q and k into the same pipeline.
// attention.cu instantiates the shipped configuration; the probe in scripts/attn_wgmma times others.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tiling.cuh"
#include "wgmma.cuh"

namespace ltx_cuda_sm90 {

constexpr int kHeadDim = 64;
constexpr int kRowBytes = kHeadDim * 2;  // one token's head: exactly one 128-byte swizzle row

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// Bulk tensor copy of `rows` tokens of one head, starting at token s, into 128B-swizzled shared memory.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, uint64_t* bar, int s, int h, int b) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(0), "r"(h), "r"(s), "r"(b)
      : "memory");
}

// wgmma shared-memory descriptor of a tile of ROW-byte rows in ROW-byte swizzle (128 or 64), kept as its low
// word: the start address >> 4 and a leading byte offset (unused by these layouts); the high word is constant
// (8 * ROW bytes between 8-row groups, the swizzle mode). A step along the tile adds to the low word only
// (shared addresses are below 2^18, so the sum stays in the address field): one uniform add per wgmma, where
// building each descriptor from its address took five and held the tensor cores' issue back.
template <int ROW>
struct Desc {
  static_assert(ROW == 128 || ROW == 64, "128- or 64-byte swizzle");
  static constexpr uint32_t kHi = (8 * ROW >> 4) | (ROW == 128 ? 1u : 2u) << 30;
  uint32_t lo;

  __device__ __forceinline__ explicit Desc(uint32_t addr) : lo((addr >> 4) | 1u << 16) {}  // addr: 16-byte aligned

  // the descriptor of the tile starting `bytes` (a multiple of 16) further on
  __device__ __forceinline__ uint64_t at(uint32_t bytes) const {
    return static_cast<uint64_t>(kHi) << 32 | (lo + (bytes >> 4));
  }
};

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N = 0>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void wgmma_wait_all() { wgmma_wait<0>(); }

// Named barriers (id 0 is __syncthreads'): `threads` arrivals complete one; bar_sync also waits for it.
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Keeps the compiler from reading accumulators before the wgmma that writes them has been waited for.
template <int N>
__device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t pack_half(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// S[64 x BN] = Q[64 x 64] K[BN x 64]^T: four k16 steps of 32 bytes along the swizzled rows.
template <int BN>
__device__ __forceinline__ void qk(float (&s)[BN / 2], uint32_t q_addr, uint32_t k_addr) {
  const Desc<128> q(q_addr), k(k_addr);
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    const uint64_t da = q.at(kk * 32), db = k.at(kk * 32);
    if constexpr (BN == 64) wgmma_ss_n64(s, da, db, kk > 0);
    if constexpr (BN == 128) wgmma_ss_n128(s, da, db, kk > 0);
  }
}

// O[64 x 64] += P[64 x BN] V[BN x 64]: BN/16 steps of 16 tokens (2 KB of V each); P and V fp16 where HALF.
template <int BN, bool HALF>
__device__ __forceinline__ void pv(float (&o)[32], const uint32_t (&p)[BN / 16][4], uint32_t v_addr) {
  const Desc<kRowBytes> v(v_addr);
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    if constexpr (HALF) wgmma_rs_n64_f16(o, p[kk], v.at(kk * 16 * kRowBytes));
    else wgmma_rs_n64(o, p[kk], v.at(kk * 16 * kRowBytes));
  }
}

// Scores of tokens at or past `tokens` (the last tile's zero rows) become -inf.
template <int BN>
__device__ __forceinline__ void mask_tail(float (&s)[BN / 2], int first, int tokens, int lane) {
#pragma unroll
  for (int i = 0; i < BN / 2; ++i)
    if (first + 8 * (i / 4) + 2 * (lane % 4) + (i & 1) >= tokens) s[i] = -INFINITY;
}

// Online softmax of one S tile in place (S becomes P, unnormalised): m is the running row max in the exp2
// domain, l this thread's share of the row sum, alpha the factor that rescales the previous state. Row h's
// exp2-domain scores are (s - kBase) * f[h]: kBase is 0 for bf16 scores; the INT8 draft's scores arrive as
// floats offset by an exact integer (scripts/attn_wgmma/int8.cuh), which the exponent's FMA takes off.
// The row maximum is taken over the scores' bits by Hopper's three-input integer max (DPX), two scores an
// instruction: as signed integers, floats >= +0 keep their order and sort above every negative float, so that is
// the float maximum wherever a row has a score >= 0. A row whose scores are all negative matters only where its
// running maximum is negative too; its maximum is then the integer minimum (negative floats sort in reverse),
// which a warp holding such a row takes in a second pass. The INT8 draft's offset scores are never negative.
template <int BN, int kBase = 0>
__device__ __forceinline__ void softmax(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                        const float (&f)[2]) {
  float mx[2], c[2];
  // r: max3/max2 over each row's score bits, then over the quad
  const auto row_extreme = [&](int (&r)[2], auto max3, auto max2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) r[h] = max2(__float_as_int(s[2 * h]), __float_as_int(s[2 * h + 1]));
#pragma unroll
    for (int i = 4; i < BN / 2; i += 4)
#pragma unroll
      for (int h = 0; h < 2; ++h) r[h] = max3(r[h], __float_as_int(s[i + 2 * h]), __float_as_int(s[i + 2 * h + 1]));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      r[h] = max2(r[h], __shfl_xor_sync(0xffffffffu, r[h], 1));
      r[h] = max2(r[h], __shfl_xor_sync(0xffffffffu, r[h], 2));
    }
  };
  int r[2], n[2];
  row_extreme(r, [](int a, int b, int c) { return __vimax3_s32(a, b, c); }, [](int a, int b) { return max(a, b); });
  if constexpr (kBase == 0)
    if (__any_sync(0xffffffffu, (r[0] < 0 && m[0] < 0.f) || (r[1] < 0 && m[1] < 0.f))) {
      row_extreme(n, [](int a, int b, int c) { return __vimin3_s32(a, b, c); }, [](int a, int b) { return min(a, b); });
#pragma unroll
      for (int h = 0; h < 2; ++h) r[h] = r[h] < 0 ? n[h] : r[h];
    }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = __int_as_float(r[h]);
    const float m_new = fmaxf(m[h], (kBase ? mx[h] - float(kBase) : mx[h]) * f[h]);
    alpha[h] = ex2(m[h] - m_new);
    m[h] = m_new;
    c[h] = kBase ? fmaf(float(kBase), f[h], m_new) : m_new;
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) {
    const int h = (i >> 1) & 1;
    s[i] = ex2(fmaf(s[i], f[h], -c[h]));
    sum[h] += s[i];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + sum[h];
}

// The exponentials of one S tile against the fixed row offsets m (exp2 domain), in place; sum: this thread's
// share of each row's sum.
template <int BN>
__device__ __forceinline__ void offset_exp(float (&s)[BN / 2], const float (&m)[2], float (&sum)[2], float f) {
  sum[0] = sum[1] = 0.f;
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) {
    const int h = (i >> 1) & 1;
    s[i] = ex2(fmaf(s[i], f, -m[h]));
    sum[h] += s[i];
  }
}

// Whether any of the 128 threads at named barrier `id` passes p (each of them gets the answer).
__device__ __forceinline__ bool bar_red_or(int id, bool p) {
  uint32_t any;
  asm volatile(
      "{\n.reg .pred P, Q;\nsetp.ne.u32 P, %1, 0;\nbar.red.or.pred Q, %2, 128, P;\nselp.u32 %0, 1, 0, Q;\n}"
      : "=r"(any)
      : "r"(uint32_t(p)), "r"(id)
      : "memory");
  return any != 0;
}

// Whether a row share's exponentials still fit their offset (false for inf and NaN).
__device__ __forceinline__ bool offset_fits(const float (&sum)[2]) {
  return sum[0] < 0x1p15f && sum[1] < 0x1p15f;
}

struct Bf16Scores;
// the bf16 scores' exp2-domain scale, which the fixed offset needs (0 for the 8-bit draft, which keeps its maximum)
template <class S>
__device__ __forceinline__ float scale_log2(const S& s) {
  if constexpr (std::is_same<S, Bf16Scores>::value) return s.scale_log2; else return 0.f;
}

// What a Scores policy may do to its consumer's 64 rows of the Q tile before the first Q K^T: fold_start() runs
// before Q lands (work that needs no Q), fold_finish() rewrites the rows in shared memory after; the kernel then
// fences the writes for wgmma and syncs the warpgroup. The shipped policy folds nothing (NoFold: no code); the
// probe's Q fold (scripts/attn_wgmma/qfold.cuh) applies LTX-Video's q norm and RoPE there.
struct NoFold {
  static constexpr bool kFoldQ = false;
  struct Fold {};
  __device__ __forceinline__ Fold fold_start(int, int, int, int, int) const { return {}; }
  __device__ __forceinline__ void fold_finish(const Fold&, uint8_t*, int) const {}
};

// The bf16 scores: S = Q K^T by wgmma from the swizzled tiles, scaled by scale * log2(e) in the softmax.
// A Scores policy names its q/k rows' bytes and tensor-map format, the state a thread keeps for its two rows,
// tile(), which turns one K tile into the thread's scores, and softmax(), the online softmax of them.
struct Bf16Scores : NoFold {
  static constexpr int kQKRowBytes = kRowBytes;
  static constexpr CUtensorMapDataType kMapType = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  static constexpr CUtensorMapSwizzle kSwizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  struct Rows {};
  float scale_log2;

  __device__ __forceinline__ Rows rows(int, int, int, int, int, int) const { return {}; }

  template <int BN>
  __device__ __forceinline__ void tile(float (&s)[BN / 2], Rows&, uint32_t q_addr, uint32_t k_addr, int) const {
    wgmma_fence();
    qk<BN>(s, q_addr, k_addr);
    wgmma_commit();
    wgmma_wait_all();
    pin(s);
  }

  // The overlapped schedule's half of tile(): the wgmmas only (the caller fences, commits, waits and pins,
  // then calls finish() on the scores).
  template <int BN>
  __device__ __forceinline__ void issue(float (&s)[BN / 2], Rows&, uint32_t q_addr, uint32_t k_addr, int) const {
    qk<BN>(s, q_addr, k_addr);
  }

  template <int BN>
  __device__ __forceinline__ void finish(float (&)[BN / 2], Rows&, int) const {}

  template <int BN>
  __device__ __forceinline__ void softmax(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                          const Rows&) const {
    const float f[2] = {scale_log2, scale_log2};
    ltx_cuda_sm90::softmax<BN>(s, m, l, alpha, f);
  }
};

// One consumer's 64 output rows (O * inv, bf16) through `tile`, its own rows of the Q tile (idle once its last
// Q K^T is done): written in the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8), no bank
// conflicts), then stored by one thread with one bulk tensor copy, which writes whole 32-byte sectors (the
// accumulator layout's direct 4-byte stores fill half of each) and drops the rows past the tensor's end.
__device__ __forceinline__ void store_o_bulk(const float (&o)[32], const float (&inv)[2], uint8_t* tile,
                                             const CUtensorMap* map, int b, int h, int m, int t, int w) {
  const int lane = t % 32;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = (t / 32) * 16 + lane / 4 + 8 * hh;
#pragma unroll
    for (int c = 0; c < 8; ++c)
      *reinterpret_cast<__nv_bfloat162*>(tile + r * kRowBytes + ((c ^ (r & 7)) << 4) + 4 * (lane % 4)) =
          __floats2bfloat162_rn(o[4 * c + 2 * hh] * inv[hh], o[4 * c + 2 * hh + 1] * inv[hh]);
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy writes, read by the copy engine
  bar_sync(8 + w, 128);                                           // the warpgroup's rows, all written
  if (t == 0) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
            reinterpret_cast<uint64_t>(map)),
        "r"(smem_addr(tile)), "r"(0), "r"(h), "r"(m), "r"(b)
        : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // the tile is read before the CTA exits
  }
}

template <int BM, int BN, int STAGES, int QK_ROW>
struct Smem {
  alignas(1024) uint8_t q[BM * QK_ROW];
  alignas(1024) uint8_t k[STAGES][BN * QK_ROW];
  alignas(1024) uint8_t v[STAGES][BN * kRowBytes];
  uint64_t q_full;
  uint64_t k_full[STAGES];
  uint64_t v_full[STAGES];
  uint64_t empty[STAGES];    // a stage's V (and K, in the serial schedule) consumed
  uint64_t k_empty[STAGES];  // a stage's K consumed (the overlapped schedule)
  uint64_t checked;          // every consumer warp has judged the first pass's output
  uint32_t v_wide;           // an output row of the first pass says V in fp16 lost it: run again in bf16
};

// How a consumer orders its work on one K/V tile j.
//   kSerial: S = Q K^T(j), softmax, O += P V(j), each waited for; the consumers interleave on the SM.
//   kOverlap: Q K^T(j) and P V(j - 1) in flight together (FA3's intra-warpgroup overlap); K(j) is released as
//     soon as its scores exist, V(j - 1) once P V is done. The source waits for P V after j's softmax; ptxas
//     (13.0) moves that wait up to the softmax's first instructions, so P V runs under the other consumers'
//     work: kept after the softmax (P in registers, no spills) it measured 3.4 % slower (BENCHMARKS.md §8).
//   kOverlapOrdered: kOverlap, with the consumers taking turns to issue their wgmmas (named barriers 1..NWG,
//     FA3's warp scheduler barrier), so their softmaxes stay staggered.
enum class Schedule { kSerial, kOverlap, kOverlapOrdered };

// O *= alpha, row by row (alpha: the online softmax's rescale of the previous state)
__device__ __forceinline__ void rescale(float (&o)[32], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i] *= alpha[(i >> 1) & 1];
}

// P as wgmma A fragments: 16 columns of the m64nN accumulator layout are the m64k16 A layout.
template <int BN, bool HALF>
__device__ __forceinline__ void to_p(uint32_t (&p)[BN / 16][4], const float (&s)[BN / 2]) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) p[kk][r] = (HALF ? pack_half : pack_bf16)(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

template <int NWG>
__host__ __device__ constexpr int consumer_registers() {
  return NWG == 2 ? 240 : 160;  // what 65536 registers leave after the producer's 24 x 128
}

template <class Scores, int NWG, int BN, int STAGES, Schedule SCHED>
__global__ void __launch_bounds__(128 * (NWG + 1), 1)
    attention_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                     const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap to,
                     __nv_bfloat16* __restrict__ out, int tokens, int heads, const Tiling tiling,
                     const Scores scores, const __grid_constant__ CUtensorMap tv16) {
  static_assert(NWG == 2 || NWG == 3, "two or three consumer warpgroups");
  constexpr int BM = 64 * NWG, QK_ROW = Scores::kQKRowBytes;
  using Sm = Smem<BM, BN, STAGES, QK_ROW>;
  extern __shared__ uint8_t raw[];
  Sm& sm = *reinterpret_cast<Sm*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  const Work item = work_of<NWG>(tiling, blockIdx.x, tokens, heads);
  const int b = item.b, h = item.h, m0 = item.m0, nwg = item.nwg;
  const int n_tiles = (tokens + BN - 1) / BN;
  // the warpgroup from lane 0, so that the compiler knows it warp-uniform and keeps the wgmma descriptors that
  // derive from it in uniform registers
  const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0), t = threadIdx.x % 128;
  // whether the first pass is to be run again in bf16: the consumers' verdict, once every one has given it
  const auto redo = [&] {
    mbar_wait(&sm.checked, 0);
    return *reinterpret_cast<volatile uint32_t*>(&sm.v_wide) != 0;
  };

  if (threadIdx.x == 0) {
    mbar_init(&sm.q_full, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&sm.k_full[s], 1);
      mbar_init(&sm.v_full[s], 1);
      mbar_init(&sm.empty[s], 4 * nwg);  // one arrival per consumer warp
      mbar_init(&sm.k_empty[s], 4 * nwg);
    }
    mbar_init(&sm.checked, 4 * nwg);
    sm.v_wide = 0;
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
    if (t == 0) {
      mbar_expect_tx(&sm.q_full, BM * QK_ROW);
      tma_load(sm.q, &tq, &sm.q_full, m0, h, b);
      if constexpr (SCHED == Schedule::kSerial) {
        for (int j = 0; j < n_tiles; ++j) {
          const int s = j % STAGES;
          if (j >= STAGES) mbar_wait(&sm.empty[s], ((j / STAGES) & 1) ^ 1);
          mbar_expect_tx(&sm.k_full[s], BN * QK_ROW);
          tma_load(sm.k[s], &tk, &sm.k_full[s], j * BN, h, b);
          mbar_expect_tx(&sm.v_full[s], BN * kRowBytes);
          tma_load(sm.v[s], &tv, &sm.v_full[s], j * BN, h, b);
        }
      } else {
        // in the order the consumers take them: K(0), then K(j) with V(j - 1), then the last V
        // g: the ring's count (the second pass counts on from n_tiles), g % n_tiles the tile
        const auto load_k = [&](int g) {
          const int s = g % STAGES, j = g < n_tiles ? g : g - n_tiles;
          if (g >= STAGES) mbar_wait(&sm.k_empty[s], ((g / STAGES) & 1) ^ 1);
          mbar_expect_tx(&sm.k_full[s], BN * QK_ROW);
          tma_load(sm.k[s], &tk, &sm.k_full[s], j * BN, h, b);
        };
        const auto load_v = [&](int g) {
          const int s = g % STAGES, j = g < n_tiles ? g : g - n_tiles;
          if (g >= STAGES) mbar_wait(&sm.empty[s], ((g / STAGES) & 1) ^ 1);
          mbar_expect_tx(&sm.v_full[s], BN * kRowBytes);
          tma_load(sm.v[s], g < n_tiles ? &tv16 : &tv, &sm.v_full[s], j * BN, h, b);
        };
        for (int base = 0;; base = n_tiles) {
          load_k(base);
          for (int j = 1; j < n_tiles; ++j) {
            load_k(base + j);
            load_v(base + j - 1);
          }
          load_v(base + n_tiles - 1);
          if (base || !redo()) break;
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(consumer_registers<NWG>()));
    const int w = wg - 1, lane = t % 32;
    if (w >= nwg) return;  // a narrow CTA's idle consumer
    const uint32_t q_addr = smem_addr(sm.q) + w * 64 * QK_ROW;
    const int row0 = m0 + w * 64 + (t / 32) * 16 + lane / 4;  // this thread's rows: row0 and row0 + 8
    typename Scores::Rows rows = scores.rows(b, h, row0, tokens, heads, n_tiles);
    const typename Scores::Fold fold = scores.fold_start(b, h, m0 + w * 64, tokens, t);
    float o[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2];
    uint32_t p[BN / 16][4];
    mbar_wait(&sm.q_full, 0);
    if constexpr (Scores::kFoldQ) {
      scores.fold_finish(fold, sm.q + w * 64 * QK_ROW, t);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy writes, read by wgmma
      bar_sync(8 + w, 128);                                           // the warpgroup's rows, all rewritten
    }
    if constexpr (SCHED == Schedule::kSerial) {
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % STAGES;
        const uint32_t phase = (j / STAGES) & 1;
        float sc[BN / 2];
        mbar_wait(&sm.k_full[s], phase);
        scores.template tile<BN>(sc, rows, q_addr, smem_addr(sm.k[s]), j);
        if ((j + 1) * BN > tokens) mask_tail<BN>(sc, j * BN, tokens, lane);
        scores.template softmax<BN>(sc, m, l, alpha, rows);
        rescale(o, alpha);
        to_p<BN, false>(p, sc);
        mbar_wait(&sm.v_full[s], phase);
        wgmma_fence();
        pv<BN, false>(o, p, smem_addr(sm.v[s]));
        wgmma_commit();
        wgmma_wait_all();
        pin(o);
        __syncwarp();
        if (lane == 0) mbar_arrive(&sm.empty[s]);
      }
    } else {
      constexpr bool kOrdered = SCHED == Schedule::kOverlapOrdered;
      const auto release = [&](uint64_t* bar) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bar);
      };
      float sc[BN / 2];
      // One pass over the tiles, in fp16 P V with the fixed offset (HALF) or the shipped way; base: the ring's
      // count at its first tile. Each pass its own code: a branch around the wgmmas serialises them (C7520).
      const auto pass = [&](auto half, int base) {
        constexpr bool HALF = decltype(half)::value;
        // tile 0's scores alone (O is still zero: no P V yet)
        mbar_wait(&sm.k_full[base % STAGES], (base / STAGES) & 1);
        scores.template tile<BN>(sc, rows, q_addr, smem_addr(sm.k[base % STAGES]), 0);
        release(&sm.k_empty[base % STAGES]);
        if (BN > tokens) mask_tail<BN>(sc, 0, tokens, lane);
        scores.template softmax<BN>(sc, m, l, alpha, rows);
        to_p<BN, HALF>(p, sc);
        // Turns: consumer w waits on barrier 1 + w, then hands the turn to the next. An arrival that hands
        // nothing (every consumer's but the first's here, the last consumer's on the last tile) goes to the
        // consumer's own one-warpgroup barrier 12 + w instead, which it completes alone: no barrier is left
        // half-arrived, and no consumer branches around a barrier (ptxas would serialise the wgmmas: C7520).
        // The next consumer's barrier, worked out once: a division in the loop would sit between the wgmmas'
        // issue and the hand-over (6 % slower, measured).
        const int next = 1 + (w + 1 < nwg ? w + 1 : 0);
        const bool last = w == nwg - 1;
        const auto hand_turn = [&](bool to_next, int next_bar) {
          if constexpr (kOrdered) bar_arrive(to_next ? next_bar : 12 + w, to_next ? 256 : 128);
        };
        hand_turn(w == 0 && n_tiles > 1, 1);  // the first consumer issues first
        for (int j = 1; j < n_tiles; ++j) {
          const int g = base + j, s = g % STAGES, sv = (g - 1) % STAGES;
          mbar_wait(&sm.k_full[s], (g / STAGES) & 1);
          mbar_wait(&sm.v_full[sv], ((g - 1) / STAGES) & 1);  // here: no branch between the fence and P V
          if constexpr (kOrdered) bar_sync(1 + w, 256);
          wgmma_fence();
          scores.template issue<BN>(sc, rows, q_addr, smem_addr(sm.k[s]), j);
          wgmma_commit();
          pv<BN, HALF>(o, p, smem_addr(sm.v[sv]));
          wgmma_commit();
          hand_turn(!(last && j == n_tiles - 1), next);
          wgmma_wait<1>();  // Q K^T(j) done; P V(j - 1) may still run
          pin(sc);
          scores.template finish<BN>(sc, rows, j);
          if ((j + 1) * BN > tokens) mask_tail<BN>(sc, j * BN, tokens, lane);
          if constexpr (std::is_same<Scores, Bf16Scores>::value && HALF) {
            float sum[2];
            offset_exp<BN>(sc, m, sum, scale_log2(scores));
            const bool refit = bar_red_or(4 + w, !offset_fits(sum));  // the warpgroup's, as its wgmma
            wgmma_wait<0>();
            pin(o);
            release(&sm.empty[sv]);
            if (refit) {  // rare: a row rose 64 past its offset; the tile again, the exact way
              wgmma_fence();
              qk<BN>(sc, q_addr, smem_addr(sm.k[s]));
              wgmma_commit();
              wgmma_wait_all();
              pin(sc);
              if ((j + 1) * BN > tokens) mask_tail<BN>(sc, j * BN, tokens, lane);
              scores.template softmax<BN>(sc, m, l, alpha, rows);
              rescale(o, alpha);
            } else {
              l[0] += sum[0];
              l[1] += sum[1];
            }
            release(&sm.k_empty[s]);  // K(j): read again only by a refit
          } else {
            release(&sm.k_empty[s]);
            scores.template softmax<BN>(sc, m, l, alpha, rows);
            wgmma_wait<0>();
            pin(o);
            release(&sm.empty[sv]);
            rescale(o, alpha);
          }
          to_p<BN, HALF>(p, sc);
        }
        const int g = base + n_tiles - 1, sv = g % STAGES;
        mbar_wait(&sm.v_full[sv], (g / STAGES) & 1);
        wgmma_fence();
        pv<BN, HALF>(o, p, smem_addr(sm.v[sv]));
        wgmma_commit();
        wgmma_wait_all();
        pin(o);
        return sv;
      };
      const int sv = pass(std::true_type{}, 0);
      // The first pass's output, row by row: not finite (a V past fp16's range became inf), or with a mean |o|
      // under 2^-12, where fp16's subnormals (spacing 2^-24) could cost V precision that bf16 keeps. Either
      // sends the CTA through its tiles again the shipped way (bf16 V, the online softmax).
      bool off = false;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float a = 0.f, lt = l[hh];
#pragma unroll
        for (int c = 0; c < 8; ++c) a += fabsf(o[4 * c + 2 * hh]) + fabsf(o[4 * c + 2 * hh + 1]);
        a += __shfl_xor_sync(0xffffffffu, a, 1);
        a += __shfl_xor_sync(0xffffffffu, a, 2);
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        off |= row0 + 8 * hh < tokens && !(a < INFINITY && a >= 0x1p-6f * lt);  // 64 values: 2^-12 each
      }
      if (__any_sync(0xffffffffu, off) && lane == 0) *reinterpret_cast<volatile uint32_t*>(&sm.v_wide) = 1;
      release(&sm.checked);
      if (redo()) {  // rare
        release(&sm.empty[sv]);  // the last V, which the second pass loads again
#pragma unroll
        for (int i = 0; i < 32; ++i) o[i] = 0.f;
        m[0] = m[1] = -INFINITY;
        l[0] = l[1] = 0.f;
        pass(std::false_type{}, n_tiles);
      }
    }

    // finish the row sums across the quad, normalise, store bf16
    float inv[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float x = l[hh];
      x += __shfl_xor_sync(0xffffffffu, x, 1);
      x += __shfl_xor_sync(0xffffffffu, x, 2);
      inv[hh] = 1.f / x;
    }
    if constexpr (QK_ROW == kRowBytes) {
      store_o_bulk(o, inv, sm.q + w * 64 * QK_ROW, &to, b, h, m0 + w * 64, t, w);
    } else {  // q rows narrower than O's (the probe's INT8 draft): no room to stage O, so stored directly
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = row0 + 8 * hh;
        if (row >= tokens) continue;
        __nv_bfloat16* dst =
            out + ((static_cast<size_t>(b) * tokens + row) * heads + h) * kHeadDim + 2 * (lane % 4);
#pragma unroll
        for (int c = 0; c < 8; ++c)
          *reinterpret_cast<__nv_bfloat162*>(dst + 8 * c) =
              __floats2bfloat162_rn(o[4 * c + 2 * hh] * inv[hh], o[4 * c + 2 * hh + 1] * inv[hh]);
      }
    }
  }
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's tensor-map encoder, found through the runtime (no link against libcuda).
inline EncodeTiled encoder() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
#else
    const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &found);
#endif
    const bool ok = err == cudaSuccess && found == cudaDriverEntryPointSuccess;
    return ok ? reinterpret_cast<EncodeTiled>(p) : nullptr;
  }();
  return fn;
}

// A contiguous [B, S, H, 64] tensor of `row_bytes` per token and head as a 4-d tensor map whose box is `rows`
// tokens of one head.
inline bool make_map(CUtensorMap* map, const void* base, int64_t batch, int64_t tokens, int64_t heads, int rows,
                     CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, cuuint64_t row_bytes = kRowBytes,
                     CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  const cuuint64_t dims[4] = {kHeadDim, cuuint64_t(heads), cuuint64_t(tokens), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {row_bytes, cuuint64_t(heads) * row_bytes, cuuint64_t(tokens * heads) * row_bytes};
  const cuuint32_t box[4] = {kHeadDim, 1, cuuint32_t(rows), 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  const EncodeTiled fn = encoder();
  return fn && fn(map, type, 4, const_cast<void*>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The current device's SM count (0 if the runtime cannot say: then no item is cut).
inline int sm_count() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return 0;
  return sms;
}

// V to fp16, 16 bytes a thread and step (bf16 past fp16's range becomes inf, which the first pass's check sees)
static __global__ void bf16_to_f16(const uint4* __restrict__ in, uint4* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint4 w = in[i];
    uint32_t* x = reinterpret_cast<uint32_t*>(&w);
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] = pack_half(__uint_as_float(x[k] << 16), __uint_as_float(x[k] & 0xffff0000u));
    out[i] = w;
  }
}

// Launches one configuration with the given scores; returns nullptr, or what went wrong. The launch itself is
// checked by the caller. v16: scratch of v's size, which the overlapped schedules overwrite with V in fp16 (the
// serial one takes nullptr).
template <class Scores, int NWG, int BN, int STAGES, Schedule SCHED = Schedule::kSerial>
const char* launch_with(const Scores& scores, void* out, const void* q, const void* k, const void* v, void* v16,
                        int64_t batch, int64_t tokens, int64_t heads, cudaStream_t stream, bool balance = true) {
  constexpr int BM = 64 * NWG, QK_ROW = Scores::kQKRowBytes;
  CUtensorMap tq, tk, tv, to;  // to: the output, 64 rows a box (one consumer's)
  if (!make_map(&tq, q, batch, tokens, heads, BM, Scores::kMapType, QK_ROW, Scores::kSwizzle) ||
      !make_map(&tk, k, batch, tokens, heads, BN, Scores::kMapType, QK_ROW, Scores::kSwizzle) ||
      !make_map(&tv, v, batch, tokens, heads, BN) || !make_map(&to, out, batch, tokens, heads, 64))
    return "the CUDA driver refused the tensor maps (cuTensorMapEncodeTiled); a driver for CUDA 12 or later is "
           "needed";
  auto kernel = attention_kernel<Scores, NWG, BN, STAGES, SCHED>;
  constexpr int smem = sizeof(Smem<BM, BN, STAGES, QK_ROW>) + 1024;  // + alignment of the swizzled tiles
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
    return "could not raise the kernel's shared-memory limit on this device";
  const Tiling tiling = make_tiling(batch, tokens, heads, NWG, sm_count(), balance);
  // V in fp16 for the first pass of the overlapped schedules: cast by a kernel of its own into the caller's
  // scratch (the serial schedule reads V as it is)
  const size_t chunks = size_t(batch) * tokens * heads * kRowBytes / 16;
  CUtensorMap tv16 = tv;
  if constexpr (SCHED != Schedule::kSerial) {
    if (!make_map(&tv16, v16, batch, tokens, heads, BN, CU_TENSOR_MAP_DATA_TYPE_FLOAT16))
      return "the CUDA driver refused the tensor map of V in fp16";
    const size_t blocks = (chunks + 255) / 256;
    bf16_to_f16<<<unsigned(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(static_cast<const uint4*>(v),
                                                                               static_cast<uint4*>(v16), chunks);
  }
  kernel<<<static_cast<unsigned>(tiling.ctas), 128 * (NWG + 1), smem, stream>>>(
      tq, tk, tv, to, static_cast<__nv_bfloat16*>(out), static_cast<int>(tokens), static_cast<int>(heads), tiling,
      scores, tv16);
  return nullptr;
}

// The bf16 kernel in one configuration (attention.cu's and the probe's entry).
template <int NWG, int BN, int STAGES, Schedule SCHED = Schedule::kSerial>
const char* launch_attention(void* out, const void* q, const void* k, const void* v, void* v16, int64_t batch,
                             int64_t tokens, int64_t heads, float scale, cudaStream_t stream, bool balance = true) {
  return launch_with<Bf16Scores, NWG, BN, STAGES, SCHED>(Bf16Scores{{}, scale * 1.4426950408889634f}, out, q, k, v,
                                                         v16, batch, tokens, heads, stream, balance);
}

}  // namespace ltx_cuda_sm90
