// int8.cuh: the 8-bit attention, a draft the probe builds beside the shipped kernel (not in the package): a
// Scores policy for attention.cuh's pipeline. Its math is tests/ltx_reference.py's attention_int8:
// S = (q8 k8^T) * q_scale[row] * k_scale[tile] in the exp2 domain from INT8 wgmma (m64n128k32, int32
// accumulators), then the shipped online softmax and bf16 P V. q8, k8 are [B, S, H, 64] int8 (64-byte rows,
// 64-byte swizzle); q_scale [B, H, S] and k_scale [B, H, ceil(S / 128)] float32; v and the output bf16.
#pragma once

#include "attention.cuh"

namespace ltx_cuda_sm90 {

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

// An int32 score x as the float kMagic + x, exactly (|x| <= 127 * 127 * 64 < 2^22, where the ulp of kMagic's
// binade is 1): one integer add, no I2F. The softmax subtracts kMagic inside the exponent's FMA.
constexpr int32_t kMagicBits = 0x4B400000;  // the float 1.5 * 2^23
constexpr int kMagic = 12582912;           // its value

// The 8-bit scores: q8 k8^T by INT8 wgmma (two k32 steps along the 64-byte swizzled rows). A score costs one
// integer add more than a bf16 one: the row's factor f = q scale x k scale is applied in the softmax's FMA,
// exp2((kMagic + x) f - (kMagic f + m)), and the row maximum is taken on kMagic + x (monotonic in x).
struct Int8Scores : NoFold {
  static constexpr int kQKRowBytes = kHeadDim;  // one token's head in INT8: one 64-byte swizzle row
  static constexpr CUtensorMapDataType kMapType = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  static constexpr CUtensorMapSwizzle kSwizzle = CU_TENSOR_MAP_SWIZZLE_64B;
  struct Rows {
    float q[2];       // the q scales of this thread's two rows (1 past the last token: no 0 * inf there)
    float f[2];       // this tile's factors: q scale x the tile's k scale
    const float* k;   // this (batch, head)'s k scales, one per 128-token tile
    int32_t acc[64];  // the overlapped schedule's int32 scores between issue() and finish()
  };
  const float* q_scale;  // [B, H, S]
  const float* k_scale;  // [B, H, ceil(S / 128)]

  __device__ __forceinline__ Rows rows(int b, int h, int row0, int tokens, int heads, int n_tiles) const {
    Rows r;
    const size_t bh = static_cast<size_t>(b) * heads + h;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) r.q[hh] = row0 + 8 * hh < tokens ? q_scale[bh * tokens + row0 + 8 * hh] : 1.f;
    r.k = k_scale + bh * n_tiles;
    return r;
  }

  template <int BN>
  __device__ __forceinline__ void tile(float (&s)[BN / 2], Rows& r, uint32_t q_addr, uint32_t k_addr, int j) const {
    wgmma_fence();
    issue<BN>(s, r, q_addr, k_addr, j);
    wgmma_commit();
    wgmma_wait_all();
    finish<BN>(s, r, j);
  }

  // The overlapped schedule's halves of tile(): the wgmmas into r.acc, then (once waited for) the floats.
  template <int BN>
  __device__ __forceinline__ void issue(float (&)[BN / 2], Rows& r, uint32_t q_addr, uint32_t k_addr, int) const {
    static_assert(BN == 128, "one k scale per 128-token tile");
    const Desc<64> q(q_addr), k(k_addr);
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 32; ++kk) wgmma_s8_n128(r.acc, q.at(kk * 32), k.at(kk * 32), kk > 0);
  }

  template <int BN>
  __device__ __forceinline__ void finish(float (&s)[BN / 2], Rows& r, int j) const {
    const float kt = r.k[j];
    pin(r.acc);
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) s[i] = __int_as_float(r.acc[i] + kMagicBits);
    r.f[0] = r.q[0] * kt;
    r.f[1] = r.q[1] * kt;
  }

  // attention.cuh's online softmax, the factor and kMagic applied in the exponent's FMA
  template <int BN>
  __device__ __forceinline__ void softmax(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                          const Rows& r) const {
    ltx_cuda_sm90::softmax<BN, kMagic>(s, m, l, alpha, r.f);
  }
};

// The 8-bit attention: three consumer warpgroups, 128-token tiles (a k scale's), STAGES-deep ring.
template <int STAGES, Schedule SCHED = Schedule::kSerial>
const char* launch_attention_int8(void* out, const void* q8, const void* k8, const void* v, void* v16,
                                  const float* q_scale, const float* k_scale, int64_t batch, int64_t tokens,
                                  int64_t heads, cudaStream_t stream) {
  return launch_with<Int8Scores, 3, 128, STAGES, SCHED>(Int8Scores{{}, q_scale, k_scale}, out, q8, k8, v, v16, batch,
                                                        tokens, heads, stream);
}

}  // namespace ltx_cuda_sm90
