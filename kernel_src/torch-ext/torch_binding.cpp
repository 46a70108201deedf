// torch_binding.cpp: the ltx_kernels ops as a TORCH_LIBRARY (functional schemas that return new
// tensors), argument checks a user can act on, and the CPU or CUDA implementation that hands raw
// pointers to ltx_cpu / ltx_cuda. The only file of the kernel that includes torch. The build
// defines TORCH_EXTENSION_NAME (the unique ops namespace) and exactly one of CPU_KERNEL /
// CUDA_KERNEL.
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#if defined(CPU_KERNEL)
#include <ATen/Parallel.h>

#include "ltx_cpu.h"
#elif defined(CUDA_KERNEL)
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "ltx_cuda.h"
#endif

// TORCH_LIBRARY pastes and stringifies its namespace argument, so expand TORCH_EXTENSION_NAME to
// the id first.
#define LTX_CONCAT_(a, b) a##b
#define LTX_CONCAT(a, b) LTX_CONCAT_(a, b)
#define LTX_STRINGIFY_(x) #x
#define LTX_STRINGIFY(x) LTX_STRINGIFY_(x)
#define LTX_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define LTX_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)

namespace {

// ---------------------------------------------------------------------------------------------
// Argument checks, shared by both backends. Every message starts with the public function name.

bool dtype_supported(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
    case at::kHalf:
    case at::kBFloat16:
      return true;
#if defined(CPU_KERNEL)
    case at::kDouble:
      return true;  // CPU only, for gradcheck
#endif
    default:
      return false;
  }
}

// The main input: a supported dtype, rows contiguous in memory, at least one dimension.
void check_input(const char* op, const at::Tensor& x, const char* name) {
  TORCH_CHECK(x.dim() >= 1, "ltx_kernels.", op, ": ", name,
              " must have at least one dimension (the hidden size), got a 0-d tensor");
  TORCH_CHECK(dtype_supported(x.scalar_type()), "ltx_kernels.", op, ": ", name, " has dtype ",
              x.scalar_type(),
#if defined(CPU_KERNEL)
              "; supported are float32, float16, bfloat16 (and float64 on CPU)"
#else
              "; supported are float32, float16 and bfloat16"
#endif
  );
  TORCH_CHECK(x.is_contiguous(), "ltx_kernels.", op, ": ", name,
              " must be contiguous (got shape ", x.sizes(), " with strides ", x.strides(),
              "); pass ", name, ".contiguous()");
}

// t must live where x (named x_name in the op's signature) lives.
void check_device(const char* op, const at::Tensor& x, const at::Tensor& t, const char* name,
                  const char* x_name = "x") {
  TORCH_CHECK(t.device() == x.device(), "ltx_kernels.", op, ": ", name, " is on ", t.device(),
              " but ", x_name, " is on ", x.device(), "; move all arguments to the same device");
}

void check_same_dtype(const char* op, const at::Tensor& x, const at::Tensor& t, const char* name,
                      const char* x_name = "x") {
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), "ltx_kernels.", op, ": ", name, " has dtype ",
              t.scalar_type(), " but ", x_name, " has ", x.scalar_type(), "; pass ", name, ".to(",
              x_name, ".dtype)");
}

// A [D] weight: same device and dtype as x, contiguous.
void check_weight(const char* op, const at::Tensor& x, const at::Tensor& w, const char* name,
                  const char* x_name = "x") {
  check_device(op, x, w, name, x_name);
  check_same_dtype(op, x, w, name, x_name);
  const int64_t dim = x.size(-1);
  TORCH_CHECK(w.dim() == 1 && w.size(0) == dim, "ltx_kernels.", op, ": ", name, " has shape ",
              w.sizes(), " but must be [", dim, "] (the last dimension of ", x_name, ")");
  TORCH_CHECK(w.is_contiguous(), "ltx_kernels.", op, ": ", name,
              " must be contiguous; pass ", name, ".contiguous()");
}

// A [B,S,D] tensor for the ops that modulate per batch or per token.
void check_bsd(const char* op, const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 3, "ltx_kernels.", op, ": x must be [batch, tokens, hidden], got shape ",
              x.sizes());
}

