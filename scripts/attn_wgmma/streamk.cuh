// streamk.cuh: attention.cuh's kernel with a stream-K last round, a probe experiment (shim.cu's variant 10).
//
// The shipped tiling leaves 68 of 2,048 items for 132 SMs at LTX-Video 2B's shape and runs them as narrow CTAs,
// 4/5 of a wave. Here the first `dp` CTAs take one whole item each, as attention.cuh's do; the items of the
// last partial wave and of the full wave before it (`sk_items`, 200 at the 2B shape) are spread over one CTA
// per SM by key tiles: stream-K CTA c takes tiles [c * T / sk, (c + 1) * T / sk) of those items' T tiles, in
// (item, tile) order, so it may end inside an item that CTA c + 1 continues (each CTA takes at least an item's
// tiles, so an item has at most two pieces). A piece writes its unnormalised O, row maximum and row sum to a
// workspace; combine_kernel merges the two pieces of each split item and stores its rows. The last round then
// ends when the average SM is done (about 1.5 items' time), not when a narrow CTA is. Whole-item CTAs run
// attention_kernel's consumer and producer line for line (a loop over pieces cost the whole kernel 2 %).
// Measured on the H200: no faster than the narrow last round (BENCHMARKS.md §8).
#pragma once

#include <cstddef>

#include "attention.cuh"

namespace ltx_cuda_sm90 {

struct SkTiling {
  int qblocks;   // BM-query blocks per (batch, head)
  int n_tiles;   // key tiles per item
  int dp;        // CTAs of one whole item: items 0 .. dp - 1
  int sk;        // stream-K CTAs (0: none)
  int sk_tiles;  // key tiles of the items from dp on
};

inline SkTiling make_sk_tiling(int64_t batch, int64_t tokens, int64_t heads, int nwg, int bn, int sms) {
  const int64_t bm = 64 * nwg, qblocks = (tokens + bm - 1) / bm, items = qblocks * heads * batch;
  const int64_t n_tiles = (tokens + bn - 1) / bn, rest = sms > 0 ? items % sms : 0;
  if (rest == 0 || items < sms + rest || n_tiles < 2)
    return {static_cast<int>(qblocks), static_cast<int>(n_tiles), static_cast<int>(items), 0, 0};
  const int64_t sk_items = rest + sms;
  return {static_cast<int>(qblocks), static_cast<int>(n_tiles), static_cast<int>(items - sk_items), sms,
          static_cast<int>(sk_items * n_tiles)};
}

// The key tiles [begin, end) that CTA `cta` takes, counted over all items in (item, tile) order.
__host__ __device__ __forceinline__ void sk_range(const SkTiling& t, int cta, int& begin, int& end) {
  if (cta < t.dp) {
    begin = cta * t.n_tiles;
    end = begin + t.n_tiles;
  } else {
    const int64_t c = cta - t.dp, base = static_cast<int64_t>(t.dp) * t.n_tiles;
    begin = static_cast<int>(base + c * t.sk_tiles / t.sk);
    end = static_cast<int>(base + (c + 1) * t.sk_tiles / t.sk);
  }
}

// A piece's record: per consumer thread, its 32 O accumulators, 2 row maxima (exp2 domain) and 2 row sums (over
// the quad), as 36 planes of 128 floats (each plane one coalesced store).
constexpr int kSkRecord = 36;

// Where boundary `bnd` (between stream-K CTAs bnd - 1 and bnd) keeps piece `piece` (0: the item's head, which
// CTA bnd - 1 ends with; 1: its tail, which CTA bnd starts with), for consumer w.
__device__ __forceinline__ float* sk_slot(float* ws, int bnd, int piece, int w, int nwg) {
  return ws + ((static_cast<size_t>(bnd) * 2 + piece) * nwg + w) * kSkRecord * 128;
}

inline size_t sk_workspace_bytes(int sms, int nwg) {
  return static_cast<size_t>(sms + 1) * 2 * nwg * kSkRecord * 128 * sizeof(float);
}

__device__ __forceinline__ void item_coords(int item, int qblocks, int heads, int bm, int& b, int& h, int& m0) {
  const int bh = item / qblocks;
  m0 = (item - bh * qblocks) * bm;
  b = bh / heads;
  h = bh % heads;
}

// O / l as bf16 pairs into the rows this thread holds (row0 and row0 + 8), those below `tokens`.
__device__ __forceinline__ void store_rows(__nv_bfloat16* out, const float (&o)[32], const float (&inv)[2], int row0,
                                           int b, int h, int tokens, int heads, int lane) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int row = row0 + 8 * hh;
    if (row >= tokens) continue;
    __nv_bfloat16* dst = out + ((static_cast<size_t>(b) * tokens + row) * heads + h) * kHeadDim + 2 * (lane % 4);
#pragma unroll
    for (int c = 0; c < 8; ++c)
      *reinterpret_cast<__nv_bfloat162*>(dst + 8 * c) =
          __floats2bfloat162_rn(o[4 * c + 2 * hh] * inv[hh], o[4 * c + 2 * hh + 1] * inv[hh]);
  }
}

