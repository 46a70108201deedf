// Probe: LTX-Video self-attention forward on sm_90a (head dim 64, bf16 in and out, fp32 softmax and accumulators).
// q, k, v, o: [B, S, H, 64], the projection's own layout. One CTA: BM = 64 * NWG queries of one (batch, head);
// warpgroup 0 is the producer (one thread issues the bulk tensor copies of Q once and K/V tiles into a STAGES-deep
// ring), warpgroups 1..NWG consume: S = Q K^T by wgmma from shared memory, online softmax in registers, O += P V by
// wgmma with P from registers. OVERLAP issues the next tile's Q K^T before this tile's P V (FA3's intra-warpgroup
// pipelining), so the softmax of one tile runs while the tensor cores work on the other.
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -shared -Xcompiler -fPIC -o attn_wgmma.so attn_wgmma.cu
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "wgmma.cuh"

namespace {

constexpr int D = 64;
constexpr int ROW = D * 2;  // bytes per token row: exactly one 128-byte swizzle row

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
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

// Bulk tensor copy of one [rows x 64] tile of one head into 128B-swizzled shared memory.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, uint64_t* bar, int s, int h, int b) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(0), "r"(h), "r"(s), "r"(b)
      : "memory");
}

// wgmma shared-memory descriptor, 128-byte swizzle: stride 1024 B between 8-row groups.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(1) << 16;            // leading byte offset (unused for these layouts)
  d |= static_cast<uint64_t>(1024 >> 4) << 32;    // stride byte offset
  d |= static_cast<uint64_t>(1) << 62;            // 128-byte swizzle
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
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

// 2^x for x <= 0 on the FMA and integer pipes, for a share of the elements, to unload MUFU: x rounded to j by the
// 1.5 * 2^23 trick, 2^(x - j) by a degree-3 polynomial on [-0.5, 0.5] (relative error 1.0e-4), j added to the exponent.
__device__ __forceinline__ float ex2_fma(float x) {
  x = fmaxf(x, -125.f);
  const float r = x + 12582912.f;
  const float f = x - (r - 12582912.f);
  const float p = fmaf(fmaf(fmaf(0.05502612f, f, 0.24221097f), f, 0.69327939f), f, 1.f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(r) << 23));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <int BN>
__device__ __forceinline__ void qk(float (&s)[BN / 2], uint32_t q_addr, uint32_t k_addr) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64_t da = desc_sw128(q_addr + kk * 32), db = desc_sw128(k_addr + kk * 32);
    if constexpr (BN == 64) wgmma_ss_n64(s, da, db, kk > 0);
    if constexpr (BN == 96) wgmma_ss_n96(s, da, db, kk > 0);
    if constexpr (BN == 128) wgmma_ss_n128(s, da, db, kk > 0);
    if constexpr (BN == 192) wgmma_ss_n192(s, da, db, kk > 0);
  }
}

template <int BN>
__device__ __forceinline__ void pv(float (&o)[32], const uint32_t (&p)[BN / 16][4], uint32_t v_addr) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) wgmma_rs_n64(o, p[kk], desc_sw128(v_addr + kk * 16 * ROW));
}

// Online softmax on one S tile in place (S becomes P): new row max, alpha = rescale of the old state.
// EMU of every 8 registers take their exponential on the FMA pipe.
template <int BN, int EMU>
__device__ __forceinline__ void softmax(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                        float scale_log2) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    const float m_new = fmaxf(m[h], mx[h] * scale_log2);
    alpha[h] = ex2(m[h] - m_new);
    m[h] = m_new;
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) {
    const int h = (i >> 1) & 1;
    const float x = fmaf(s[i], scale_log2, -m[h]);
    s[i] = (i & 7) < EMU ? ex2_fma(x) : ex2(x);
    sum[h] += s[i];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + sum[h];
}

