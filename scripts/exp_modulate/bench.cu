// bench.cu: launch shapes for AdaLN rms_norm_modulate (y = x * rsqrt(mean(x^2) + eps) * (1 + scale)
// + shift, x bf16 [2 * 6144, 2048], scale/shift [B, 1, 2048] rows of a [B, 1, 6, 2048] tensor) timed
// against a 16-byte copy of the same bytes and the package's kernels. An experiment: bf16, dim 2048.
//
//   ./build.sh && ./bench [--spin-us N] [--samples N] [--only SUBSTRING] [--no-flush]
//
// Each timed sample starts after a 256 MB read of a scratch buffer (an L2 flush); --no-flush times as
// the runs logged before 2026-12-01's second session did.
//
// Every variant's output is checked against a naive fp32 reference (one row per block) twice:
// before timing and after it. A mismatch makes the exit status 1; a kernel that does not finish
// within 10 s ends the process with status 3 (the line says which).
//
// Built with -DEXP_EMU (emu_check.cpp) the kernels of this file (not the package's, not main) run
// on the CPU emulation of tests/cuda_emu/emu.h: inline PTX is replaced by plain C++ there.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#ifndef EXP_EMU
// The package's kernels, as the package compiles them: the baselines call its public launchers.
#include "../../kernel_src/ltx_cuda/rms_norm.cu"
#include "../../kernel_src/ltx_cuda/rms_norm_modulate.cu"

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>
#else
#undef __launch_bounds__
#define __launch_bounds__(...)
#endif

namespace xm {

using bf16 = __nv_bfloat16;

constexpr int kDim = 2048;            // the only row width this experiment handles
constexpr int kChunks = kDim / 8;     // 16-byte vectors per row: 256
constexpr int kRowBytes = kDim * 2;   // 4 KB

// What the epilogue reads scale/shift from.
enum class Mod {
  None,     // no modulation: plain rms_norm (the reference for what modulation costs)
  Global,   // after the reduction, 2 vectors at a time, plain ld.global (L1/L2 hits), as the package
  Reg,      // the thread's columns of the block's batch, loaded into registers once per batch
  Smem,     // the batch's scale/shift rows (bf16) in shared memory, filled once per batch per block
  SmemF32,  // (1 + scale) and shift as fp32 in shared memory, once per batch per block
};
// How x is loaded.
enum class Ld {
  Nc,          // ld.global.nc.v4 (the package's Vec::load)
  NoAlloc,     // ld.global.nc.L1::no_allocate.v4: x does not evict scale/shift from L1
  NoAlloc256,  // the same plus .L2::256B (prefetch the whole 256-byte L2 sector group)
};
// How y is stored.
enum class St {
  Plain,       // st.global.v4
  Cs,          // st.global.cs.v4 (streaming: evict-first in L1 and L2)
  EvictFirst,  // st.global.L2::cache_hint.v4 with a createpolicy L2::evict_first policy
};

inline const char* name(Mod m) {
  switch (m) {
    case Mod::None: return "none";
    case Mod::Global: return "global";
    case Mod::Reg: return "reg";
    case Mod::Smem: return "smem";
    case Mod::SmemF32: return "smemf32";
  }
  return "?";
}
inline const char* name(Ld l) { return l == Ld::Nc ? "nc" : l == Ld::NoAlloc ? "noalloc" : "noalloc256"; }
inline const char* name(St s) { return s == St::Plain ? "st" : s == St::Cs ? "st.cs" : "st.evict_first"; }

// One call's arguments. rows = B * tokens, row r is batch r / tokens; scale/shift of batch b start
// at scale + b * batch_stride (token stride 0).
struct Problem {
  const bf16* x;
  bf16* out;
  const bf16* scale;
  const bf16* shift;
  int rows;
  int tokens;
  int batch_stride;
  float eps;
};

// ---- device primitives (plain C++ under the CPU emulation) --------------------------------------

__device__ __forceinline__ float bits_to_float(uint32_t u) {
#ifdef EXP_EMU
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#else
  return __uint_as_float(u);
#endif
}

// The two bf16 of a 32-bit word as fp32 (exact: a bf16 is the top half of its fp32).
__device__ __forceinline__ float lo_of(uint32_t w) { return bits_to_float(w << 16); }
__device__ __forceinline__ float hi_of(uint32_t w) { return bits_to_float(w & 0xffff0000u); }

// The same, spelled so that the compiler cannot merge it with lo_of/hi_of: the epilogue unpacks x
// again from its 16 packed registers instead of keeping 32 fp32 copies alive across the reduction.
__device__ __forceinline__ float lo_again(uint32_t w) {
#ifdef EXP_EMU
  return lo_of(w);
#else
  uint32_t r;
  asm("prmt.b32 %0, %1, 0, 0x1044;" : "=r"(r) : "r"(w));  // bytes: 0, 0, w.b0, w.b1
  return __uint_as_float(r);
#endif
}
__device__ __forceinline__ float hi_again(uint32_t w) {
#ifdef EXP_EMU
  return hi_of(w);
#else
  uint32_t r;
  asm("prmt.b32 %0, %1, 0, 0x3244;" : "=r"(r) : "r"(w));  // bytes: 0, 0, w.b2, w.b3
  return __uint_as_float(r);
#endif
}

// Two fp32 rounded to nearest-even bf16, lo in the low half (cvt.rn.bf16x2.f32).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  std::memcpy(&u, &h, 4);
  return u;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int k) {
  return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

template <Ld L>
__device__ __forceinline__ uint4 load_x(const bf16* p) {
  uint4 v;
#ifdef EXP_EMU
  v = *reinterpret_cast<const uint4*>(p);
#else
  if constexpr (L == Ld::Nc)
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else if constexpr (L == Ld::NoAlloc)
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#endif
  return v;
}

// A plain coherent load that stays after this thread's earlier stores (the "memory" clobber keeps
// the compiler from hoisting it; ptxas cannot prove it does not alias them): scale/shift.
__device__ __forceinline__ uint4 load_ordered(const bf16* p) {
  uint4 v;
#ifdef EXP_EMU
  v = *reinterpret_cast<const uint4*>(p);
#else
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
#endif
  return v;
}

template <St S>
__device__ __forceinline__ uint64_t make_policy() {
  uint64_t policy = 0;
#ifndef EXP_EMU
  if constexpr (S == St::EvictFirst)
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

template <St S>
__device__ __forceinline__ void store_y(bf16* p, const uint4& v, uint64_t policy) {
#ifdef EXP_EMU
  (void)policy;
  *reinterpret_cast<uint4*>(p) = v;
#else
  if constexpr (S == St::Plain)
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
  else if constexpr (S == St::Cs)
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
  else
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy) : "memory");
#endif
}

// ---- cp.async (sm_80) and the bulk copy engine (TMA, sm_90) --------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
#ifdef EXP_EMU
  (void)p;
  return 0;
#else
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#endif
}

template <bool k256>
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
#ifdef EXP_EMU
  std::memcpy(dst, src, 16);
#else
  if constexpr (k256)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" :: "r"(smem_addr(dst)), "l"(src)
                 : "memory");
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(smem_addr(dst)), "l"(src)
                 : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifndef EXP_EMU
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifndef EXP_EMU
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
#endif
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
#ifdef EXP_EMU
  (void)bar, (void)count;
#else
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(count) : "memory");
#endif
}
// Makes the initialised barriers visible to the bulk copy engine (then a __syncthreads for the rest).
__device__ __forceinline__ void mbar_init_fence() {
#ifndef EXP_EMU
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// Orders this thread's earlier generic-proxy shared accesses (and those a barrier made visible to
// it) before its following bulk copies into the same bytes.
__device__ __forceinline__ void fence_proxy_async() {
#ifndef EXP_EMU
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// One arrival that also announces `bytes` of bulk copies completing on the barrier's phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
#ifdef EXP_EMU
  (void)bar, (void)bytes;
#else
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}
// Bulk copy of `bytes` (multiple of 16, both addresses 16-byte aligned) global -> shared that
// completes its bytes on `bar`.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
#ifdef EXP_EMU
  (void)bar;
  std::memcpy(dst, src, bytes);
#else
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
      :: "r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
#endif
}
// Waits until the barrier's phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
#ifdef EXP_EMU
  (void)bar, (void)parity;