// How row r = b * tokens + s of x finds its row of a modulation/gate tensor.
struct RowStrides {
  int64_t batch;
  int64_t token;
};

// A modulation or gate tensor: [B,1,D], [B,S,D] (or [1,1,D], [1,S,D]) with any batch/token strides.
// Read in place when the last dim has stride 1 (else copied, see below); size-1 dims broadcast.
void check_broadcast_rows(const char* op, const at::Tensor& x, const at::Tensor& t,
                          const char* name) {
  check_device(op, x, t, name);
  check_same_dtype(op, x, t, name);
  const bool ok = t.dim() == 3 && (t.size(0) == 1 || t.size(0) == x.size(0)) &&
                  (t.size(1) == 1 || t.size(1) == x.size(1)) && t.size(2) == x.size(2);
  TORCH_CHECK(ok, "ltx_kernels.", op, ": ", name, " has shape ", t.sizes(), " but x is ",
              x.sizes(), "; ", name, " must be [B,1,D] (one row per batch) or [B,S,D] (per token)");
}

RowStrides row_strides(const at::Tensor& t) {
  return {t.size(0) == 1 ? 0 : t.stride(0), t.size(1) == 1 ? 0 : t.stride(1)};
}

// Last-dim stride 1 (or a single column): rows can be read in place.
bool rows_readable(const at::Tensor& t) { return t.size(2) == 1 || t.stride(2) == 1; }

// scale and shift are read with one pair of strides: keep views when they agree, else copy both to
// the same contiguous layout.
std::tuple<at::Tensor, at::Tensor, RowStrides> modulation_rows(const at::Tensor& scale,
                                                               const at::Tensor& shift) {
  if (rows_readable(scale) && rows_readable(shift) && scale.sizes() == shift.sizes()) {
    const RowStrides a = row_strides(scale);
    const RowStrides b = row_strides(shift);
    if (a.batch == b.batch && a.token == b.token) return {scale, shift, a};
  }
  const auto shape = at::infer_size(scale.sizes(), shift.sizes());
  at::Tensor sc = scale.expand(shape).contiguous();
  at::Tensor sh = shift.expand(shape).contiguous();
  return {sc, sh, row_strides(sc)};
}

at::Tensor readable_rows(const at::Tensor& t) { return rows_readable(t) ? t : t.contiguous(); }

// RoPE inputs: q and k alike, even hidden size, fp32 contiguous cos/sin of q's shape.
// q and k of the RoPE ops: one shape, dtype and device, contiguous, an even hidden size.
void check_qk(const char* op, const at::Tensor& q, const at::Tensor& k) {
  check_input(op, q, "q");
  check_input(op, k, "k");
  check_device(op, q, k, "k", "q");
  check_same_dtype(op, q, k, "k", "q");
  TORCH_CHECK(k.sizes() == q.sizes(), "ltx_kernels.", op, ": q has shape ", q.sizes(),
              " but k has ", k.sizes(), "; q and k must have the same shape");
  TORCH_CHECK(q.size(-1) % 2 == 0, "ltx_kernels.", op,
              ": the hidden size (last dimension) must be even for interleaved RoPE pairs, got ",
              q.size(-1));
}

// An fp32 tensor of the given shape on q's device, contiguous.
void check_float_table(const char* op, const at::Tensor& q, const at::Tensor& t, const char* name,
                       at::IntArrayRef shape, const char* what) {
  check_device(op, q, t, name, "q");
  TORCH_CHECK(t.scalar_type() == at::kFloat, "ltx_kernels.", op, ": ", name, " has dtype ",
              t.scalar_type(), " but ", what, " are float32; pass ", name, ".float()");
  TORCH_CHECK(t.sizes() == shape, "ltx_kernels.", op, ": ", name, " has shape ", t.sizes(),
              " but must be ", shape, " (", what, " for q of shape ", q.sizes(), ")");
  TORCH_CHECK(t.is_contiguous(), "ltx_kernels.", op, ": ", name, " must be contiguous; pass ",
              name, ".contiguous()");
}

void check_rope(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                const at::Tensor& sin) {
  check_qk(op, q, k);
  check_float_table(op, q, cos, "cos", q.sizes(), "RoPE tables");
  check_float_table(op, q, sin, "sin", q.sizes(), "RoPE tables");
}

