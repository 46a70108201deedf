// int8.cuh: the 8-bit attention's kernel, a draft the probe builds beside the shipped one (not in the package).
// Its math is tests/ltx_reference.py's attention_int8: S = (q8 k8^T) * q_scale[row] * k_scale[tile] in the exp2
// domain from INT8 wgmma (m64n128k32, int32 accumulators), then attention.cuh's online softmax and bf16 P V.
// q8, k8 are [B, S, H, 64] int8 (64-byte rows, 64-byte swizzle); q_scale [B, H, S] and k_scale [B, H, S/128]
// float32; v and the output [B, S, H, 64] bf16 as in the shipped kernel. K tiles are the 128 tokens of a scale.
#pragma once

#include "attention.cuh"

namespace ltx_cuda_sm90 {

constexpr int kRowBytes8 = kHeadDim;  // one token's head in INT8: 64 bytes, one 64-byte swizzle row

// wgmma descriptor for a 64B-swizzled tile of 64-byte rows: 512 B between 8-row groups.
__device__ __forceinline__ uint64_t desc_sw64(uint32_t addr) {
  uint64_t d = static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(1) << 16;         // leading byte offset: unused by these layouts
  d |= static_cast<uint64_t>(512 >> 4) << 32;  // stride byte offset
  d |= static_cast<uint64_t>(2) << 62;         // 64-byte swizzle
  return d;
}

// D[64 x 128] (+)= A[64 x 32] * B[128 x 32]^T in int8, int32 accumulators, A and B K-major in shared memory
__device__ __forceinline__ void wgmma_s8_n128(int32_t (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
        "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
        "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
        "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
        "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

template <int N>
__device__ __forceinline__ void pin(int32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// int32 -> float32 exactly for |x| < 2^22 (|q8 . k8| <= 127 * 127 * 64 < 2^20) with two full-rate ops, not I2F.
__device__ __forceinline__ float i2f_small(int32_t x) { return __int_as_float(x + 0x4B400000) - 12582912.f; }

template <int STAGES>
struct Smem8 {
  static constexpr int BN = 128;
  alignas(1024) uint8_t q[192 * kRowBytes8];
  alignas(1024) uint8_t k[STAGES][BN * kRowBytes8];
  alignas(1024) uint8_t v[STAGES][BN * kRowBytes];
  uint64_t q_full;
  uint64_t k_full[STAGES];
  uint64_t v_full[STAGES];
  uint64_t empty[STAGES];
};

template <int STAGES>
__global__ void __launch_bounds__(512, 1)
    attention_int8_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                          const __grid_constant__ CUtensorMap tv, const float* __restrict__ q_scale,
                          const float* __restrict__ k_scale, __nv_bfloat16* __restrict__ out, int tokens, int heads) {
  constexpr int NWG = 3, BM = 64 * NWG, BN = 128;
  using Sm = Smem8<STAGES>;
  extern __shared__ uint8_t raw[];
  Sm& sm = *reinterpret_cast<Sm*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  const int m0 = blockIdx.x * BM, h = blockIdx.y, b = blockIdx.z;
  const int n_tiles = (tokens + BN - 1) / BN;
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
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
    if (t == 0) {
      mbar_expect_tx(&sm.q_full, BM * kRowBytes8);
      tma_load(sm.q, &tq, &sm.q_full, m0, h, b);
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % STAGES;
        if (j >= STAGES) mbar_wait(&sm.empty[s], ((j / STAGES) & 1) ^ 1);
        mbar_expect_tx(&sm.k_full[s], BN * kRowBytes8);
        tma_load(sm.k[s], &tk, &sm.k_full[s], j * BN, h, b);
        mbar_expect_tx(&sm.v_full[s], BN * kRowBytes);
        tma_load(sm.v[s], &tv, &sm.v_full[s], j * BN, h, b);
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(consumer_registers<NWG>()));
    const int w = wg - 1, lane = t % 32;
    const uint32_t q_addr = smem_addr(sm.q) + w * 64 * kRowBytes8;
    const int row0 = m0 + w * 64 + (t / 32) * 16 + lane / 4;
    const float* ks = k_scale + (static_cast<size_t>(b) * heads + h) * n_tiles;
    float qs[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = row0 + 8 * hh;
      qs[hh] = row < tokens ? q_scale[(static_cast<size_t>(b) * heads + h) * tokens + row] : 0.f;
    }
    float o[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2];
    uint32_t p[BN / 16][4];
    mbar_wait(&sm.q_full, 0);
    for (int j = 0; j < n_tiles; ++j) {
      const int s = j % STAGES;
      const uint32_t phase = (j / STAGES) & 1;
      const float kt = ks[j];
      int32_t acc[BN / 2];
      float sc[BN / 2];
      mbar_wait(&sm.k_full[s], phase);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 32; ++kk)
        wgmma_s8_n128(acc, desc_sw64(q_addr + kk * 32), desc_sw64(smem_addr(sm.k[s]) + kk * 32), kk > 0);
      wgmma_commit();
      wgmma_wait_all();
      pin(acc);
      const float f[2] = {qs[0] * kt, qs[1] * kt};
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) sc[i] = i2f_small(acc[i]) * f[(i >> 1) & 1];
      if ((j + 1) * BN > tokens) mask_tail<BN>(sc, j * BN, tokens, lane);
      softmax<BN>(sc, m, l, alpha, 1.f);
#pragma unroll
      for (int i = 0; i < 32; ++i) o[i] *= alpha[(i >> 1) & 1];
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) p[kk][r] = pack_bf16(sc[8 * kk + 2 * r], sc[8 * kk + 2 * r + 1]);
      mbar_wait(&sm.v_full[s], phase);
      wgmma_fence();
      pv<BN>(o, p, smem_addr(sm.v[s]));
      wgmma_commit();
      wgmma_wait_all();
      pin(o);
      __syncwarp();
      if (lane == 0) mbar_arrive(&sm.empty[s]);
    }