#else
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  } while (!done);
#endif
}

// ---- the row: reduction and epilogue shared by every kernel of this file -------------------------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the G threads of a row. For G > 32 the warps meet in `partial` (kThreads / 32 floats)
// behind one __syncthreads: a caller that reduces again uses the other of two buffers, and the
// barrier of the reduction in between keeps every reader of a buffer ahead of its next writer.
template <int G>
__device__ __forceinline__ float group_total(float v, float* partial) {
  v = warp_sum(v);
  if constexpr (G == 32) {
    (void)partial;
    return v;
  } else {
    constexpr int kWarps = G / 32;
    const int warp = static_cast<int>(threadIdx.x) / 32;
    if (threadIdx.x % 32 == 0) partial[warp] = v;
    __syncthreads();
    const int first = warp / kWarps * kWarps;
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += partial[first + w];
    return total;
  }
}

// scale/shift as the epilogue holds them, per Mod (see refill).
template <Mod M, int V>
struct ModRegs {};
template <int V>
struct ModRegs<Mod::Reg, V> {
  uint4 scale[V], shift[V];
};
template <Mod M>
inline constexpr int kModSmemU4 = M == Mod::Smem ? 2 * kChunks : 1;  // scale row, shift row
template <Mod M>
inline constexpr int kModSmemF4 = M == Mod::SmemF32 ? 4 * kChunks : 1;  // (1 + scale), shift

// Loads batch b's scale/shift where the epilogue of M reads them. Called by every thread of the
// block for a block-uniform b (the barriers: nobody still reads the previous batch's values).
template <Mod M, int G, int kThreads, int V>
__device__ __forceinline__ void refill(const Problem& p, int b, int lane, uint4* smem_bf,
                                       float4* smem_f, ModRegs<M, V>& mr) {
  const bf16* sc = p.scale + static_cast<int64_t>(b) * p.batch_stride;
  const bf16* sh = p.shift + static_cast<int64_t>(b) * p.batch_stride;
  if constexpr (M == Mod::Reg) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      mr.scale[j] = load_ordered(sc + (j * G + lane) * 8);
      mr.shift[j] = load_ordered(sh + (j * G + lane) * 8);
    }
  } else if constexpr (M == Mod::Smem) {
    __syncthreads();
    for (int c = threadIdx.x; c < kChunks; c += kThreads) {
      smem_bf[c] = load_ordered(sc + c * 8);
      smem_bf[kChunks + c] = load_ordered(sh + c * 8);
    }
    __syncthreads();
  } else if constexpr (M == Mod::SmemF32) {
    __syncthreads();
    for (int c = threadIdx.x; c < kChunks; c += kThreads) {
      const uint4 s = load_ordered(sc + c * 8), h = load_ordered(sh + c * 8);
      smem_f[2 * c] = make_float4(1.0f + lo_of(s.x), 1.0f + hi_of(s.x), 1.0f + lo_of(s.y),
                                  1.0f + hi_of(s.y));
      smem_f[2 * c + 1] = make_float4(1.0f + lo_of(s.z), 1.0f + hi_of(s.z), 1.0f + lo_of(s.w),
                                      1.0f + hi_of(s.w));
      smem_f[2 * kChunks + 2 * c] = make_float4(lo_of(h.x), hi_of(h.x), lo_of(h.y), hi_of(h.y));
      smem_f[2 * kChunks + 2 * c + 1] = make_float4(lo_of(h.z), hi_of(h.z), lo_of(h.w), hi_of(h.w));
    }
    __syncthreads();
  } else {
    (void)sc, (void)sh, (void)lane, (void)smem_bf, (void)smem_f, (void)mr;
  }
}

// y for one 16-byte vector: n = x * inv (as the package: fp32 product), then one fmaf and one
// rounding; scale/shift given packed (bf16) or as fp32 (1 + scale, shift).
__device__ __forceinline__ uint4 modulate_bf(const uint4& x, float inv, const uint4& s, const uint4& h) {
  uint32_t y[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t xw = word(x, k), sw = word(s, k), hw = word(h, k);
    y[k] = pack_bf16x2(fmaf(lo_again(xw) * inv, 1.0f + lo_of(sw), lo_of(hw)),
                       fmaf(hi_again(xw) * inv, 1.0f + hi_of(sw), hi_of(hw)));
  }
  return make_uint4(y[0], y[1], y[2], y[3]);
}
__device__ __forceinline__ uint4 modulate_f(const uint4& x, float inv, const float4& s0,
                                            const float4& s1, const float4& h0, const float4& h1) {
  const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
  const float h[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
  uint32_t y[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t xw = word(x, k);
    y[k] = pack_bf16x2(fmaf(lo_again(xw) * inv, s[2 * k], h[2 * k]),
                       fmaf(hi_again(xw) * inv, s[2 * k + 1], h[2 * k + 1]));
  }
  return make_uint4(y[0], y[1], y[2], y[3]);
}

// Sum of squares of the thread's part of the row (packed bf16), in fp32.
template <int V>
__device__ __forceinline__ float sum_squares(const uint4 (&x)[V]) {
  float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
  for (int j = 0; j < V; ++j)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float a = lo_of(word(x[j], k)), b = hi_of(word(x[j], k));
      s0 = fmaf(a, a, s0);
      s1 = fmaf(b, b, s1);
    }
  return s0 + s1;
}

// Writes y of the thread's chunks lane, lane + G, ... of `row`, given the row's sum of squares.
template <int G, St S, Mod M>
__device__ __forceinline__ void epilogue(const uint4 (&x)[kChunks / G], float ss, int row, int lane,
                                         const Problem& p, const uint4* smem_bf,
                                         const float4* smem_f, const ModRegs<M, kChunks / G>& mr,
                                         uint64_t policy) {
  constexpr int V = kChunks / G;
  const float inv = rsqrtf(ss * (1.0f / kDim) + p.eps);  // = ss / dim: dim is a power of two
  bf16* out = p.out + static_cast<int64_t>(row) * kDim + lane * 8;
  if constexpr (M == Mod::None) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      uint32_t y[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        y[k] = pack_bf16x2(lo_again(word(x[j], k)) * inv, hi_again(word(x[j], k)) * inv);
      store_y<S>(out + j * G * 8, make_uint4(y[0], y[1], y[2], y[3]), policy);
    }
  } else if constexpr (M == Mod::Global) {
    const int64_t m = static_cast<int64_t>(row / p.tokens) * p.batch_stride + lane * 8;
    const bf16* sc = p.scale + m;
    const bf16* sh = p.shift + m;
    constexpr int kBatch = V < 2 ? V : 2;  // as the package's kAuxBatch
#pragma unroll
    for (int j0 = 0; j0 < V; j0 += kBatch) {
      uint4 s[kBatch], h[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        s[j] = load_ordered(sc + (j0 + j) * G * 8);
        h[j] = load_ordered(sh + (j0 + j) * G * 8);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        store_y<S>(out + (j0 + j) * G * 8, modulate_bf(x[j0 + j], inv, s[j], h[j]), policy);
    }
  } else if constexpr (M == Mod::Reg) {
#pragma unroll
    for (int j = 0; j < V; ++j)
      store_y<S>(out + j * G * 8, modulate_bf(x[j], inv, mr.scale[j], mr.shift[j]), policy);
  } else if constexpr (M == Mod::Smem) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int c = j * G + lane;
      store_y<S>(out + j * G * 8, modulate_bf(x[j], inv, smem_bf[c], smem_bf[kChunks + c]), policy);
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int c = j * G + lane;
      store_y<S>(out + j * G * 8,
                 modulate_f(x[j], inv, smem_f[2 * c], smem_f[2 * c + 1], smem_f[2 * kChunks + 2 * c],
                            smem_f[2 * kChunks + 2 * c + 1]),
                 policy);
    }
  }
  (void)smem_bf, (void)smem_f, (void)mr;
}