// P as wgmma A fragments: the m64nN accumulator layout of 16 columns is the m64k16 A layout.
template <int BN>
__device__ __forceinline__ void to_a(const float (&s)[BN / 2], uint32_t (&p)[BN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) p[kk][r] = pack_bf16(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

__device__ __forceinline__ void rescale(float (&o)[32], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i] *= alpha[(i >> 1) & 1];
}

template <int BM, int BN, int STAGES>
struct Smem {
  alignas(1024) uint8_t q[BM * ROW];
  alignas(1024) uint8_t k[STAGES][BN * ROW];
  alignas(1024) uint8_t v[STAGES][BN * ROW];
  uint64_t q_full;
  uint64_t k_full[STAGES];
  uint64_t v_full[STAGES];
  uint64_t empty[STAGES];
};

template <int NWG, int BN, int STAGES, bool OVERLAP, int EMU>
__global__ void __launch_bounds__(128 * (NWG + 1), 1)
    attn_fwd(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
             const __grid_constant__ CUtensorMap tv, __nv_bfloat16* __restrict__ out, int S, int H,
             float scale_log2) {
  constexpr int BM = 64 * NWG;
  using Sm = Smem<BM, BN, STAGES>;
  extern __shared__ uint8_t raw[];
  Sm& sm = *reinterpret_cast<Sm*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  const int m0 = blockIdx.x * BM, h = blockIdx.y, b = blockIdx.z;
  const int n_tiles = S / BN;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;

  if (threadIdx.x == 0) {
    mbar_init(&sm.q_full, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&sm.k_full[s], 1);
      mbar_init(&sm.v_full[s], 1);
      mbar_init(&sm.empty[s], 4 * NWG);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    // producer: one thread keeps the K/V ring full
    if constexpr (NWG == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
    if constexpr (NWG >= 3) asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
    if (t == 0) {
      mbar_expect_tx(&sm.q_full, BM * ROW);
      tma_load(sm.q, &tq, &sm.q_full, m0, h, b);
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % STAGES;
        if (j >= STAGES) mbar_wait(&sm.empty[s], ((j / STAGES) & 1) ^ 1);
        mbar_expect_tx(&sm.k_full[s], BN * ROW);
        tma_load(sm.k[s], &tk, &sm.k_full[s], j * BN, h, b);
        mbar_expect_tx(&sm.v_full[s], BN * ROW);
        tma_load(sm.v[s], &tv, &sm.v_full[s], j * BN, h, b);
      }
    }
  } else {
    if constexpr (NWG == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
    if constexpr (NWG == 3) asm volatile("setmaxnreg.inc.sync.aligned.u32 160;");
    if constexpr (NWG == 4) asm volatile("setmaxnreg.inc.sync.aligned.u32 120;");
    const int w = wg - 1, lane = t % 32;
    const uint32_t q_addr = smem_addr(sm.q) + w * 64 * ROW;
    float o[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2];
    uint32_t p[BN / 16][4];
    mbar_wait(&sm.q_full, 0);

    if constexpr (!OVERLAP) {
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % STAGES;
        const uint32_t ph = (j / STAGES) & 1;
        float sc[BN / 2];
        mbar_wait(&sm.k_full[s], ph);
        wgmma_fence();
        qk<BN>(sc, q_addr, smem_addr(sm.k[s]));
        wgmma_commit();
        wgmma_wait<0>();
        pin(sc);
        softmax<BN, EMU>(sc, m, l, alpha, scale_log2);
        rescale(o, alpha);
        to_a<BN>(sc, p);
        mbar_wait(&sm.v_full[s], ph);
        wgmma_fence();
        pv<BN>(o, p, smem_addr(sm.v[s]));
        wgmma_commit();
        wgmma_wait<0>();
        pin(o);
        __syncwarp();
        if (lane == 0) mbar_arrive(&sm.empty[s]);
      }
    } else {
      // S(j+1) = Q K(j+1)^T is in flight while P(j) V(j) and then softmax(S(j+1)) run.
      float sa[BN / 2], sb[BN / 2];
      mbar_wait(&sm.k_full[0], 0);
      wgmma_fence();
      qk<BN>(sa, q_addr, smem_addr(sm.k[0]));
      wgmma_commit();
      wgmma_wait<0>();
      pin(sa);
      softmax<BN, EMU>(sa, m, l, alpha, scale_log2);
      // `more` is a compile-time constant: ptxas serialises the wgmmas when a run-time branch hides which
      // accumulators are in flight.
      auto step = [&](auto more_c, int j, float(&cur)[BN / 2], float(&nxt)[BN / 2]) {
        constexpr bool more = decltype(more_c)::value;
        const int s = j % STAGES, s1 = (j + 1) % STAGES;
        const uint32_t ph = (j / STAGES) & 1, ph1 = ((j + 1) / STAGES) & 1;
        to_a<BN>(cur, p);
        if constexpr (more) {
          mbar_wait(&sm.k_full[s1], ph1);
          wgmma_fence();
          qk<BN>(nxt, q_addr, smem_addr(sm.k[s1]));
          wgmma_commit();
        }
        mbar_wait(&sm.v_full[s], ph);
        wgmma_fence();
        pv<BN>(o, p, smem_addr(sm.v[s]));
        wgmma_commit();
        if constexpr (more) {
          wgmma_wait<1>();
          pin(nxt);
          softmax<BN, EMU>(nxt, m, l, alpha, scale_log2);
        }
        wgmma_wait<0>();
        pin(o);
        __syncwarp();
        if (lane == 0) mbar_arrive(&sm.empty[s]);
        if constexpr (more) rescale(o, alpha);
      };
      using yes = std::true_type;
      for (int j = 0; j + 2 < n_tiles; j += 2) {
        step(yes{}, j, sa, sb);
        step(yes{}, j + 1, sb, sa);
      }
      step(yes{}, n_tiles - 2, sa, sb);
      step(std::false_type{}, n_tiles - 1, sb, sa);
    }

    // epilogue: finish the row sums across the quad, normalise, store bf16 pairs
    float inv[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float x = l[hh];
      x += __shfl_xor_sync(0xffffffffu, x, 1);
      x += __shfl_xor_sync(0xffffffffu, x, 2);
      inv[hh] = 1.f / x;
    }
    const int row0 = m0 + w * 64 + (t / 32) * 16 + lane / 4;
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = row0 + 8 * hh, col = 8 * c + 2 * (lane % 4);
        __nv_bfloat162 val = __floats2bfloat162_rn(o[4 * c + 2 * hh] * inv[hh], o[4 * c + 2 * hh + 1] * inv[hh]);
        *reinterpret_cast<__nv_bfloat162*>(out + ((static_cast<size_t>(b) * S + row) * H + h) * D + col) = val;
      }
  }
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encoder() {
  static EncodeTiled fn = nullptr;
  if (!fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiled>(p);
  }
  return fn;
}

// [B, S, H, 64] bf16 as a 4-d tensor map whose box is `rows` tokens of one head.
int make_map(CUtensorMap* map, const void* base, int B, int S, int H, int rows) {
  const cuuint64_t dims[4] = {D, cuuint64_t(H), cuuint64_t(S), cuuint64_t(B)};
  const cuuint64_t strides[3] = {ROW, cuuint64_t(H) * ROW, cuuint64_t(S) * H * ROW};
  const cuuint32_t box[4] = {D, 1, cuuint32_t(rows), 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  EncodeTiled fn = encoder();
  if (!fn) return -1;
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS
             ? 0
             : -2;
}

template <int NWG, int BN, int STAGES, bool OVERLAP, int EMU = 0>
int launch(const void* q, const void* k, const void* v, void* o, int B, int S, int H, float scale,
           cudaStream_t stream) {
  constexpr int BM = 64 * NWG;
  if (S % BM || S % BN || (OVERLAP && (S / BN) % 2)) return -3;
  CUtensorMap tq, tk, tv;
  if (make_map(&tq, q, B, S, H, BM) || make_map(&tk, k, B, S, H, BN) || make_map(&tv, v, B, S, H, BN)) return -2;
  auto kernel = attn_fwd<NWG, BN, STAGES, OVERLAP, EMU>;
  const int smem = sizeof(Smem<BM, BN, STAGES>) + 1024;
  static bool configured = false;
  if (!configured) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) return -4;
    configured = true;
  }
  kernel<<<dim3(S / BM, H, B), 128 * (NWG + 1), smem, stream>>>(tq, tk, tv, static_cast<__nv_bfloat16*>(o), S, H,
                                                                scale * 1.4426950408889634f);
  return cudaGetLastError() == cudaSuccess ? 0 : -5;
}

}  // namespace