    float inv[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float x = l[hh];
      x += __shfl_xor_sync(0xffffffffu, x, 1);
      x += __shfl_xor_sync(0xffffffffu, x, 2);
      inv[hh] = 1.f / x;
    }
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
}

// A contiguous [B, S, H, 64] int8 tensor as a 4-d tensor map whose box is `rows` tokens of one head.
inline bool make_map_s8(CUtensorMap* map, const void* base, int64_t batch, int64_t tokens, int64_t heads, int rows) {
  const cuuint64_t dims[4] = {kHeadDim, cuuint64_t(heads), cuuint64_t(tokens), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {kRowBytes8, cuuint64_t(heads) * kRowBytes8,
                                 cuuint64_t(tokens * heads) * kRowBytes8};
  const cuuint32_t box[4] = {kHeadDim, 1, cuuint32_t(rows), 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  const EncodeTiled fn = encoder();
  return fn && fn(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<void*>(base), dims, strides, box, elem,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int STAGES>
const char* launch_attention_int8(void* out, const void* q8, const void* k8, const void* v, const float* q_scale,
                                  const float* k_scale, int64_t batch, int64_t tokens, int64_t heads,
                                  cudaStream_t stream) {
  CUtensorMap tq, tk, tv;
  if (!make_map_s8(&tq, q8, batch, tokens, heads, 192) || !make_map_s8(&tk, k8, batch, tokens, heads, 128) ||
      !make_map(&tv, v, batch, tokens, heads, 128))
    return "the CUDA driver refused the tensor maps (cuTensorMapEncodeTiled)";
  auto kernel = attention_int8_kernel<STAGES>;
  constexpr int smem = sizeof(Smem8<STAGES>) + 1024;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
    return "could not raise the kernel's shared-memory limit on this device";
  const dim3 grid(static_cast<unsigned>((tokens + 191) / 192), static_cast<unsigned>(heads),
                  static_cast<unsigned>(batch));
  kernel<<<grid, 512, smem, stream>>>(tq, tk, tv, q_scale, k_scale, static_cast<__nv_bfloat16*>(out),
                                      static_cast<int>(tokens), static_cast<int>(heads));
  return nullptr;
}

}  // namespace ltx_cuda_sm90
