// ltx_cuda.h: launchers for the LTX-Video ops on CUDA. Plain C++ + the CUDA runtime, no ATen:
// raw pointers, sizes in elements, the stream to launch on. torch_binding.cpp checks the arguments
// and calls cudaGetLastError() after each launch; launchers return nothing and never synchronise.
//
// Layout shared by every op: x-like tensors are `rows` contiguous rows of `dim` elements. Row r is
// batch b = r / tokens, token s = r % tokens. Modulation / gate tensors are addressed as
// t[b * batch_stride + s * token_stride + i] (strides in elements, last-dim stride 1), so views such
// as `ada.unbind(2)` of a [B,T,6,D] tensor need no copy; token_stride 0 broadcasts one row per batch
// ([B,1,D]), batch_stride 0 one row for the whole batch. cos/sin are fp32, `rows` x `dim`,
// contiguous. All other tensor arguments of an op share `dtype`. Arithmetic and accumulation in fp32.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace ltx_cuda {

enum class DType : int { F32 = 0, F16 = 1, BF16 = 2 };

// y = x * rsqrt(mean(x^2) + eps) (* weight). weight is nullable ([dim]).
void rms_norm(void* out, const void* x, const void* weight, int64_t rows, int64_t dim, float eps,
              DType dtype, cudaStream_t stream);

// y = rms_norm(x, weight) * (1 + scale) + shift; scale and shift share one pair of strides.
void rms_norm_modulate(void* out, const void* x, const void* scale, const void* shift,
                       const void* weight, int64_t rows, int64_t tokens, int64_t dim,
                       int64_t mod_batch_stride, int64_t mod_token_stride, float eps, DType dtype,
                       cudaStream_t stream);

// h = x + y (gate nullable: x + y * gate), rounded to dtype; out = rms_norm_modulate(h, ...) of the
// rounded h. scale and shift share one pair of strides, gate has its own. Writes h and out.
void add_rms_norm_modulate(void* h, void* out, const void* x, const void* y, const void* scale,
                           const void* shift, const void* gate, const void* weight, int64_t rows,
                           int64_t tokens, int64_t dim, int64_t mod_batch_stride,
                           int64_t mod_token_stride, int64_t gate_batch_stride,
                           int64_t gate_token_stride, float eps, DType dtype, cudaStream_t stream);

// out = x * cos + rot(x) * sin, rot(x)[2i] = -x[2i+1], rot(x)[2i+1] = x[2i]; q and k in one launch.
// dim is even.
void rope_interleaved_qk(void* q_out, void* k_out, const void* q, const void* k, const float* cos,
                         const float* sin, int64_t rows, int64_t dim, DType dtype,
                         cudaStream_t stream);

// y = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) over n contiguous elements.
void gelu_tanh(void* out, const void* x, int64_t n, DType dtype, cudaStream_t stream);

// out = x + y * gate; x and y are contiguous rows, gate uses the strides.
void gated_residual(void* out, const void* x, const void* y, const void* gate, int64_t rows,
                    int64_t tokens, int64_t dim, int64_t gate_batch_stride,
                    int64_t gate_token_stride, DType dtype, cudaStream_t stream);

// Per row: RMSNorm over the full dim with weight (torch.nn.RMSNorm), then the RoPE above, for q
// and k in one launch and one pass over the data. dim is even.
void qk_rms_norm_rope(void* q_out, void* k_out, const void* q, const void* k,
                      const void* weight_q, const void* weight_k, const float* cos,
                      const float* sin, int64_t rows, int64_t dim, float eps, DType dtype,
                      cudaStream_t stream);

// qk_rms_norm_rope with the RoPE tables computed in the kernel: pos is fp32 [rows, 3] (each token's
// frame, height and width position, as diffusers' LTX RoPE takes them), freqs fp32 [dim / 6] (its
// per-axis frequencies, pi/2 included). dim is even.
void qk_rms_norm_rope_grid(void* q_out, void* k_out, const void* q, const void* k,
                           const void* weight_q, const void* weight_k, const float* pos,
                           const float* freqs, int64_t rows, int64_t dim, float eps, DType dtype,
                           cudaStream_t stream);

}  // namespace ltx_cuda