// Per-op argument checks: both backends run the same ones before any work.
void check_rms_norm(const at::Tensor& x, const std::optional<at::Tensor>& weight) {
  check_input("rms_norm", x, "x");
  if (weight) check_weight("rms_norm", x, *weight, "weight");
}

void check_rms_norm_modulate(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                             const std::optional<at::Tensor>& weight) {
  constexpr const char* op = "rms_norm_modulate";
  check_input(op, x, "x");
  check_bsd(op, x);
  check_broadcast_rows(op, x, scale, "scale");
  check_broadcast_rows(op, x, shift, "shift");
  if (weight) check_weight(op, x, *weight, "weight");
}

// The residual branch y of `x + y (* gate)`: x's device, dtype and shape, contiguous.
void check_residual(const char* op, const at::Tensor& x, const at::Tensor& y) {
  check_device(op, x, y, "y");
  check_same_dtype(op, x, y, "y");
  TORCH_CHECK(y.sizes() == x.sizes(), "ltx_kernels.", op, ": y has shape ", y.sizes(),
              " but x is ", x.sizes(), "; x and y must have the same shape");
  check_input(op, y, "y");
}

void check_gated_residual(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gate) {
  constexpr const char* op = "gated_residual";
  check_input(op, x, "x");
  check_bsd(op, x);
  check_residual(op, x, y);
  check_broadcast_rows(op, x, gate, "gate");
}

void check_add_rms_norm_modulate(const at::Tensor& x, const at::Tensor& y, const at::Tensor& scale,
                                 const at::Tensor& shift, const std::optional<at::Tensor>& gate,
                                 const std::optional<at::Tensor>& weight) {
  constexpr const char* op = "add_rms_norm_modulate";
  check_input(op, x, "x");
  check_bsd(op, x);
  check_residual(op, x, y);
  check_broadcast_rows(op, x, scale, "scale");
  check_broadcast_rows(op, x, shift, "shift");
  if (gate) check_broadcast_rows(op, x, *gate, "gate");
  if (weight) check_weight(op, x, *weight, "weight");
}

void check_qk_rms_norm_rope(const at::Tensor& q, const at::Tensor& k, const at::Tensor& weight_q,
                            const at::Tensor& weight_k, const at::Tensor& cos, const at::Tensor& sin) {
  constexpr const char* op = "qk_rms_norm_rope";
  check_rope(op, q, k, cos, sin);
  check_weight(op, q, weight_q, "weight_q", "q");
  check_weight(op, q, weight_k, "weight_k", "q");
}

void check_qk_rms_norm_rope_grid(const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& weight_q, const at::Tensor& weight_k,
                                 const at::Tensor& pos, const at::Tensor& freqs) {
  constexpr const char* op = "qk_rms_norm_rope_grid";
  check_qk(op, q, k);
  check_weight(op, q, weight_q, "weight_q", "q");
  check_weight(op, q, weight_k, "weight_k", "q");
  std::vector<int64_t> pos_shape(q.sizes().begin(), q.sizes().end());
  pos_shape.back() = 3;
  check_float_table(op, q, pos, "pos", pos_shape, "positions (frame, height, width per token)");
  check_float_table(op, q, freqs, "freqs", {q.size(-1) / 6}, "RoPE frequencies (hidden size / 6)");
}

int64_t rows_of(const at::Tensor& x) {
  const int64_t dim = x.size(-1);
  return dim == 0 ? 0 : x.numel() / dim;
}

const void* optional_ptr(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->data_ptr() : nullptr;
}

#if defined(CPU_KERNEL)
// ---------------------------------------------------------------------------------------------
// CPU: split rows across torch's intra-op threads, at least ~32k elements per task.

ltx_cpu::DType cpu_dtype(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return ltx_cpu::DType::F16;
    case at::kBFloat16: return ltx_cpu::DType::BF16;
    case at::kDouble: return ltx_cpu::DType::F64;
    default: return ltx_cpu::DType::F32;
  }
}

constexpr int64_t kElementsPerTask = 32768;

template <typename Fn>
void for_rows(int64_t rows, int64_t dim, const Fn& fn) {
  const int64_t grain = std::max<int64_t>(1, kElementsPerTask / std::max<int64_t>(dim, 1));
  at::parallel_for(0, rows, grain, fn);
}