// One row: thread `lane` of the row's G threads holds chunks lane, lane + G, ... (V = 256 / G of
// them, packed bf16) in x. Sums x^2 in fp32, reduces over the group, writes y.
template <int G, St S, Mod M>
__device__ __forceinline__ void process_row(const uint4 (&x)[kChunks / G], int row, int lane,
                                            float* partial, const Problem& p, const uint4* smem_bf,
                                            const float4* smem_f, const ModRegs<M, kChunks / G>& mr,
                                            uint64_t policy) {
  const float ss = group_total<G>(sum_squares(x), partial);
  epilogue<G, S, M>(x, ss, row, lane, p, smem_bf, smem_f, mr, policy);
}

// ---- kernel 1: rows in registers, optionally persistent with a software pipeline -----------------
//
// A block of R groups of G threads handles R consecutive rows (a "row block") per step; block k
// takes row blocks k, k + gridDim.x, ... With S = 1 and one row block per block this is the
// package's resident kernel. With S >= 2 (a persistent grid) x of the next S - 1 row blocks is in
// flight in registers while the current one is reduced, modulated and stored.
template <int G, int R, int S, Ld L, St ST, Mod M, int kMinBlocks>
__global__ void __launch_bounds__(G * R, kMinBlocks) pipe_kernel(Problem p) {
  constexpr int V = kChunks / G;
  constexpr int kThreads = G * R;
  static_assert(kChunks % G == 0 && G % 32 == 0 && S >= 1, "whole warps tile the row");
  __shared__ float partial[2][kThreads / 32];
  __shared__ uint4 smem_bf[kModSmemU4<M>];
  __shared__ float4 smem_f[kModSmemF4<M>];
  const int grp = static_cast<int>(threadIdx.x) / G, lane = static_cast<int>(threadIdx.x) % G;
  const int blocks = p.rows / R;  // row blocks; the host checks that R divides rows and tokens
  const int first = static_cast<int>(blockIdx.x), stride = static_cast<int>(gridDim.x);
  const uint64_t policy = make_policy<ST>();
  ModRegs<M, V> mr;
  int batch = -1;

  uint4 x[S][V];
  auto load_rows = [&](uint4(&dst)[V], int rb) {
    const bf16* src = p.x + static_cast<int64_t>(rb * R + grp) * kDim + lane * 8;
#pragma unroll
    for (int j = 0; j < V; ++j) dst[j] = load_x<L>(src + j * G * 8);
  };
#pragma unroll
  for (int k = 0; k < S - 1; ++k)
    if (first + k * stride < blocks) load_rows(x[k], first + k * stride);

  for (int step = 0;; step += S) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const int rb = first + (step + s) * stride;
      if (rb >= blocks) return;  // block-uniform
      const int ahead = rb + (S - 1) * stride;
      if (ahead < blocks) load_rows(x[(s + S - 1) % S], ahead);
      const int b = rb * R / p.tokens;  // all R rows: R divides tokens
      if (M != Mod::None && M != Mod::Global && b != batch) {
        refill<M, G, kThreads, V>(p, b, lane, smem_bf, smem_f, mr);
        batch = b;
      }
      process_row<G, ST, M>(x[s], rb * R + grp, lane, partial[(step + s) & 1], p, smem_bf, smem_f,
                            mr, policy);
    }
  }
}

// ---- kernel 2: persistent, x staged in shared memory by cp.async (S stages) ----------------------
//
// Each thread copies its own 16-byte chunks of row block rb + (S - 1) * gridDim.x into stage
// (i + S - 1) % S and reads back only its own chunks after cp.async.wait_group, so the pipeline
// needs no barrier of its own: registers hold one row, shared memory the rows in flight.
template <int G, int R, int S, bool k256, St ST, Mod M, int kMinBlocks>
__global__ void __launch_bounds__(G * R, kMinBlocks) cpasync_kernel(Problem p) {
  constexpr int V = kChunks / G;
  constexpr int kThreads = G * R;
  static_assert(kChunks % G == 0 && G % 32 == 0 && S >= 1, "whole warps tile the row");
  __shared__ float partial[2][kThreads / 32];
  __shared__ uint4 smem_bf[kModSmemU4<M>];
  __shared__ float4 smem_f[kModSmemF4<M>];
  __shared__ uint4 stage[S][R][kChunks];
  const int grp = static_cast<int>(threadIdx.x) / G, lane = static_cast<int>(threadIdx.x) % G;
  const int blocks = p.rows / R;
  const int first = static_cast<int>(blockIdx.x), stride = static_cast<int>(gridDim.x);
  const uint64_t policy = make_policy<ST>();
  ModRegs<M, V> mr;
  int batch = -1;

  auto issue = [&](int st, int rb) {
    const bf16* src = p.x + static_cast<int64_t>(rb * R + grp) * kDim + lane * 8;
#pragma unroll
    for (int j = 0; j < V; ++j) cp_async16<k256>(&stage[st][grp][j * G + lane], src + j * G * 8);
  };
  // One commit group per row block, empty past the end, so wait_group<S - 1> always means "the
  // group of the row block about to be processed has landed".
#pragma unroll
  for (int k = 0; k < S - 1; ++k) {
    if (first + k * stride < blocks) issue(k, first + k * stride);
    cp_async_commit();
  }
  for (int i = 0;; ++i) {
    const int rb = first + i * stride;
    if (rb >= blocks) break;  // block-uniform
    const int ahead = rb + (S - 1) * stride;
    if (ahead < blocks) issue((i + S - 1) % S, ahead);
    cp_async_commit();
    cp_async_wait<S - 1>();
    uint4 x[V];
    const int st = i % S;
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] = stage[st][grp][j * G + lane];
    const int b = rb * R / p.tokens;
    if (M != Mod::None && M != Mod::Global && b != batch) {
      refill<M, G, kThreads, V>(p, b, lane, smem_bf, smem_f, mr);
      batch = b;
    }
    process_row<G, ST, M>(x, rb * R + grp, lane, partial[i & 1], p, smem_bf, smem_f, mr, policy);
  }
  cp_async_wait<0>();
}