// variant: which tile/pipeline configuration; returns 0, or a negative code saying what failed.
extern "C" int ltx_attn_fwd(const void* q, const void* k, const void* v, void* o, int B, int S, int H, float scale,
                            void* stream, int variant) {
  auto st = static_cast<cudaStream_t>(stream);
  switch (variant) {
    case 0: return launch<3, 128, 2, false>(q, k, v, o, B, S, H, scale, st);
    case 1: return launch<3, 128, 3, false>(q, k, v, o, B, S, H, scale, st);
    case 2: return launch<3, 128, 4, false>(q, k, v, o, B, S, H, scale, st);
    case 3: return launch<3, 64, 4, false>(q, k, v, o, B, S, H, scale, st);
    case 4: return launch<3, 64, 4, true>(q, k, v, o, B, S, H, scale, st);
    case 5: return launch<3, 96, 3, true>(q, k, v, o, B, S, H, scale, st);
    case 6: return launch<3, 96, 3, false>(q, k, v, o, B, S, H, scale, st);
    case 7: return launch<2, 128, 2, true>(q, k, v, o, B, S, H, scale, st);
    case 8: return launch<2, 128, 3, true>(q, k, v, o, B, S, H, scale, st);
    case 9: return launch<4, 64, 4, false>(q, k, v, o, B, S, H, scale, st);
    case 10: return launch<3, 96, 3, true, 2>(q, k, v, o, B, S, H, scale, st);
    case 11: return launch<3, 64, 4, true, 2>(q, k, v, o, B, S, H, scale, st);
    case 12: return launch<2, 128, 2, true, 2>(q, k, v, o, B, S, H, scale, st);
    case 13: return launch<2, 128, 2, false>(q, k, v, o, B, S, H, scale, st);
    default: return -6;
  }
}

extern "C" const char* ltx_attn_variant(int variant) {
  switch (variant) {
    case 0: return "3wg bn128 st2";
    case 1: return "3wg bn128 st3";
    case 2: return "3wg bn128 st4";
    case 3: return "3wg bn64 st4";
    case 4: return "3wg bn64 st4 overlap";
    case 5: return "3wg bn96 st3 overlap";
    case 6: return "3wg bn96 st3";
    case 7: return "2wg bn128 st2 overlap";
    case 8: return "2wg bn128 st3 overlap";
    case 9: return "4wg bn64 st4";
    case 10: return "3wg bn96 st3 overlap emu2/8";
    case 11: return "3wg bn64 st4 overlap emu2/8";
    case 12: return "2wg bn128 st2 overlap emu2/8";
    case 13: return "2wg bn128 st2";
    default: return nullptr;
  }
}