at::Tensor rms_norm_cpu(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps) {
  check_rms_norm(x, weight);
  at::Tensor out = at::empty_like(x);
  const int64_t dim = x.size(-1);
  const auto dtype = cpu_dtype(x.scalar_type());
  for_rows(rows_of(x), dim, [&](int64_t begin, int64_t end) {
    ltx_cpu::rms_norm(out.data_ptr(), x.data_ptr(), optional_ptr(weight), begin, end, dim, eps,
                      dtype);
  });
  return out;
}

at::Tensor rms_norm_modulate_cpu(const at::Tensor& x, const at::Tensor& scale,
                                 const at::Tensor& shift, const std::optional<at::Tensor>& weight,
                                 double eps) {
  check_rms_norm_modulate(x, scale, shift, weight);
  const auto [sc, sh, strides] = modulation_rows(scale, shift);
  at::Tensor out = at::empty_like(x);
  const int64_t dim = x.size(2);
  const int64_t tokens = x.size(1);
  const auto dtype = cpu_dtype(x.scalar_type());
  for_rows(rows_of(x), dim, [&](int64_t begin, int64_t end) {
    ltx_cpu::rms_norm_modulate(out.data_ptr(), x.data_ptr(), sc.data_ptr(), sh.data_ptr(),
                               optional_ptr(weight), begin, end, tokens, dim, strides.batch,
                               strides.token, eps, dtype);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm_modulate_cpu(
    const at::Tensor& x, const at::Tensor& y, const at::Tensor& scale, const at::Tensor& shift,
    const std::optional<at::Tensor>& gate, const std::optional<at::Tensor>& weight, double eps) {
  check_add_rms_norm_modulate(x, y, scale, shift, gate, weight);
  const auto [sc, sh, mod] = modulation_rows(scale, shift);
  const std::optional<at::Tensor> g = gate ? std::optional(readable_rows(*gate)) : std::nullopt;
  const RowStrides gs = g ? row_strides(*g) : RowStrides{0, 0};
  at::Tensor h = at::empty_like(x);
  at::Tensor out = at::empty_like(x);
  const int64_t dim = x.size(2);
  const int64_t tokens = x.size(1);
  const auto dtype = cpu_dtype(x.scalar_type());
  for_rows(rows_of(x), 2 * dim, [&](int64_t begin, int64_t end) {
    ltx_cpu::add_rms_norm_modulate(h.data_ptr(), out.data_ptr(), x.data_ptr(), y.data_ptr(),
                                   sc.data_ptr(), sh.data_ptr(), optional_ptr(g),
                                   optional_ptr(weight), begin, end, tokens, dim, mod.batch,
                                   mod.token, gs.batch, gs.token, eps, dtype);
  });
  return {h, out};
}

std::tuple<at::Tensor, at::Tensor> rope_interleaved_qk_cpu(const at::Tensor& q,
                                                           const at::Tensor& k,
                                                           const at::Tensor& cos,
                                                           const at::Tensor& sin) {
  check_rope("rope_interleaved_qk", q, k, cos, sin);
  at::Tensor q_out = at::empty_like(q);
  at::Tensor k_out = at::empty_like(k);
  const int64_t dim = q.size(-1);
  const auto dtype = cpu_dtype(q.scalar_type());
  const float* c = cos.const_data_ptr<float>();
  const float* s = sin.const_data_ptr<float>();
  for_rows(rows_of(q), 2 * dim, [&](int64_t begin, int64_t end) {
    ltx_cpu::rope_interleaved_qk(q_out.data_ptr(), k_out.data_ptr(), q.data_ptr(), k.data_ptr(), c,
                                 s, begin, end, dim, dtype);
  });
  return {q_out, k_out};
}

at::Tensor gelu_tanh_cpu(const at::Tensor& x) {
  check_input("gelu_tanh", x, "x");
  at::Tensor out = at::empty_like(x);
  const auto dtype = cpu_dtype(x.scalar_type());
  at::parallel_for(0, x.numel(), kElementsPerTask, [&](int64_t begin, int64_t end) {
    ltx_cpu::gelu_tanh(out.data_ptr(), x.data_ptr(), begin, end, dtype);
  });
  return out;
}

at::Tensor gated_residual_cpu(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gate) {
  check_gated_residual(x, y, gate);
  const at::Tensor g = readable_rows(gate);
  const RowStrides strides = row_strides(g);
  at::Tensor out = at::empty_like(x);
  const int64_t dim = x.size(2);
  const int64_t tokens = x.size(1);
  const auto dtype = cpu_dtype(x.scalar_type());
  for_rows(rows_of(x), dim, [&](int64_t begin, int64_t end) {
    ltx_cpu::gated_residual(out.data_ptr(), x.data_ptr(), y.data_ptr(), g.data_ptr(), begin, end,
                            tokens, dim, strides.batch, strides.token, dtype);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> qk_rms_norm_rope_cpu(const at::Tensor& q, const at::Tensor& k,
                                                        const at::Tensor& weight_q,
                                                        const at::Tensor& weight_k,
                                                        const at::Tensor& cos,
                                                        const at::Tensor& sin, double eps) {
  check_qk_rms_norm_rope(q, k, weight_q, weight_k, cos, sin);
  at::Tensor q_out = at::empty_like(q);
  at::Tensor k_out = at::empty_like(k);
  const int64_t dim = q.size(-1);
  const auto dtype = cpu_dtype(q.scalar_type());
  const float* c = cos.const_data_ptr<float>();
  const float* s = sin.const_data_ptr<float>();
  for_rows(rows_of(q), 2 * dim, [&](int64_t begin, int64_t end) {
    ltx_cpu::qk_rms_norm_rope(q_out.data_ptr(), k_out.data_ptr(), q.data_ptr(), k.data_ptr(),
                              weight_q.data_ptr(), weight_k.data_ptr(), c, s, begin, end, dim, eps,
                              dtype);
  });
  return {q_out, k_out};
}

std::tuple<at::Tensor, at::Tensor> qk_rms_norm_rope_grid_cpu(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& weight_q,
    const at::Tensor& weight_k, const at::Tensor& pos, const at::Tensor& freqs, double eps) {
  check_qk_rms_norm_rope_grid(q, k, weight_q, weight_k, pos, freqs);
  at::Tensor q_out = at::empty_like(q);
  at::Tensor k_out = at::empty_like(k);
  const int64_t dim = q.size(-1);
  const auto dtype = cpu_dtype(q.scalar_type());
  const float* p = pos.const_data_ptr<float>();
  const float* f = freqs.const_data_ptr<float>();
  for_rows(rows_of(q), 2 * dim, [&](int64_t begin, int64_t end) {
    ltx_cpu::qk_rms_norm_rope_grid(q_out.data_ptr(), k_out.data_ptr(), q.data_ptr(), k.data_ptr(),
                                   weight_q.data_ptr(), weight_k.data_ptr(), p, f, begin, end, dim,
                                   eps, dtype);
  });
  return {q_out, k_out};
}

#elif defined(CUDA_KERNEL)
// ---------------------------------------------------------------------------------------------
// CUDA: one launch per op on the current stream of x's device; nothing to do for empty inputs.

ltx_cuda::DType cuda_dtype(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return ltx_cuda::DType::F16;
    case at::kBFloat16: return ltx_cuda::DType::BF16;
    default: return ltx_cuda::DType::F32;
  }
}

at::Tensor rms_norm_cuda(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps) {
  check_rms_norm(x, weight);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty_like(x);
  if (out.numel() == 0) return out;
  ltx_cuda::rms_norm(out.data_ptr(), x.data_ptr(), optional_ptr(weight), rows_of(x), x.size(-1),
                     static_cast<float>(eps), cuda_dtype(x.scalar_type()),
                     c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor rms_norm_modulate_cuda(const at::Tensor& x, const at::Tensor& scale,
                                  const at::Tensor& shift, const std::optional<at::Tensor>& weight,
                                  double eps) {
  check_rms_norm_modulate(x, scale, shift, weight);
  const c10::cuda::CUDAGuard guard(x.device());
  const auto [sc, sh, strides] = modulation_rows(scale, shift);
  at::Tensor out = at::empty_like(x);
  if (out.numel() == 0) return out;
  ltx_cuda::rms_norm_modulate(out.data_ptr(), x.data_ptr(), sc.data_ptr(), sh.data_ptr(),
                              optional_ptr(weight), rows_of(x), x.size(1), x.size(2),
                              strides.batch, strides.token, static_cast<float>(eps),
                              cuda_dtype(x.scalar_type()), c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm_modulate_cuda(
    const at::Tensor& x, const at::Tensor& y, const at::Tensor& scale, const at::Tensor& shift,
    const std::optional<at::Tensor>& gate, const std::optional<at::Tensor>& weight, double eps) {
  check_add_rms_norm_modulate(x, y, scale, shift, gate, weight);
  const c10::cuda::CUDAGuard guard(x.device());
  const auto [sc, sh, mod] = modulation_rows(scale, shift);
  const std::optional<at::Tensor> g = gate ? std::optional(readable_rows(*gate)) : std::nullopt;
  const RowStrides gs = g ? row_strides(*g) : RowStrides{0, 0};
  at::Tensor h = at::empty_like(x);
  at::Tensor out = at::empty_like(x);
  if (x.numel() == 0) return {h, out};
  ltx_cuda::add_rms_norm_modulate(h.data_ptr(), out.data_ptr(), x.data_ptr(), y.data_ptr(),
                                  sc.data_ptr(), sh.data_ptr(), optional_ptr(g),
                                  optional_ptr(weight), rows_of(x), x.size(1), x.size(2), mod.batch,
                                  mod.token, gs.batch, gs.token, static_cast<float>(eps),
                                  cuda_dtype(x.scalar_type()), c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {h, out};
}

std::tuple<at::Tensor, at::Tensor> rope_interleaved_qk_cuda(const at::Tensor& q,
                                                            const at::Tensor& k,
                                                            const at::Tensor& cos,
                                                            const at::Tensor& sin) {
  check_rope("rope_interleaved_qk", q, k, cos, sin);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor q_out = at::empty_like(q);
  at::Tensor k_out = at::empty_like(k);
  if (q.numel() == 0) return {q_out, k_out};
  ltx_cuda::rope_interleaved_qk(q_out.data_ptr(), k_out.data_ptr(), q.data_ptr(), k.data_ptr(),
                                cos.const_data_ptr<float>(), sin.const_data_ptr<float>(),
                                rows_of(q), q.size(-1), cuda_dtype(q.scalar_type()),
                                c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {q_out, k_out};
}

at::Tensor gelu_tanh_cuda(const at::Tensor& x) {
  check_input("gelu_tanh", x, "x");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty_like(x);
  if (out.numel() == 0) return out;
  ltx_cuda::gelu_tanh(out.data_ptr(), x.data_ptr(), x.numel(), cuda_dtype(x.scalar_type()),
                      c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor gated_residual_cuda(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gate) {
  check_gated_residual(x, y, gate);
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor g = readable_rows(gate);
  const RowStrides strides = row_strides(g);
  at::Tensor out = at::empty_like(x);
  if (out.numel() == 0) return out;
  ltx_cuda::gated_residual(out.data_ptr(), x.data_ptr(), y.data_ptr(), g.data_ptr(), rows_of(x),
                           x.size(1), x.size(2), strides.batch, strides.token,
                           cuda_dtype(x.scalar_type()), c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::tuple<at::Tensor, at::Tensor> qk_rms_norm_rope_cuda(const at::Tensor& q, const at::Tensor& k,
                                                         const at::Tensor& weight_q,
                                                         const at::Tensor& weight_k,
                                                         const at::Tensor& cos,
                                                         const at::Tensor& sin, double eps) {
  check_qk_rms_norm_rope(q, k, weight_q, weight_k, cos, sin);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor q_out = at::empty_like(q);
  at::Tensor k_out = at::empty_like(k);
  if (q.numel() == 0) return {q_out, k_out};
  ltx_cuda::qk_rms_norm_rope(q_out.data_ptr(), k_out.data_ptr(), q.data_ptr(), k.data_ptr(),
                             weight_q.data_ptr(), weight_k.data_ptr(), cos.const_data_ptr<float>(),
                             sin.const_data_ptr<float>(), rows_of(q), q.size(-1),
                             static_cast<float>(eps), cuda_dtype(q.scalar_type()),
                             c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {q_out, k_out};
}

std::tuple<at::Tensor, at::Tensor> qk_rms_norm_rope_grid_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& weight_q,
    const at::Tensor& weight_k, const at::Tensor& pos, const at::Tensor& freqs, double eps) {
  check_qk_rms_norm_rope_grid(q, k, weight_q, weight_k, pos, freqs);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor q_out = at::empty_like(q);
  at::Tensor k_out = at::empty_like(k);
  if (q.numel() == 0) return {q_out, k_out};
  ltx_cuda::qk_rms_norm_rope_grid(q_out.data_ptr(), k_out.data_ptr(), q.data_ptr(), k.data_ptr(),
                                  weight_q.data_ptr(), weight_k.data_ptr(),
                                  pos.const_data_ptr<float>(), freqs.const_data_ptr<float>(),
                                  rows_of(q), q.size(-1), static_cast<float>(eps),
                                  cuda_dtype(q.scalar_type()), c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {q_out, k_out};
}
#endif

}  // namespace

// ---------------------------------------------------------------------------------------------
// Schemas (functional: every op returns new tensors) and the implementation for this build.

LTX_LIBRARY(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm(Tensor x, Tensor? weight, float eps) -> Tensor");
  m.def(
      "rms_norm_modulate(Tensor x, Tensor scale, Tensor shift, Tensor? weight, float eps) -> "
      "Tensor");
  m.def(
      "add_rms_norm_modulate(Tensor x, Tensor y, Tensor scale, Tensor shift, Tensor? gate, "
      "Tensor? weight, float eps) -> (Tensor, Tensor)");
  m.def("rope_interleaved_qk(Tensor q, Tensor k, Tensor cos, Tensor sin) -> (Tensor, Tensor)");
  m.def("gelu_tanh(Tensor x) -> Tensor");
  m.def("gated_residual(Tensor x, Tensor y, Tensor gate) -> Tensor");
  m.def(
      "qk_rms_norm_rope(Tensor q, Tensor k, Tensor weight_q, Tensor weight_k, Tensor cos, "
      "Tensor sin, float eps) -> (Tensor, Tensor)");
  m.def(
      "qk_rms_norm_rope_grid(Tensor q, Tensor k, Tensor weight_q, Tensor weight_k, Tensor pos, "
      "Tensor freqs, float eps) -> (Tensor, Tensor)");
}

#if defined(CPU_KERNEL)
LTX_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CPU, m) {
  m.impl("rms_norm", &rms_norm_cpu);
  m.impl("rms_norm_modulate", &rms_norm_modulate_cpu);
  m.impl("add_rms_norm_modulate", &add_rms_norm_modulate_cpu);
  m.impl("rope_interleaved_qk", &rope_interleaved_qk_cpu);
  m.impl("gelu_tanh", &gelu_tanh_cpu);
  m.impl("gated_residual", &gated_residual_cpu);
  m.impl("qk_rms_norm_rope", &qk_rms_norm_rope_cpu);
  m.impl("qk_rms_norm_rope_grid", &qk_rms_norm_rope_grid_cpu);
}
#elif defined(CUDA_KERNEL)
LTX_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("rms_norm", &rms_norm_cuda);
  m.impl("rms_norm_modulate", &rms_norm_modulate_cuda);
  m.impl("add_rms_norm_modulate", &add_rms_norm_modulate_cuda);
  m.impl("rope_interleaved_qk", &rope_interleaved_qk_cuda);
  m.impl("gelu_tanh", &gelu_tanh_cuda);
  m.impl("gated_residual", &gated_residual_cuda);
  m.impl("qk_rms_norm_rope", &qk_rms_norm_rope_cuda);
  m.impl("qk_rms_norm_rope_grid", &qk_rms_norm_rope_grid_cuda);
}
#endif

// An empty Python module, so `from . import <id>` loads this library (and runs the registrations
// above) through the limited C API: no pybind11, one .abi3.so for every CPython >= 3.9.
PyMODINIT_FUNC LTX_CONCAT(PyInit_, TORCH_EXTENSION_NAME)(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, LTX_STRINGIFY(TORCH_EXTENSION_NAME), nullptr,
                               0, nullptr};
  return PyModule_Create(&module);
}