// ---- kernel 3: persistent, row blocks staged in shared memory by the bulk copy engine (TMA) ------
//
// Thread 0 issues one cp.async.bulk per row (4 KB) into stage i % S, completing on that stage's
// mbarrier; everyone waits on the barrier's phase parity (i / S) & 1. The stage is refilled (row
// block i + S) right after the block-wide barrier of step i, which every thread reaches only after
// it has read its x of stage i % S into registers. G > 32: that barrier is the reduction's.
template <int G, int R, int S, St ST, Mod M, int kMinBlocks>
__global__ void __launch_bounds__(G * R, kMinBlocks) bulk_kernel(Problem p) {
  constexpr int V = kChunks / G;
  constexpr int kThreads = G * R;
  static_assert(kChunks % G == 0 && G % 32 == 0 && S >= 1, "whole warps tile the row");
  __shared__ float partial[2][kThreads / 32];
  __shared__ uint4 smem_bf[kModSmemU4<M>];
  __shared__ float4 smem_f[kModSmemF4<M>];
  alignas(128) __shared__ uint4 stage[S][R][kChunks];
  alignas(8) __shared__ uint64_t full[S];
  const int grp = static_cast<int>(threadIdx.x) / G, lane = static_cast<int>(threadIdx.x) % G;
  const int blocks = p.rows / R;
  const int first = static_cast<int>(blockIdx.x), stride = static_cast<int>(gridDim.x);
  const uint64_t policy = make_policy<ST>();
  ModRegs<M, V> mr;
  int batch = -1;

  auto issue = [&](int st, int rb) {  // thread 0 only
    mbar_arrive_expect_tx(&full[st], R * kRowBytes);
#pragma unroll
    for (int r = 0; r < R; ++r)
      bulk_copy(&stage[st][r][0], p.x + static_cast<int64_t>(rb * R + r) * kDim, kRowBytes, &full[st]);
  };
  if (threadIdx.x == 0) {
#pragma unroll
    for (int k = 0; k < S; ++k) mbar_init(&full[k], 1);
    mbar_init_fence();
#pragma unroll
    for (int k = 0; k < S; ++k)
      if (first + k * stride < blocks) issue(k, first + k * stride);
  }
  __syncthreads();

  for (int i = 0;; ++i) {
    const int rb = first + i * stride;
    if (rb >= blocks) break;  // block-uniform
    const int st = i % S;
    mbar_wait(&full[st], static_cast<unsigned>(i / S) & 1u);
    uint4 x[V];
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] = stage[st][grp][j * G + lane];
    const int b = rb * R / p.tokens;
    if (M != Mod::None && M != Mod::Global && b != batch) {
      refill<M, G, kThreads, V>(p, b, lane, smem_bf, smem_f, mr);
      batch = b;
    }
    // Stage st is free once every thread has read it (and used what it read): after the
    // reduction's barrier (G > 32), or this one (one warp per row: the reduction has none).
    const float part = sum_squares(x);
    if constexpr (G == 32) __syncthreads();
    const float ss = group_total<G>(part, partial[i & 1]);
    const int ahead = rb + S * stride;
    if (threadIdx.x == 0 && ahead < blocks) {
      fence_proxy_async();
      issue(st, ahead);
    }
    epilogue<G, ST, M>(x, ss, rb * R + grp, lane, p, smem_bf, smem_f, mr, policy);
  }
}

}  // namespace xm


namespace xm {

// ==== the variants of this file's kernels (the GPU run and the CPU emulation use this one list) ====
//
// Caps: __launch_bounds__(threads, minblk) lets ptxas use 65536 / (minblk * threads) registers
// (rounded down to 8). Uncapped, ptxas hoists the epilogue's unpacking above the reduction and takes
// 72+ registers for 64x4. Every cap below is the tightest that ptxas meets without spilling
// (sm_90, CUDA 13.0); for the shared-memory kernels it matches the blocks that shared memory allows.
template <class Sink>
void for_each_variant(Sink& k) {
  constexpr Ld NC = Ld::Nc, NA = Ld::NoAlloc, NA256 = Ld::NoAlloc256;
  constexpr St PL = St::Plain, CS = St::Cs, EF = St::EvictFirst;
  constexpr bool kOneShot = false, kPersistent = true;
  constexpr int kEven = -1;  // persistent grid trimmed so every block gets as many row blocks

  // -- one-shot (one row block per block, as the package), rows in registers as packed bf16
  k.template pipe<64, 2, 1, Mod::None, NC, PL, 1>(kOneShot);
  k.template pipe<64, 2, 1, Mod::Global, NC, PL, 1>(kOneShot);
  k.template pipe<64, 2, 1, Mod::Global, NC, PL, 8>(kOneShot);
  k.template pipe<64, 2, 1, Mod::Global, NC, PL, 10>(kOneShot);
  k.template pipe<64, 2, 1, Mod::Global, NA, PL, 10>(kOneShot);
  k.template pipe<64, 2, 1, Mod::Global, NA256, PL, 10>(kOneShot);
  k.template pipe<64, 2, 1, Mod::Global, NC, CS, 10>(kOneShot);
  k.template pipe<64, 2, 1, Mod::Global, NC, EF, 10>(kOneShot);
  k.template pipe<64, 2, 1, Mod::Global, NA, CS, 10>(kOneShot);
  k.template pipe<64, 2, 1, Mod::Global, NA, CS, 8>(kOneShot);
  k.template pipe<64, 8, 1, Mod::Global, NC, PL, 2>(kOneShot);
  k.template pipe<64, 8, 1, Mod::SmemF32, NC, PL, 2>(kOneShot);
  k.template pipe<32, 4, 1, Mod::Global, NC, PL, 8>(kOneShot);
  k.template pipe<128, 1, 1, Mod::Global, NC, PL, 1>(kOneShot);
  k.template pipe<128, 1, 1, Mod::Global, NC, PL, 12>(kOneShot);
  // around the flushed ranking's winner (2026-12-01, third session): caps, policies, early scale/shift
  // (mod=reg: the package's kernel since then). The caps 14 and 16 spill 8 bytes (32 registers);
  // they stay as the measurement that 12 is the cap to use (29.0 and 28.9 us against 27.5).
  k.template pipe<128, 1, 1, Mod::None, NC, PL, 12>(kOneShot);
  k.template pipe<128, 1, 1, Mod::Global, NC, PL, 14>(kOneShot);
  k.template pipe<128, 1, 1, Mod::Global, NC, PL, 16>(kOneShot);
  k.template pipe<128, 1, 1, Mod::Global, NC, CS, 12>(kOneShot);
  k.template pipe<128, 1, 1, Mod::Global, NA, PL, 12>(kOneShot);
  k.template pipe<128, 1, 1, Mod::Reg, NC, PL, 12>(kOneShot);
  k.template pipe<256, 1, 1, Mod::Global, NC, PL, 8>(kOneShot);
  k.template pipe<128, 2, 1, Mod::Global, NC, PL, 6>(kOneShot);

  // -- persistent, register pipeline: x of the next S - 1 row blocks in flight during this one
  k.template pipe<64, 2, 1, Mod::Global, NC, PL, 8>(kPersistent);  // no prefetch: the control
  k.template pipe<64, 2, 2, Mod::None, NC, PL, 8>(kPersistent);
  k.template pipe<64, 2, 2, Mod::Global, NC, PL, 7>(kPersistent);
  k.template pipe<64, 2, 2, Mod::Reg, NC, PL, 5>(kPersistent);
  k.template pipe<64, 2, 2, Mod::Smem, NC, PL, 5>(kPersistent);
  k.template pipe<64, 2, 2, Mod::SmemF32, NC, PL, 5>(kPersistent);
  k.template pipe<64, 2, 2, Mod::Smem, NA, CS, 5>(kPersistent);
  k.template pipe<128, 1, 2, Mod::None, NC, PL, 10>(kPersistent);
  k.template pipe<128, 1, 2, Mod::Global, NC, PL, 9>(kPersistent);
  k.template pipe<128, 1, 2, Mod::Reg, NC, PL, 9>(kPersistent);
  k.template pipe<128, 1, 2, Mod::Smem, NC, PL, 9>(kPersistent);
  k.template pipe<128, 1, 2, Mod::Smem, NC, PL, 9>(kPersistent, kEven);
  k.template pipe<128, 1, 2, Mod::SmemF32, NC, PL, 9>(kPersistent);
  k.template pipe<128, 1, 2, Mod::Smem, NA, CS, 9>(kPersistent);
  k.template pipe<128, 1, 3, Mod::Global, NC, PL, 9>(kPersistent);
  k.template pipe<128, 1, 3, Mod::Reg, NC, PL, 8>(kPersistent);
  k.template pipe<128, 1, 3, Mod::Smem, NC, PL, 9>(kPersistent);
  k.template pipe<128, 1, 3, Mod::SmemF32, NC, PL, 8>(kPersistent);
  k.template pipe<128, 2, 2, Mod::Global, NC, PL, 5>(kPersistent);
  k.template pipe<128, 2, 2, Mod::Smem, NC, PL, 5>(kPersistent);
  k.template pipe<256, 1, 3, Mod::Global, NC, PL, 5>(kPersistent);
  k.template pipe<256, 1, 3, Mod::Reg, NC, PL, 5>(kPersistent);
  k.template pipe<256, 1, 3, Mod::Smem, NC, PL, 5>(kPersistent);
  k.template pipe<256, 1, 4, Mod::Smem, NC, PL, 5>(kPersistent);
  k.template pipe<256, 1, 4, Mod::Reg, NC, PL, 4>(kPersistent);

  // -- persistent, cp.async into shared memory (S stages); registers hold one row
  k.template cpasync<64, 2, 2, Mod::Smem, 8, false, PL>();
  k.template cpasync<64, 2, 3, Mod::None, 8, false, PL>();
  k.template cpasync<64, 2, 3, Mod::Global, 8, false, PL>();
  k.template cpasync<64, 2, 3, Mod::Smem, 6, false, PL>();
  k.template cpasync<64, 2, 3, Mod::Smem, 6, false, PL>(kEven);
  k.template cpasync<64, 2, 3, Mod::SmemF32, 5, false, PL>();
  k.template cpasync<64, 2, 3, Mod::Smem, 6, true, PL>();
  k.template cpasync<64, 2, 3, Mod::Smem, 6, false, CS>();
  k.template cpasync<64, 2, 4, Mod::None, 6, false, PL>();
  k.template cpasync<64, 2, 4, Mod::Smem, 5, false, PL>();
  k.template cpasync<64, 2, 5, Mod::None, 1, false, PL>();
  k.template cpasync<128, 1, 4, Mod::Smem, 8, false, PL>();
  k.template cpasync<128, 2, 3, Mod::Smem, 6, false, PL>();

  // -- persistent, bulk copies (TMA, one per row) into shared memory (S stages)
  k.template bulk<64, 2, 3, Mod::None, 8, PL>();
  k.template bulk<64, 2, 3, Mod::None, 8, PL>(kEven);
  k.template bulk<64, 2, 3, Mod::Global, 8, PL>();
  k.template bulk<64, 2, 3, Mod::Smem, 6, PL>();
  k.template bulk<64, 2, 3, Mod::Smem, 6, PL>(kEven);
  k.template bulk<64, 2, 3, Mod::SmemF32, 5, PL>();
  k.template bulk<64, 2, 3, Mod::Smem, 6, CS>();
  k.template bulk<64, 2, 4, Mod::None, 6, PL>();
  k.template bulk<64, 2, 4, Mod::Smem, 5, PL>();
  k.template bulk<64, 4, 2, Mod::Smem, 4, PL>();
  k.template bulk<128, 2, 3, Mod::Smem, 6, PL>();
  k.template bulk<32, 4, 2, Mod::Smem, 5, PL>();
}

}  // namespace xm

