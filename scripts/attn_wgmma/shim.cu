// The probe's entry point: the shipped kernel (kernel_src/ltx_cuda_sm90/attention.cuh) in several
// configurations, behind a C function that ctypes calls with torch's pointers and stream (v16: scratch of v's
// size from torch's allocator, as the binding gives the kernel).
#include <cstdio>

#include "attention.cuh"
#include "int8.cuh"

namespace {

using ltx_cuda_sm90::Schedule;

struct Variant {
  const char* name;
  const char* (*launch)(void*, const void*, const void*, const void*, void*, int64_t, int64_t, int64_t, float,
                        cudaStream_t, bool);
  bool balance = true;  // narrow CTAs in the last round (attention.cuh's Tiling); false: every item whole
};

const Variant kVariants[] = {
    {"3wg bn128 st3 overlap ordered (shipped)", ltx_cuda_sm90::launch_attention<3, 128, 3, Schedule::kOverlapOrdered>},
    {"3wg bn128 st2 (serial, shipped before)", ltx_cuda_sm90::launch_attention<3, 128, 2>},
    {"3wg bn128 st3", ltx_cuda_sm90::launch_attention<3, 128, 3>},
    {"3wg bn64 st4", ltx_cuda_sm90::launch_attention<3, 64, 4>},
    {"2wg bn128 st2", ltx_cuda_sm90::launch_attention<2, 128, 2>},
    {"3wg bn128 st2 overlap", ltx_cuda_sm90::launch_attention<3, 128, 2, Schedule::kOverlap>},
    {"3wg bn128 st2 overlap ordered", ltx_cuda_sm90::launch_attention<3, 128, 2, Schedule::kOverlapOrdered>},
    {"2wg bn128 st2 overlap ordered", ltx_cuda_sm90::launch_attention<2, 128, 2, Schedule::kOverlapOrdered>},
    {"3wg bn128 st4 overlap ordered", ltx_cuda_sm90::launch_attention<3, 128, 4, Schedule::kOverlapOrdered>},
    {"shipped, every item whole", ltx_cuda_sm90::launch_attention<3, 128, 3, Schedule::kOverlapOrdered>, false},
};

}  // namespace

extern "C" int ltx_attn_fwd(const void* q, const void* k, const void* v, void* v16, void* o, int B, int S, int H,
                            float scale, void* stream, int variant) {
  if (variant < 0 || variant >= int(sizeof(kVariants) / sizeof(kVariants[0]))) return 3;
  const Variant& var = kVariants[variant];
  if (const char* why = var.launch(o, q, k, v, v16, B, S, H, scale, static_cast<cudaStream_t>(stream), var.balance)) {
    std::fprintf(stderr, "%s\n", why);
    return 1;
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

extern "C" const char* ltx_attn_variant(int variant) {
  if (variant < 0 || variant >= int(sizeof(kVariants) / sizeof(kVariants[0]))) return nullptr;
  return kVariants[variant].name;
}

// The 8-bit draft (int8.cuh): q8, k8 int8 and their scales from ltx_reference's quantisers, v bf16; schedule 0
// is the serial one (2 stages), 1 the shipped kernel's overlapped one with turns (3 stages).
extern "C" int ltx_attn_int8_fwd(const void* q8, const void* k8, const void* v, void* v16, void* o,
                                 const float* q_scale, const float* k_scale, int B, int S, int H, void* stream,
                                 int schedule) {
  const auto launch = schedule == 1 ? ltx_cuda_sm90::launch_attention_int8<3, Schedule::kOverlapOrdered>
                                    : ltx_cuda_sm90::launch_attention_int8<2>;
  if (const char* why = launch(o, q8, k8, v, v16, q_scale, k_scale, B, S, H, static_cast<cudaStream_t>(stream))) {
    std::fprintf(stderr, "%s\n", why);
    return 1;
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
