// The Q fold's entry points for qfold.py: the shipped pipeline (the grid op, then the attention) and the fold
// (k_rope_q_rms, then the attention that normalises and rotates Q itself), behind C functions for ctypes.
#include <cstdio>

#include "qk_rms_norm_rope_grid.cu"  // kernel_src/ltx_cuda
#include "qfold.cuh"                 // and kernel_src/ltx_cuda_sm90

namespace {

int done(const char* why) {
  if (why) {
    std::fprintf(stderr, "%s\n", why);
    return 1;
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

}  // namespace

extern "C" int ltx_grid_prologue(void* q_out, void* k_out, const void* q, const void* k, const void* wq,
                                 const void* wk, const float* pos, const float* freqs, long rows, long dim,
                                 float eps, void* stream) {
  ltx_cuda::qk_rms_norm_rope_grid(q_out, k_out, q, k, wq, wk, pos, freqs, rows, dim, eps, ltx_cuda::DType::BF16,
                                  static_cast<cudaStream_t>(stream));
  return done(nullptr);
}

extern "C" int ltx_attn(void* o, const void* q, const void* k, const void* v, void* v16, int B, int S, int H,
                        float scale, void* stream) {
  using ltx_cuda_sm90::Schedule;
  return done(ltx_cuda_sm90::launch_attention<3, 128, 3, Schedule::kOverlapOrdered>(
      o, q, k, v, v16, B, S, H, scale, static_cast<cudaStream_t>(stream)));
}

extern "C" int ltx_qfold_prologue(void* k_out, float* q_inv_rms, const void* q, const void* k, const void* wq,
                                  const void* wk, const float* pos, const float* freqs, long rows, long dim,
                                  float eps, void* stream) {
  ltx_cuda::qfold::k_rope_q_rms(k_out, q_inv_rms, q, k, wq, wk, pos, freqs, rows, dim, eps,
                                static_cast<cudaStream_t>(stream));
  return done(nullptr);
}

extern "C" int ltx_qfold_attn(void* o, const void* q, const void* k, const void* v, void* v16,
                              const float* inv_rms, const void* wq, const float* pos, const float* freqs, int B,
                              int S, int H, float scale, void* stream) {
  return done(ltx_cuda_sm90::launch_attention_qfold(o, q, k, v, v16, inv_rms, wq, pos, freqs, B, S, H, scale,
                                                    static_cast<cudaStream_t>(stream)));
}