#ifndef EXP_EMU
// ==== host side: inputs, reference check, timing, the variants ====================================
namespace xm {

void check_cuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", file, line, what, cudaGetErrorString(e),
               cudaGetErrorName(e));
  std::exit(2);
}
#define CK(call) ::xm::check_cuda((call), #call, __FILE__, __LINE__)

constexpr int kBatch = 2, kTokens = 6144, kRows = kBatch * kTokens;
constexpr int kModBatchStride = 6 * kDim;  // scale/shift are views of a [B, 1, 6, D] tensor
constexpr int kSets = 3;                   // inputs rotate: 3 x 100 MB, L2 (50 MB) serves no repeat
constexpr float kEps = 1e-6f;
constexpr double kHangSeconds = 10.0;

// ---- helper kernels -----------------------------------------------------------------------------

// Spins for `ns` nanoseconds: the launches queued behind it start back to back.
__global__ void spin_kernel(long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < static_cast<unsigned long long>(ns));
}

// Reads n 16-byte words with plain loads before a timed sample, so the L2 then holds only these
// clean, normal-priority lines. Kernels with streaming cache policies otherwise find lines that
// earlier kernels (the checks, other variants) left there (BENCHMARKS.md §1, 2026-12-01). It reads
// rather than writes, so the timed calls have no dirty lines to write back.
__global__ void flush_kernel(const uint4* p, int64_t n, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 w = p[i];
    acc ^= w.x ^ w.y ^ w.z ^ w.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads; all-zero words never store
}

__device__ __forceinline__ float uniform(uint64_t z) {  // splitmix64 -> [-1, 1)
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<uint32_t>(z >> 40)) * (2.0f / 16777216.0f) - 1.0f;
}

// x: uniform in [-2, 2) times a per-row scale in [0.05, 4.05), so rows have different RMS.
__global__ void fill_x_kernel(bf16* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float row_scale = 2.05f + 2.0f * uniform(seed * 7919 + i / kDim);
    x[i] = __float2bfloat16_rn(2.0f * uniform(seed ^ (uint64_t(i) << 8)) * row_scale);
  }
}
__global__ void fill_mod_kernel(bf16* m, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    m[i] = __float2bfloat16_rn(0.6f * uniform(seed ^ (uint64_t(i) << 8)));
}

// The bandwidth reference: each thread copies 4 x 16 bytes, vector u at block base + u * 256.
__global__ void __launch_bounds__(256) copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                                   int64_t n) {
  const int64_t base = int64_t(blockIdx.x) * 1024 + threadIdx.x;
  uint4 v[4];
#pragma unroll
  for (int u = 0; u < 4; ++u)
    if (base + u * 256 < n) v[u] = __ldg(src + base + u * 256);
#pragma unroll
  for (int u = 0; u < 4; ++u)
    if (base + u * 256 < n) dst[base + u * 256] = v[u];
}

// Float fields are bits of non-negative floats (unsigned order = float order, +inf for NaN).
struct Stats {
  unsigned max_ratio;  // largest |got - ref| / tolerance (<= 1 passes)
  unsigned max_rel;    // largest |got - ref| / max(|ref|, 2^-8 of the terms): relative error
  unsigned max_abs;    // largest |got - ref|
  unsigned long long bad;
};

__device__ float ulp_bf16(float v) {
  v = fabsf(v);
  if (v < 1.17549435e-38f) return 0x1p-133f;  // bf16 subnormal spacing
  int e;
  frexpf(v, &e);  // v = m * 2^e, m in [0.5, 1)
  return ldexpf(1.0f, e - 8);
}

// The reference: one row per block, fp32, written for obviousness. An element passes when it is
// within tol = 1 bf16 ulp of the rounded reference value + 2^-16 of |n * (1 + scale)| + |shift|.
// The second term is the fp32 rounding difference of two summation orders (a few 1e-7 of the
// terms); it only matters where the fmaf cancels (|y| << its terms), where any reordering moves y
// by many of its own ulps but by far less than a bf16 ulp of the terms. NaN never passes (outputs
// are poisoned with NaN first).
__global__ void __launch_bounds__(256) check_kernel(Problem p, int modulate, Stats* st) {
  __shared__ float red[256];
  __shared__ unsigned mx[3];
  __shared__ unsigned long long nbad;
  const int row = blockIdx.x, t = threadIdx.x;
  const bf16* x = p.x + int64_t(row) * kDim;
  const bf16* y = p.out + int64_t(row) * kDim;
  if (t < 3) mx[t] = 0;
  if (t == 0) nbad = 0;
  float ss = 0.0f;
  for (int i = t; i < kDim; i += 256) {
    const float v = __bfloat162float(x[i]);
    ss += v * v;
  }
  red[t] = ss;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (t < w) red[t] += red[t + w];
    __syncthreads();
  }
  const float inv = 1.0f / sqrtf(red[0] / kDim + p.eps);
  const int64_t m = int64_t(row / p.tokens) * p.batch_stride;
  float max_ratio = 0.0f, max_rel = 0.0f, max_abs = 0.0f;
  unsigned long long bad = 0;
  for (int i = t; i < kDim; i += 256) {
    const float n = __bfloat162float(x[i]) * inv;
    float want = n, mag = fabsf(n);
    if (modulate) {
      const float s = __bfloat162float(p.scale[m + i]), h = __bfloat162float(p.shift[m + i]);
      want = fmaf(n, 1.0f + s, h);
      mag = fabsf(n * (1.0f + s)) + fabsf(h);
    }
    const float ref = __bfloat162float(__float2bfloat16_rn(want));
    const float got = __bfloat162float(y[i]);
    const float d = fabsf(got - ref), tol = ulp_bf16(ref) + mag * 0x1p-16f;
    if (!(d <= tol)) ++bad;
    const bool nan = d != d;
    max_abs = fmaxf(max_abs, nan ? INFINITY : d);
    max_ratio = fmaxf(max_ratio, nan ? INFINITY : d / tol);
    max_rel = fmaxf(max_rel, nan ? INFINITY : d / fmaxf(fabsf(ref), mag * 0x1p-8f));
  }
  atomicMax(&mx[0], __float_as_uint(max_ratio));
  atomicMax(&mx[1], __float_as_uint(max_rel));
  atomicMax(&mx[2], __float_as_uint(max_abs));
  atomicAdd(&nbad, bad);
  __syncthreads();
  if (t == 0) {
    atomicMax(&st->max_ratio, mx[0]);
    atomicMax(&st->max_rel, mx[1]);
    atomicMax(&st->max_abs, mx[2]);
    atomicAdd(&st->bad, nbad);
  }
}