template <int BM, int BN, int STAGES>
struct SkSmem {
  alignas(1024) uint8_t q[BM * kRowBytes];
  alignas(1024) uint8_t k[STAGES][BN * kRowBytes];
  alignas(1024) uint8_t v[STAGES][BN * kRowBytes];
  uint64_t q_full;
  uint64_t q_empty;  // every consumer's last Q K^T of a piece done: the next piece's Q may load
  uint64_t k_full[STAGES];
  uint64_t v_full[STAGES];
  uint64_t empty[STAGES];
  uint64_t k_empty[STAGES];
};

// mbarrier wait and arrive at a shared-memory address: the loop keeps the ring's addresses as 32-bit offsets,
// where generic pointers into it made the compiler rebuild the shared window's base every tile.
__device__ __forceinline__ void mbar_wait_at(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void mbar_arrive_at(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// A place in the K/V ring, advanced one tile at a time (a modulo of a runtime count per tile cost the loop 17
// uniform instructions between the turn barrier and the wgmma issue, and 2 % of its time).
template <int STAGES>
struct Ring {
  int s = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void next() {
    if (++s == STAGES) {
      s = 0;
      phase ^= 1;
    }
  }
};

// attention_kernel's overlapped schedule with turns, over the pieces of [begin, end): the K/V ring runs on
// across pieces, and so do the turns.
template <int NWG, int BN, int STAGES>
__global__ void __launch_bounds__(128 * (NWG + 1), 1)
    attention_sk_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                        const __grid_constant__ CUtensorMap tv, __nv_bfloat16* __restrict__ out, int tokens,
                        int heads, const SkTiling t, float* __restrict__ ws, const Bf16Scores scores) {
  constexpr int BM = 64 * NWG;
  using Sm = SkSmem<BM, BN, STAGES>;
  extern __shared__ uint8_t raw[];
  Sm& sm = *reinterpret_cast<Sm*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  const int n_tiles = t.n_tiles;
  int begin, end;
  sk_range(t, blockIdx.x, begin, end);
  const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0), tid = threadIdx.x % 128;

  if (threadIdx.x == 0) {
    mbar_init(&sm.q_full, 1);
    mbar_init(&sm.q_empty, 4 * NWG);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&sm.k_full[s], 1);
      mbar_init(&sm.v_full[s], 1);
      mbar_init(&sm.empty[s], 4 * NWG);
      mbar_init(&sm.k_empty[s], 4 * NWG);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 32;");  // 32 x 128 + 3 x 160 x 128 = 65536
    if (tid == 0 && blockIdx.x < t.dp) {  // one whole item: attention_kernel's producer
      int b, h, m0;
      item_coords(blockIdx.x, t.qblocks, heads, BM, b, h, m0);
      mbar_expect_tx(&sm.q_full, BM * kRowBytes);
      tma_load(sm.q, &tq, &sm.q_full, m0, h, b);
      const auto load_k = [&](int j) {
        const int s = j % STAGES;
        if (j >= STAGES) mbar_wait(&sm.k_empty[s], ((j / STAGES) & 1) ^ 1);
        mbar_expect_tx(&sm.k_full[s], BN * kRowBytes);
        tma_load(sm.k[s], &tk, &sm.k_full[s], j * BN, h, b);
      };
      const auto load_v = [&](int j) {
        const int s = j % STAGES;
        if (j >= STAGES) mbar_wait(&sm.empty[s], ((j / STAGES) & 1) ^ 1);
        mbar_expect_tx(&sm.v_full[s], BN * kRowBytes);
        tma_load(sm.v[s], &tv, &sm.v_full[s], j * BN, h, b);
      };
      load_k(0);
      for (int j = 1; j < n_tiles; ++j) {
        load_k(j);
        load_v(j - 1);
      }
      load_v(n_tiles - 1);
    } else if (tid == 0) {
      // a fresh mbarrier counts as having completed the phase before its first, so the first round of
      // "slot free" waits (parity 1) passes at once
      Ring<STAGES> kr, vr;
      for (int g = begin, n = 0; g < end; ++n) {
        const int item = g / n_tiles, j0 = g - item * n_tiles, j1 = min(n_tiles, j0 + (end - g));
        int b, h, m0;
        item_coords(item, t.qblocks, heads, BM, b, h, m0);
        if (n > 0) mbar_wait(&sm.q_empty, (n - 1) & 1);
        mbar_expect_tx(&sm.q_full, BM * kRowBytes);
        tma_load(sm.q, &tq, &sm.q_full, m0, h, b);
        const auto load_k = [&](int j) {
          mbar_wait(&sm.k_empty[kr.s], kr.phase ^ 1);
          mbar_expect_tx(&sm.k_full[kr.s], BN * kRowBytes);
          tma_load(sm.k[kr.s], &tk, &sm.k_full[kr.s], j * BN, h, b);
          kr.next();
        };
        const auto load_v = [&](int j) {
          mbar_wait(&sm.empty[vr.s], vr.phase ^ 1);
          mbar_expect_tx(&sm.v_full[vr.s], BN * kRowBytes);
          tma_load(sm.v[vr.s], &tv, &sm.v_full[vr.s], j * BN, h, b);
          vr.next();
        };
        load_k(j0);
        for (int j = j0 + 1; j < j1; ++j) {
          load_k(j);
          load_v(j - 1);
        }
        load_v(j1 - 1);
        g += j1 - j0;
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(consumer_registers<NWG>()));
    const int w = wg - 1, lane = tid % 32;
    if (blockIdx.x < t.dp) {  // one whole item: attention_kernel's consumer, line for line
      int b, h, m0;
      item_coords(blockIdx.x, t.qblocks, heads, BM, b, h, m0);
      const uint32_t q_addr = smem_addr(sm.q) + w * 64 * kRowBytes;
      const int row0 = m0 + w * 64 + (tid / 32) * 16 + lane / 4;
      Bf16Scores::Rows rows;
      float o[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) o[i] = 0.f;
      float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2];
      uint32_t p[BN / 16][4];
      mbar_wait(&sm.q_full, 0);
      const auto release = [&](uint64_t* bar) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bar);
      };
      float sc[BN / 2];
      mbar_wait(&sm.k_full[0], 0);
      scores.template tile<BN>(sc, rows, q_addr, smem_addr(sm.k[0]), 0);
      release(&sm.k_empty[0]);
      if (BN > tokens) mask_tail<BN>(sc, 0, tokens, lane);
      scores.template softmax<BN>(sc, m, l, alpha, rows);
      to_p<BN>(p, sc);
      const int next = 1 + (w + 1 < NWG ? w + 1 : 0);
      const bool last = w == NWG - 1;
      const auto hand_turn = [&](bool to_next, int next_bar) {
        bar_arrive(to_next ? next_bar : 12 + w, to_next ? 256 : 128);
      };
      hand_turn(w == 0 && n_tiles > 1, 1);
      for (int j = 1; j < n_tiles; ++j) {
        const int s = j % STAGES, sv = (j - 1) % STAGES;
        mbar_wait(&sm.k_full[s], (j / STAGES) & 1);
        mbar_wait(&sm.v_full[sv], ((j - 1) / STAGES) & 1);
        bar_sync(1 + w, 256);
        wgmma_fence();
        scores.template issue<BN>(sc, rows, q_addr, smem_addr(sm.k[s]), j);
        wgmma_commit();
        pv<BN>(o, p, smem_addr(sm.v[sv]));
        wgmma_commit();
        hand_turn(!(last && j == n_tiles - 1), next);
        wgmma_wait<1>();
        pin(sc);
        release(&sm.k_empty[s]);
        if ((j + 1) * BN > tokens) mask_tail<BN>(sc, j * BN, tokens, lane);
        scores.template softmax<BN>(sc, m, l, alpha, rows);
        wgmma_wait<0>();
        pin(o);
        release(&sm.empty[sv]);
        rescale(o, alpha);
        to_p<BN>(p, sc);
      }
      const int sv = (n_tiles - 1) % STAGES;
      mbar_wait(&sm.v_full[sv], ((n_tiles - 1) / STAGES) & 1);
      wgmma_fence();
      pv<BN>(o, p, smem_addr(sm.v[sv]));
      wgmma_commit();
      wgmma_wait_all();
      pin(o);
      float inv[2];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float x = l[hh];
        x += __shfl_xor_sync(0xffffffffu, x, 1);
        x += __shfl_xor_sync(0xffffffffu, x, 2);
        inv[hh] = 1.f / x;
      }
      store_rows(out, o, inv, row0, b, h, tokens, heads, lane);
      return;
    }
    // shared addresses from the aligned base as 32-bit offsets: the base of `raw` is a link-time constant
    constexpr uint32_t kTile = BN * kRowBytes;
    const uint32_t base = (smem_addr(raw) + 1023u) & ~1023u, q_addr = base + offsetof(Sm, q) + w * 64 * kRowBytes,
                   k_tiles = base + offsetof(Sm, k), v_tiles = base + offsetof(Sm, v),
                   k_full = base + offsetof(Sm, k_full), v_full = base + offsetof(Sm, v_full),
                   k_empty = base + offsetof(Sm, k_empty), v_empty = base + offsetof(Sm, empty),
                   q_full = base + offsetof(Sm, q_full), q_empty = base + offsetof(Sm, q_empty);
    const auto release = [&](uint32_t bar) {
      __syncwarp();
      if (lane == 0) mbar_arrive_at(bar);
    };
    // turns as attention_kernel's, run on across the pieces: one per tile after a piece's first, so the last
    // consumer hands on after each but the CTA's last
    const int pieces = (end - 1) / n_tiles - begin / n_tiles + 1, turns = end - begin - pieces;
    const int next = 1 + (w + 1 < NWG ? w + 1 : 0);
    const bool last = w == NWG - 1;
    const auto hand_turn = [&](bool to_next, int next_bar) {
      bar_arrive(to_next ? next_bar : 12 + w, to_next ? 256 : 128);
    };
    hand_turn(w == 0 && turns > 0, 1);
    int turn = 0;
    Ring<STAGES> kr, vr;  // the next K and V to consume
    for (int g = begin, n = 0; g < end; ++n) {
      const int item = g / n_tiles, j0 = g - item * n_tiles, j1 = min(n_tiles, j0 + (end - g));
      int b, h, m0;
      item_coords(item, t.qblocks, heads, BM, b, h, m0);
      const int row0 = m0 + w * 64 + (tid / 32) * 16 + lane / 4;
      Bf16Scores::Rows rows;
      float o[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) o[i] = 0.f;
      float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2];
      uint32_t p[BN / 16][4];
      float sc[BN / 2];
      mbar_wait_at(q_full, n & 1);
      {
        mbar_wait_at(k_full + 8 * kr.s, kr.phase);
        scores.template tile<BN>(sc, rows, q_addr, k_tiles + kr.s * kTile, j0);
        release(k_empty + 8 * kr.s);
        kr.next();
        if ((j0 + 1) * BN > tokens) mask_tail<BN>(sc, j0 * BN, tokens, lane);
        scores.template softmax<BN>(sc, m, l, alpha, rows);
        to_p<BN>(p, sc);
      }
      for (int j = j0 + 1; j < j1; ++j, ++turn) {
        const int s = kr.s, sv = vr.s;
        mbar_wait_at(k_full + 8 * s, kr.phase);
        mbar_wait_at(v_full + 8 * sv, vr.phase);
        kr.next();
        vr.next();
        bar_sync(1 + w, 256);
        wgmma_fence();
        scores.template issue<BN>(sc, rows, q_addr, k_tiles + s * kTile, j);
        wgmma_commit();
        pv<BN>(o, p, v_tiles + sv * kTile);
        wgmma_commit();
        hand_turn(!(last && turn == turns - 1), next);
        wgmma_wait<1>();
        pin(sc);
        release(k_empty + 8 * s);
        if ((j + 1) * BN > tokens) mask_tail<BN>(sc, j * BN, tokens, lane);
        scores.template softmax<BN>(sc, m, l, alpha, rows);
        wgmma_wait<0>();
        pin(o);
        release(v_empty + 8 * sv);
        rescale(o, alpha);
        to_p<BN>(p, sc);
      }
      release(q_empty);  // every Q K^T of this piece done: the next piece's Q may load
      {
        const int sv = vr.s;
        mbar_wait_at(v_full + 8 * sv, vr.phase);
        vr.next();
        wgmma_fence();
        pv<BN>(o, p, v_tiles + sv * kTile);
        wgmma_commit();
        wgmma_wait_all();
        pin(o);
        release(v_empty + 8 * sv);
      }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 1);
        l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 2);
      }
      if (j0 == 0 && j1 == n_tiles) {
        const float inv[2] = {1.f / l[0], 1.f / l[1]};
        store_rows(out, o, inv, row0, b, h, tokens, heads, lane);
      } else {
        // a head piece ends this CTA's range: boundary blockIdx.x + 1; a tail piece starts it: blockIdx.x
        const int bnd = blockIdx.x - t.dp + (j0 == 0 ? 1 : 0);
        float* rec = sk_slot(ws, bnd, j0 == 0 ? 0 : 1, w, NWG) + tid;
#pragma unroll
        for (int i = 0; i < 32; ++i) rec[i * 128] = o[i];
        rec[32 * 128] = m[0];
        rec[33 * 128] = m[1];
        rec[34 * 128] = l[0];
        rec[35 * 128] = l[1];
      }
      g += j1 - j0;
    }
  }
}

