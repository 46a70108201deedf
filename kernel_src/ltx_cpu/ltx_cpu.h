// ltx_cpu.h: the LTX-Video ops on CPU. Plain C++, no ATen: raw pointers, sizes in elements.
// Each function does the rows [row_begin, row_end) (gelu_tanh: the elements [begin, end)) on the
// calling thread, so torch_binding.cpp splits the work with at::parallel_for and checks arguments.
// The signatures mirror ltx_cuda.h (a row range instead of a stream); `stream` (the elementwise and
// norm ops) asks for non-temporal stores of the outputs, as stream_outputs below decides.
//
// Layout shared by every op: x-like tensors are contiguous rows of `dim` elements. Row r is batch
// b = r / tokens, token s = r % tokens. Modulation / gate tensors are addressed as
// t[b * batch_stride + s * token_stride + i] (strides in elements, last-dim stride 1), so views such
// as `ada.unbind(2)` of a [B,T,6,D] tensor need no copy; token_stride 0 broadcasts one row per batch
// ([B,1,D]), batch_stride 0 one row for the whole batch. cos/sin are fp32, contiguous rows x dim.
// All other tensor arguments of an op share `dtype`. Arithmetic in fp32 (fp64 for F64), one rounding
// at the store.
#pragma once

#include <cstdint>

namespace ltx_cpu {

enum class DType : int { F32 = 0, F16 = 1, BF16 = 2, F64 = 3 };

// y = x * rsqrt(mean(x^2) + eps) (* weight). weight is nullable ([dim]).
void rms_norm(void* out, const void* x, const void* weight, int64_t row_begin, int64_t row_end,
              int64_t dim, double eps, DType dtype, bool stream);

// y = rms_norm(x, weight) * (1 + scale) + shift; scale and shift share one pair of strides.
void rms_norm_modulate(void* out, const void* x, const void* scale, const void* shift,
                       const void* weight, int64_t row_begin, int64_t row_end, int64_t tokens,
                       int64_t dim, int64_t mod_batch_stride, int64_t mod_token_stride, double eps,
                       DType dtype, bool stream);

// h = x + y (gate nullable: x + y * gate), rounded to dtype; out = rms_norm_modulate(h, ...) of the
// rounded h. scale and shift share one pair of strides, gate has its own. Writes h and out.
void add_rms_norm_modulate(void* h, void* out, const void* x, const void* y, const void* scale,
                           const void* shift, const void* gate, const void* weight,
                           int64_t row_begin, int64_t row_end, int64_t tokens, int64_t dim,
                           int64_t mod_batch_stride, int64_t mod_token_stride,
                           int64_t gate_batch_stride, int64_t gate_token_stride, double eps,
                           DType dtype, bool stream);

// out = x * cos + rot(x) * sin, rot(x)[2i] = -x[2i+1], rot(x)[2i+1] = x[2i], for q and k.
// dim is even.
void rope_interleaved_qk(void* q_out, void* k_out, const void* q, const void* k, const float* cos,
                         const float* sin, int64_t row_begin, int64_t row_end, int64_t dim,
                         DType dtype);

// y = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) over the elements [begin, end).
void gelu_tanh(void* out, const void* x, int64_t begin, int64_t end, DType dtype, bool stream);

// out = x + y * gate; x and y are contiguous rows, gate uses the strides.
void gated_residual(void* out, const void* x, const void* y, const void* gate, int64_t row_begin,
                    int64_t row_end, int64_t tokens, int64_t dim, int64_t gate_batch_stride,
                    int64_t gate_token_stride, DType dtype, bool stream);

// Per row: RMSNorm over the full dim with weight (torch.nn.RMSNorm), then the RoPE above, for q
// and k, without rounding in between. dim is even.
void qk_rms_norm_rope(void* q_out, void* k_out, const void* q, const void* k,
                      const void* weight_q, const void* weight_k, const float* cos,
                      const float* sin, int64_t row_begin, int64_t row_end, int64_t dim,
                      double eps, DType dtype);

// qk_rms_norm_rope with each row's cos/sin computed from pos (fp32 [rows, 3]: the token's frame,
// height and width position) and freqs (fp32 [dim / 6], pi/2 included), as diffusers' LTX RoPE
// computes its tables. dim is even.
void qk_rms_norm_rope_grid(void* q_out, void* k_out, const void* q, const void* k,
                           const void* weight_q, const void* weight_k, const float* pos,
                           const float* freqs, int64_t row_begin, int64_t row_end, int64_t dim,
                           double eps, DType dtype);

// Memory (memory.cpp). Asks for transparent huge pages under the whole 2 MiB pages of
// [p, p + bytes) when it is a fresh mapping of its own (32 MiB and more): a new output then faults
// once per 2 MiB instead of once per 4 KiB.
void prefer_huge_pages(void* p, int64_t bytes);

// Whether an op touching `bytes` (inputs + outputs) should stream its outputs: from half the
// last-level cache on, where cached stores would only evict the inputs still to be read.
bool stream_outputs(int64_t bytes);

}  // namespace ltx_cpu