__global__ void equal_kernel(const uint4* a, const uint4* b, int64_t n, Stats* st) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 u = a[i], v = b[i];
    if (u.x != v.x || u.y != v.y || u.z != v.z || u.w != v.w) atomicAdd(&st->bad, 1ull);
  }
}

// ---- the package's kernel with another store instruction (everything else is its code) ----------

template <St S>
struct PkgModulateStore : ltx_cuda::ModulateEpilogue<bf16, false> {
  template <int W>
  __device__ void store(const Row& rp, int64_t off, const float (&v)[1][W], const Aux<W>& a) const {
    static_assert(W == 8, "bf16, 16-byte vectors");
    ltx_cuda::detail::Vec<bf16, W> y;  // as ModulateEpilogue::store
#pragma unroll
    for (int i = 0; i < W; ++i) y.set(i, fmaf(v[0][i], 1.0f + a.scale.f(i), a.shift.f(i)));
    uint4 w;
    std::memcpy(&w, y.v, 16);
    store_y<S>(rp.out + off, w, make_policy<S>());
  }
};

// ---- variants -----------------------------------------------------------------------------------

struct Variant {
  std::string name;
  std::function<void(const Problem&, cudaStream_t)> run;
  const void* func = nullptr;  // the kernel, for its register count and occupancy
  int threads = 0, grid = 0, per_sm = 0;
  bool modulate = true;
  bool copy = false;  // a copy of x: checked bit for bit, the bandwidth reference
};

struct Device {
  int sms = 0;
  cudaDeviceProp prop{};
};
Device dev;

int occupancy(const void* func, int threads) {
  int n = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, func, threads, 0));
  return n;
}

// Kernels with large static shared memory: ask for the largest carveout before the occupancy.
void prefer_shared(const void* func) {
  CK(cudaFuncSetAttribute(func, cudaFuncAttributePreferredSharedMemoryCarveout,
                          int(cudaSharedmemCarveoutMaxShared)));
}

std::function<void(const Problem&, cudaStream_t)> launcher(const void* func, int grid, int threads) {
  return [func, grid, threads](const Problem& p, cudaStream_t s) {
    Problem arg = p;
    void* args[] = {&arg};
    CK(cudaLaunchKernel(func, dim3(grid), dim3(threads), args, 0, s));
  };
}

// Persistent grids: per_sm_cap 0 = as many blocks per SM as fit; > 0 = at most that many;
// kBalanced = as many as fit, then fewer blocks so that every block gets the same number of row
// blocks (no partly filled last round). Ignored for one-shot grids.
constexpr int kBalanced = -1;
Variant make(std::string name, const void* func, int threads, int rows_per_block, bool persistent,
             int per_sm_cap, Mod m, bool big_smem = false) {
  if (big_smem) prefer_shared(func);
  Variant v;
  v.func = func;
  v.threads = threads;
  v.modulate = m != Mod::None;
  const int fit = occupancy(func, threads);
  if (fit == 0) {
    std::fprintf(stderr, "%s: no block fits on an SM (registers or shared memory)\n", name.c_str());
    std::exit(2);
  }
  const int row_blocks = kRows / rows_per_block;
  if (persistent) {
    v.per_sm = per_sm_cap > 0 ? std::min(per_sm_cap, fit) : fit;
    v.grid = std::min(row_blocks, dev.sms * v.per_sm);
    if (per_sm_cap == kBalanced) {
      const int rounds = (row_blocks + v.grid - 1) / v.grid;
      v.grid = (row_blocks + rounds - 1) / rounds;
    }
  } else {
    v.per_sm = fit;
    v.grid = row_blocks;
  }
  v.name = std::move(name);
  v.run = launcher(func, v.grid, threads);
  return v;
}

std::string shape(int G, int R) {
  return std::to_string(G) + "x" + std::to_string(kChunks / G) + " R" + std::to_string(R);
}
std::string mods(Mod m, Ld l, St s) {
  std::string r = std::string("mod=") + name(m);
  if (l != Ld::Nc) r += std::string(" ld=") + name(l);
  if (s != St::Plain) r += std::string(" ") + name(s);
  return r;
}

// Builds a Variant per entry of for_each_variant (occupancy and grid from this device).
struct HostSink {
  std::vector<Variant>& out;

  // Rows in registers: S = 1 one-shot (one row block per block, as the package), else persistent.
  template <int G, int R, int S, Mod M, Ld L, St ST, int kMinBlocks>
  void pipe(bool persistent, int per_sm_cap = 0) {
    static_assert(kTokens % R == 0, "the block's rows share a batch");
    const void* f = reinterpret_cast<const void*>(&pipe_kernel<G, R, S, L, ST, M, kMinBlocks>);
    std::string n = persistent ? "pipe S" + std::to_string(S) : std::string("res");
    n += " " + shape(G, R) + " " + mods(M, L, ST) + suffix(kMinBlocks, per_sm_cap);
    out.push_back(make(n, f, G * R, R, persistent, per_sm_cap, M));
  }

  template <int G, int R, int S, Mod M, int kMinBlocks, bool k256, St ST>
  void cpasync(int per_sm_cap = 0) {
    static_assert(kTokens % R == 0, "the block's rows share a batch");
    const void* f = reinterpret_cast<const void*>(&cpasync_kernel<G, R, S, k256, ST, M, kMinBlocks>);
    std::string n = "cpasync S" + std::to_string(S) + " " + shape(G, R) + " " + mods(M, Ld::Nc, ST);
    if (k256) n += " L2::256B";
    out.push_back(make(n + suffix(kMinBlocks, per_sm_cap), f, G * R, R, true, per_sm_cap, M, true));
  }

  template <int G, int R, int S, Mod M, int kMinBlocks, St ST>
  void bulk(int per_sm_cap = 0) {
    static_assert(kTokens % R == 0, "the block's rows share a batch");
    const void* f = reinterpret_cast<const void*>(&bulk_kernel<G, R, S, ST, M, kMinBlocks>);
    std::string n = "tma S" + std::to_string(S) + " " + shape(G, R) + " " + mods(M, Ld::Nc, ST);
    out.push_back(make(n + suffix(kMinBlocks, per_sm_cap), f, G * R, R, true, per_sm_cap, M, true));
  }

  static std::string suffix(int min_blocks, int per_sm_cap) {
    std::string r;
    if (min_blocks > 1) r += " minblk" + std::to_string(min_blocks);
    if (per_sm_cap > 0) r += " cap" + std::to_string(per_sm_cap);
    if (per_sm_cap == kBalanced) r += " balanced";
    return r;
  }
};