// Merges the two pieces of the item split at each boundary 1 .. sk - 1 and stores its rows: one CTA a boundary,
// a thread per consumer thread of the pieces' CTAs.
template <int NWG>
__global__ void __launch_bounds__(128 * NWG) sk_combine_kernel(__nv_bfloat16* __restrict__ out, int tokens,
                                                                int heads, const SkTiling t,
                                                                const float* __restrict__ ws) {
  const int bnd = blockIdx.x + 1, w = threadIdx.x / 128, tid = threadIdx.x % 128, lane = tid % 32;
  int begin, end;
  sk_range(t, t.dp + bnd, begin, end);
  const int item = begin / t.n_tiles;
  if (begin == item * t.n_tiles) return;  // the boundary falls between items: nothing split
  int b, h, m0;
  item_coords(item, t.qblocks, heads, 64 * NWG, b, h, m0);
  const float* a = sk_slot(const_cast<float*>(ws), bnd, 0, w, NWG) + tid;
  const float* c = sk_slot(const_cast<float*>(ws), bnd, 1, w, NWG) + tid;
  float fa[2], fc[2], inv[2], o[32];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float ma = a[(32 + hh) * 128], mc = c[(32 + hh) * 128], mm = fmaxf(ma, mc);
    fa[hh] = ex2(ma - mm);
    fc[hh] = ex2(mc - mm);
    inv[hh] = 1.f / (a[(34 + hh) * 128] * fa[hh] + c[(34 + hh) * 128] * fc[hh]);
  }
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i] = a[i * 128] * fa[(i >> 1) & 1] + c[i * 128] * fc[(i >> 1) & 1];
  store_rows(out, o, inv, m0 + w * 64 + (tid / 32) * 16 + lane / 4, b, h, tokens, heads, lane);
}