// The package's resident kernel at G threads x V vectors with the epilogue make_ep(problem) builds.
template <int G, int V, class MakeEp>
Variant pkg_resident(std::string name, MakeEp make_ep, bool modulate) {
  using Ep = decltype(make_ep(std::declval<const Problem&>()));
  using ltx_cuda::detail::row_norm_resident_kernel;
  const void* f = reinterpret_cast<const void*>(&row_norm_resident_kernel<bf16, 8, G, V, 1, Ep>);
  const int threads = ltx_cuda::detail::block_threads(G);
  Variant v = make(std::move(name), f, threads, ltx_cuda::detail::rows_per_block(G), false, 0,
                   modulate ? Mod::Global : Mod::None);
  v.run = [make_ep](const Problem& p, cudaStream_t s) {
    ltx_cuda::detail::launch_resident<bf16, 8, G, V, 1>({{p.x}}, make_ep(p), p.rows, kDim, p.eps, s);
  };
  return v;
}

// The package's modulate epilogue (or a PkgModulateStore) for problem p, no weight.
template <class Ep>
Ep pkg_modulate_ep(const Problem& p) {
  const ltx_cuda::ModulateEpilogue<bf16, false> base{p.out, p.scale, p.shift, nullptr, kDim, p.tokens,
                                                     p.batch_stride, 0};
  if constexpr (std::is_same_v<Ep, ltx_cuda::ModulateEpilogue<bf16, false>>)
    return base;
  else
    return Ep{base};
}

std::vector<Variant> all_variants() {
  std::vector<Variant> vs;
  using ltx_cuda::detail::row_norm_resident_kernel;
  using PkgMod = ltx_cuda::ModulateEpilogue<bf16, false>;
  using PkgRms = ltx_cuda::RmsNormEpilogue<bf16, false>;

  // -- references
  {
    Variant v;
    v.name = "copy16 (bandwidth reference)";
    v.copy = true;
    v.modulate = false;
    v.func = reinterpret_cast<const void*>(&copy_kernel);
    v.threads = 256;
    const int64_t n16 = int64_t(kRows) * kDim / 8;
    v.grid = static_cast<int>((n16 + 1023) / 1024);
    v.per_sm = occupancy(v.func, 256);
    v.run = [n16, g = v.grid](const Problem& p, cudaStream_t s) {
      copy_kernel<<<g, 256, 0, s>>>(reinterpret_cast<const uint4*>(p.x), reinterpret_cast<uint4*>(p.out), n16);
    };
    vs.push_back(v);
    Variant m;
    m.name = "cudaMemcpyAsync D2D";
    m.copy = true;
    m.modulate = false;
    m.run = [](const Problem& p, cudaStream_t s) {
      CK(cudaMemcpyAsync(p.out, p.x, size_t(kRows) * kDim * 2, cudaMemcpyDeviceToDevice, s));
    };
    vs.push_back(m);
  }
  // -- the package: its public launchers (the code LTX runs), then its kernel with other shapes/stores
  {
    const void* f = reinterpret_cast<const void*>(&row_norm_resident_kernel<bf16, 8, 64, 4, 1, PkgRms>);
    Variant v = make("PKG rms_norm (public launcher)", f, 128, 2, false, 0, Mod::None);
    v.run = [](const Problem& p, cudaStream_t s) {
      ltx_cuda::rms_norm(p.out, p.x, nullptr, p.rows, kDim, p.eps, ltx_cuda::DType::BF16, s);
    };
    vs.push_back(v);
  }
  {
    // The launcher runs the packed kernel at this shape: its registers, occupancy and grid are reported.
    const void* f = reinterpret_cast<const void*>(&ltx_cuda::packed::kernel);
    Variant v = make("PKG rms_norm_modulate (public launcher)", f, ltx_cuda::packed::kThreads, 1, false, 0,
                     Mod::Global);
    v.run = [](const Problem& p, cudaStream_t s) {
      ltx_cuda::rms_norm_modulate(p.out, p.x, p.scale, p.shift, nullptr, p.rows, p.tokens, kDim,
                                  p.batch_stride, 0, p.eps, ltx_cuda::DType::BF16, s);
    };
    vs.push_back(v);
  }
  vs.push_back(pkg_resident<128, 2>("PKG modulate kernel 128x2", pkg_modulate_ep<PkgMod>, true));
  vs.push_back(pkg_resident<64, 4>("PKG modulate kernel 64x4 st.cs",
                                   pkg_modulate_ep<PkgModulateStore<St::Cs>>, true));
  vs.push_back(pkg_resident<64, 4>("PKG modulate kernel 64x4 st.evict_first",
                                   pkg_modulate_ep<PkgModulateStore<St::EvictFirst>>, true));
  HostSink sink{vs};
  for_each_variant(sink);

  return vs;
}

// ---- running ------------------------------------------------------------------------------------

// Waits for the stream; a kernel still running after kHangSeconds ends the process (exit 3).
void wait_or_die(cudaStream_t s, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) {
      std::fprintf(stderr, "%s: %s (%s)\n", what.c_str(), cudaGetErrorString(e), cudaGetErrorName(e));
      std::exit(2);
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > kHangSeconds) {
      std::printf("HANG: %s did not finish in %.0f s; stopping\n", what.c_str(), kHangSeconds);
      std::fflush(stdout);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

struct Buffers {
  bf16* x[kSets];
  bf16* out[kSets];
  bf16* mod;
  Stats* stats;
  const uint4* flush = nullptr;  // read before each timed sample (--no-flush: none)
  int64_t flush_words = 0;
  Problem problem(int set) const {
    return {x[set], out[set], mod + kDim /* scale: index 1 of 6 */, mod /* shift: index 0 */, kRows,
            kTokens, kModBatchStride, kEps};
  }
};

struct Check {
  Stats s{};
  bool ok() const { return s.bad == 0; }
};

float as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

Check check(const Variant& v, const Buffers& b, int set, cudaStream_t s) {
  const Problem p = b.problem(set);
  const size_t bytes = size_t(kRows) * kDim * 2;
  CK(cudaMemsetAsync(p.out, 0xff, bytes, s));  // NaN: an element nobody writes fails
  CK(cudaMemsetAsync(b.stats, 0, sizeof(Stats), s));
  v.run(p, s);
  CK(cudaGetLastError());
  wait_or_die(s, v.name + " (check run)");
  if (v.copy)
    equal_kernel<<<1024, 256, 0, s>>>(reinterpret_cast<const uint4*>(p.x),
                                      reinterpret_cast<const uint4*>(p.out), int64_t(bytes / 16), b.stats);
  else
    check_kernel<<<kRows, 256, 0, s>>>(p, v.modulate ? 1 : 0, b.stats);
  CK(cudaGetLastError());
  wait_or_die(s, "check of " + v.name);
  Check c;
  CK(cudaMemcpy(&c.s, b.stats, sizeof(Stats), cudaMemcpyDeviceToHost));
  return c;
}

struct Timing {
  double us = 0;
  int slow_enqueues = 0;  // samples whose 10 launches took the host longer than the spin
};

Timing time_variant(const Variant& v, const Buffers& b, cudaStream_t s, int samples, double spin_us,
                    cudaEvent_t e0, cudaEvent_t e1) {
  constexpr int kWarmup = 20, kBackToBack = 10;
  for (int i = 0; i < kWarmup; ++i) v.run(b.problem(i % kSets), s);
  CK(cudaGetLastError());
  wait_or_die(s, v.name + " (warm-up)");
  std::vector<float> ms;
  Timing t;
  for (int k = 0; k < samples; ++k) {
    if (b.flush_words)
      flush_kernel<<<dev.sms * 8, 256, 0, s>>>(b.flush, b.flush_words, reinterpret_cast<unsigned*>(b.stats));
    spin_kernel<<<1, 1, 0, s>>>(static_cast<long long>(spin_us * 1000));
    CK(cudaEventRecord(e0, s));
    const auto h0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBackToBack; ++i) v.run(b.problem(i % kSets), s);
    CK(cudaEventRecord(e1, s));
    const double host_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
    if (host_us > spin_us) ++t.slow_enqueues;
    CK(cudaGetLastError());
    wait_or_die(s, v.name + " (timing)");
    float e = 0;
    CK(cudaEventElapsedTime(&e, e0, e1));
    ms.push_back(e);
  }
  std::sort(ms.begin(), ms.end());
  t.us = ms[ms.size() / 2] * 1000.0 / kBackToBack;
  return t;
}