// The stream-K configuration of the bf16 kernel; `ws` holds sk_workspace_bytes(sm_count(), NWG).
template <int NWG, int BN, int STAGES>
const char* launch_attention_sk(void* out, const void* q, const void* k, const void* v, int64_t batch,
                                int64_t tokens, int64_t heads, float scale, cudaStream_t stream, float* ws,
                                size_t ws_bytes, bool split = true, bool combine = true) {
  constexpr int BM = 64 * NWG;
  CUtensorMap tq, tk, tv;
  if (!make_map(&tq, q, batch, tokens, heads, BM) || !make_map(&tk, k, batch, tokens, heads, BN) ||
      !make_map(&tv, v, batch, tokens, heads, BN))
    return "the CUDA driver refused the tensor maps (cuTensorMapEncodeTiled)";
  const int sms = sm_count();
  const SkTiling t = make_sk_tiling(batch, tokens, heads, NWG, BN, split ? sms : 0);
  if (t.sk && ws_bytes < sk_workspace_bytes(sms, NWG)) return "the stream-K workspace is too small";
  auto kernel = attention_sk_kernel<NWG, BN, STAGES>;
  constexpr int smem = sizeof(SkSmem<BM, BN, STAGES>) + 1024;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
    return "could not raise the kernel's shared-memory limit on this device";
  const Bf16Scores scores{{}, scale * 1.4426950408889634f};
  kernel<<<static_cast<unsigned>(t.dp + t.sk), 128 * (NWG + 1), smem, stream>>>(
      tq, tk, tv, static_cast<__nv_bfloat16*>(out), static_cast<int>(tokens), static_cast<int>(heads), t, ws, scores);
  if (t.sk > 1 && combine)
    sk_combine_kernel<NWG><<<static_cast<unsigned>(t.sk - 1), 128 * NWG, 0, stream>>>(
        static_cast<__nv_bfloat16*>(out), static_cast<int>(tokens), static_cast<int>(heads), t, ws);
  return nullptr;
}

}  // namespace ltx_cuda_sm90