int main(int argc, char** argv) {
  double spin_us = 50;
  int samples = 30;
  std::string only;
  bool flush = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-flush") flush = false;
    else if (a == "--spin-us" && i + 1 < argc) spin_us = std::atof(argv[++i]);
    else if (a == "--samples" && i + 1 < argc) samples = std::max(1, std::atoi(argv[++i]));
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--spin-us N] [--samples N] [--only SUBSTRING] [--no-flush]\n", argv[0]);
      return 2;
    }
  }
  int device = 0;
  CK(cudaGetDevice(&device));
  CK(cudaGetDeviceProperties(&dev.prop, device));
  dev.sms = dev.prop.multiProcessorCount;
  std::printf("device: %s, sm_%d%d, %d SMs, L2 %d MB; x bf16 [%d, %d], scale/shift [%d, 1, %d] "
              "(batch stride %d), %d input sets\n",
              dev.prop.name, dev.prop.major, dev.prop.minor, dev.sms, dev.prop.l2CacheSize >> 20,
              kRows, kDim, kBatch, kDim, kModBatchStride, kSets);
  if (dev.prop.major != 9) {
    std::fprintf(stderr, "built for sm_90 only (cp.async.bulk, createpolicy); this is sm_%d%d\n",
                 dev.prop.major, dev.prop.minor);
    return 2;
  }
  if (const char* g = std::getenv("LTX_ROW_GROUP"))
    std::printf("note: LTX_ROW_GROUP=%s changes the package launcher's shape\n", g);

  Buffers b{};
  const size_t n = size_t(kRows) * kDim;
  for (int k = 0; k < kSets; ++k) {
    CK(cudaMalloc(&b.x[k], n * 2));
    CK(cudaMalloc(&b.out[k], n * 2));
    fill_x_kernel<<<4096, 256>>>(b.x[k], int64_t(n), 1000 + k);
    CK(cudaGetLastError());
  }
  CK(cudaMalloc(&b.mod, size_t(kBatch) * kModBatchStride * 2));
  fill_mod_kernel<<<64, 256>>>(b.mod, int64_t(kBatch) * kModBatchStride, 77);
  CK(cudaGetLastError());
  CK(cudaMalloc(&b.stats, sizeof(Stats)));
  if (flush) {  // 256 MB of zeros, five times the L2
    constexpr size_t kFlushBytes = size_t(256) << 20;
    void* f = nullptr;
    CK(cudaMalloc(&f, kFlushBytes));
    CK(cudaMemset(f, 0, kFlushBytes));
    b.flush = static_cast<const uint4*>(f);
    b.flush_words = int64_t(kFlushBytes / 16);
  }
  std::printf("L2 flush before each sample: %s\n", flush ? "a 256 MB read" : "none (--no-flush)");
  CK(cudaDeviceSynchronize());

  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  std::vector<Variant> vs = all_variants();
  const double x_bytes = 2.0 * n * 2;                    // read x, write y
  const double mod_bytes = 2.0 * kBatch * kDim * 2;      // scale/shift rows, once
  std::printf("%-52s %8s %9s %7s | %-34s | %4s %5s %6s | %6s %5s\n", "variant", "us", "GB/s",
              "%copy", "check x2: max err/tol, max rel err", "regs", "local", "smem", "blk/SM", "grid");
  struct Result {
    std::string label;
    double us;
    bool ok, modulate;
  };
  std::vector<Result> results;
  double copy_us = 0;
  int failed = 0;
  auto run_one = [&](const Variant& v, const std::string& label) {
    const Check c1 = check(v, b, 0, s);
    const Timing t = time_variant(v, b, s, samples, spin_us, e0, e1);
    const Check c2 = check(v, b, 1, s);
    const bool ok = c1.ok() && c2.ok();
    if (!ok) ++failed;
    if (v.copy && copy_us == 0) copy_us = t.us;
    const double bytes = x_bytes + (v.modulate ? mod_bytes : 0);
    const double gbs = bytes / (t.us * 1e3);
    const double pct = copy_us > 0 ? 100.0 * gbs / (x_bytes / (copy_us * 1e3)) : 0;
    char err[96];
    if (v.copy)
      std::snprintf(err, sizeof err, "%s", ok ? "bit-exact" : "MISMATCH");
    else
      std::snprintf(err, sizeof err, "err/tol %.2f, rel %.1e",
                    std::max(as_float(c1.s.max_ratio), as_float(c2.s.max_ratio)),
                    std::max(as_float(c1.s.max_rel), as_float(c2.s.max_rel)));
    if (!ok)
      std::snprintf(err + std::strlen(err), sizeof err - std::strlen(err), " FAIL %llu bad",
                    c1.s.bad + c2.s.bad);
    cudaFuncAttributes a{};
    if (v.func) CK(cudaFuncGetAttributes(&a, v.func));
    std::printf("%-52s %8.2f %9.0f %6.1f%% | %-34s | %4d %5zu %6zu | %6d %5d%s\n", label.c_str(),
                t.us, gbs, pct, err, v.func ? a.numRegs : 0, v.func ? a.localSizeBytes : size_t(0),
                v.func ? a.sharedSizeBytes : size_t(0), v.per_sm, v.grid,
                t.slow_enqueues ? "  (host enqueue slower than the spin: raise --spin-us)" : "");
    std::fflush(stdout);
    results.push_back({label, t.us, ok, v.modulate && !v.copy});
    return t.us;
  };
  const std::string kPkgMod = "PKG rms_norm_modulate (public launcher)";
  const std::string kPkgRms = "PKG rms_norm (public launcher)";
  double pkg_us = 0, pkg_rms_us = 0;
  for (const Variant& v : vs) {
    if (!only.empty() && !v.copy && v.name.find(only) == std::string::npos) continue;
    const double us = run_one(v, v.name);
    if (v.name == kPkgMod) pkg_us = us;
    if (v.name == kPkgRms) pkg_rms_us = us;
  }
  // Drift: the bandwidth reference and the package's kernel once more, at the end.
  run_one(vs[0], vs[0].name + " (again)");
  for (const Variant& v : vs)
    if (v.name == kPkgMod) run_one(v, v.name + " (again)");

  std::vector<Result> ranked;
  for (const Result& r : results)
    if (r.ok && r.modulate) ranked.push_back(r);
  std::sort(ranked.begin(), ranked.end(), [](const Result& a, const Result& b) { return a.us < b.us; });
  const double floor_us = copy_us * (x_bytes + mod_bytes) / x_bytes;
  std::printf("\nfastest modulate variants (checked), floor at copy16 speed %.2f us, package %.2f us, "
              "package rms_norm %.2f us:\n", floor_us, pkg_us, pkg_rms_us);
  for (size_t i = 0; i < ranked.size() && i < 15; ++i)
    std::printf("  %2zu. %8.2f us  %5.1f%% of floor  %+6.2f us vs package  %s\n", i + 1, ranked[i].us,
                100.0 * floor_us / ranked[i].us, ranked[i].us - pkg_us, ranked[i].label.c_str());
  if (!ranked.empty())
    std::printf("best: %s, %.2f us: %s the <= 28 us target\n", ranked[0].label.c_str(), ranked[0].us,
                ranked[0].us <= 28.0 ? "meets" : "misses");
  if (failed) std::printf("%d variant(s) FAILED the reference check (lines marked FAIL above)\n", failed);
  return failed ? 1 : 0;
}

}  // namespace xm

int main(int argc, char** argv) { return xm::main(argc, argv); }
#endif  // EXP_EMU
