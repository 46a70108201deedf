// torch_binding.cpp: the ltx_kernels ops on torch's stable ABI (STABLE_TORCH_LIBRARY), so one
// binary serves every torch from the build's TORCH_TARGET_VERSION on. Functional schemas (every op
// returns new tensors), argument checks a user can act on, contiguous copies of strided inputs, and
// one wrapper per op that hands raw pointers to ltx_cpu or ltx_cuda. The only file of the kernel
// that includes torch. The build defines TORCH_EXTENSION_NAME (the unique ops namespace) and
// exactly one of CPU_KERNEL / CUDA_KERNEL.
#if defined(CUDA_KERNEL) && !defined(USE_CUDA)
#define USE_CUDA 1  // the CUDA parts of torch's C shim (current stream, launch check)
#endif

#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#if defined(CPU_KERNEL)
#include "ltx_cpu.h"
#elif defined(CUDA_KERNEL)
#include <cuda_runtime.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/macros.h>

#include "ltx_cuda.h"
#include "ltx_cuda_sm90.h"
#endif

// STABLE_TORCH_LIBRARY pastes and stringifies its namespace argument, so expand
// TORCH_EXTENSION_NAME to the id first.
#define LTX_CONCAT_(a, b) a##b
#define LTX_CONCAT(a, b) LTX_CONCAT_(a, b)
#define LTX_STRINGIFY_(x) #x
#define LTX_STRINGIFY(x) LTX_STRINGIFY_(x)
#define LTX_LIBRARY(ns, m) STABLE_TORCH_LIBRARY(ns, m)
#define LTX_LIBRARY_IMPL(ns, key, m) STABLE_TORCH_LIBRARY_IMPL(ns, key, m)

namespace {

using torch::stable::Tensor;
using torch::headeronly::ScalarType;
using Shape = std::vector<int64_t>;

#if defined(CPU_KERNEL)
namespace native = ltx_cpu;
#elif defined(CUDA_KERNEL)
namespace native = ltx_cuda;
#endif

// ---------------------------------------------------------------------------------------------
// Messages: the words torch's Python side uses (torch.float16, cuda:0, [2, 3, 16]).

std::string dtype_name(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return "torch.float32";
    case ScalarType::Half: return "torch.float16";
    case ScalarType::BFloat16: return "torch.bfloat16";
    case ScalarType::Double: return "torch.float64";
    case ScalarType::Int: return "torch.int32";
    case ScalarType::Long: return "torch.int64";
    case ScalarType::Short: return "torch.int16";
    case ScalarType::Char: return "torch.int8";
    case ScalarType::Byte: return "torch.uint8";
    case ScalarType::Bool: return "torch.bool";
    case ScalarType::ComplexFloat: return "torch.complex64";
    case ScalarType::ComplexDouble: return "torch.complex128";
    default: return "dtype #" + std::to_string(static_cast<int>(t));
  }
}

std::string device_name(const torch::stable::Device& d) {
  std::string name;
  switch (d.type()) {
    case torch::headeronly::DeviceType::CPU: return "cpu";
    case torch::headeronly::DeviceType::Meta: return "meta";
    case torch::headeronly::DeviceType::CUDA: name = "cuda"; break;
    default: name = "device type " + std::to_string(static_cast<int>(d.type())); break;
  }
  return d.index() >= 0 ? name + ":" + std::to_string(d.index()) : name;
}

template <typename Sizes>
std::string shape_name(const Sizes& sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

// The pieces of a message as text (no iostreams: their C++20 members need a newer libstdc++ than
// manylinux_2_28 guarantees).
std::string text(const char* s) { return s; }
std::string text(const std::string& s) { return s; }
std::string text(int64_t v) { return std::to_string(v); }

// Throws "ltx_kernels.<op>: <parts...>" (a RuntimeError in Python) unless ok.
template <typename... Parts>
void require(bool ok, const char* op, const Parts&... parts) {
  if (ok) return;
  std::string msg = std::string("ltx_kernels.") + op + ": ";
  ((msg += text(parts)), ...);
  throw std::runtime_error(msg);
}

Shape shape_of(const Tensor& t) {
  const auto s = t.sizes();
  return Shape(s.begin(), s.end());
}

int64_t last_dim(const Tensor& t) { return t.size(t.dim() - 1); }

// ---------------------------------------------------------------------------------------------
// Argument checks, shared by both backends. Every message starts with the public function name.
// Strides are never an error: inputs the kernels cannot read in place are copied (see below).

bool dtype_supported(ScalarType t) {
  switch (t) {
    case ScalarType::Float:
    case ScalarType::Half:
    case ScalarType::BFloat16:
      return true;
#if defined(CPU_KERNEL)
    case ScalarType::Double:
      return true;  // CPU only, for gradcheck
#endif
    default:
      return false;
  }
}

// A tensor argument the schema requires (Python's None arrives as an undefined tensor).
void check_given(const char* op, const Tensor& t, const char* name) {
  require(t.defined(), op, name, " is None but must be a tensor");
}

// The main input: a supported dtype, at least one dimension.
void check_input(const char* op, const Tensor& x, const char* name) {
  check_given(op, x, name);
  require(x.dim() >= 1, op, name,
          " must have at least one dimension (the hidden size), got a 0-d tensor");
  require(dtype_supported(x.scalar_type()), op, name, " has dtype ", dtype_name(x.scalar_type()),
#if defined(CPU_KERNEL)
          "; supported are float32, float16, bfloat16 (and float64 on CPU)"
#else
          "; supported are float32, float16 and bfloat16"
#endif
  );
}

// t must live where x (named x_name in the op's signature) lives.
void check_device(const char* op, const Tensor& x, const Tensor& t, const char* name,
                  const char* x_name = "x") {
  check_given(op, t, name);
  require(t.device() == x.device(), op, name, " is on ", device_name(t.device()), " but ", x_name,
          " is on ", device_name(x.device()), "; move all arguments to the same device");
}

void check_same_dtype(const char* op, const Tensor& x, const Tensor& t, const char* name,
                      const char* x_name = "x") {
  require(t.scalar_type() == x.scalar_type(), op, name, " has dtype ",
          dtype_name(t.scalar_type()), " but ", x_name, " has ", dtype_name(x.scalar_type()),
          "; pass ", name, ".to(", x_name, ".dtype)");
}

// A [D] weight: same device and dtype as x.
void check_weight(const char* op, const Tensor& x, const Tensor& w, const char* name,
                  const char* x_name = "x") {
  check_device(op, x, w, name, x_name);
  check_same_dtype(op, x, w, name, x_name);
  const int64_t dim = last_dim(x);
  require(w.dim() == 1 && w.size(0) == dim, op, name, " has shape ", shape_name(w.sizes()),
          " but must be [", dim, "] (the last dimension of ", x_name, ")");
}

// A [B,S,D] tensor for the ops that modulate per batch or per token.
void check_bsd(const char* op, const Tensor& x) {
  require(x.dim() == 3, op, "x must be [batch, tokens, hidden], got shape ",
          shape_name(x.sizes()));
}

// A modulation or gate tensor: [B,1,D], [B,S,D] (or [1,1,D], [1,S,D]) with any strides.
void check_broadcast_rows(const char* op, const Tensor& x, const Tensor& t, const char* name) {
  check_device(op, x, t, name);
  check_same_dtype(op, x, t, name);
  const bool ok = t.dim() == 3 && (t.size(0) == 1 || t.size(0) == x.size(0)) &&
                  (t.size(1) == 1 || t.size(1) == x.size(1)) && t.size(2) == x.size(2);
  require(ok, op, name, " has shape ", shape_name(t.sizes()), " but x is ", shape_name(x.sizes()),
          "; ", name, " must be [B,1,D] (one row per batch) or [B,S,D] (per token)");
}

// The residual branch y of `x + y (* gate)`: x's device, dtype and shape.
void check_residual(const char* op, const Tensor& x, const Tensor& y) {
  check_device(op, x, y, "y");
  check_same_dtype(op, x, y, "y");
  require(shape_of(y) == shape_of(x), op, "y has shape ", shape_name(y.sizes()), " but x is ",
          shape_name(x.sizes()), "; x and y must have the same shape");
  check_input(op, y, "y");
}

// q and k of the RoPE ops: one shape, dtype and device, an even hidden size.
void check_qk(const char* op, const Tensor& q, const Tensor& k) {
  check_input(op, q, "q");
  check_input(op, k, "k");
  check_device(op, q, k, "k", "q");
  check_same_dtype(op, q, k, "k", "q");
  require(shape_of(k) == shape_of(q), op, "q has shape ", shape_name(q.sizes()), " but k has ",
          shape_name(k.sizes()), "; q and k must have the same shape");
  require(last_dim(q) % 2 == 0, op,
          "the hidden size (last dimension) must be even for interleaved RoPE pairs, got ",
          last_dim(q));
}

// An fp32 tensor of the given shape on q's device.
void check_float_table(const char* op, const Tensor& q, const Tensor& t, const char* name,
                       const Shape& shape, const char* what) {
  check_device(op, q, t, name, "q");
  require(t.scalar_type() == ScalarType::Float, op, name, " has dtype ",
          dtype_name(t.scalar_type()), " but ", what, " are float32; pass ", name, ".float()");
  require(shape_of(t) == shape, op, name, " has shape ", shape_name(t.sizes()), " but must be ",
          shape_name(shape), " (", what, " for q of shape ", shape_name(q.sizes()), ")");
}

// ---------------------------------------------------------------------------------------------
// Layouts the kernels read. x-like tensors, weights and tables: contiguous (a strided view is
// copied once, as ATen's own ops do). Modulation/gate tensors: read in place through their
// batch/token strides when the last dim is contiguous (`ada.unbind(2)` views), else copied.

Tensor dense(const Tensor& t) { return t.is_contiguous() ? t : torch::stable::contiguous(t); }

std::optional<Tensor> dense(const std::optional<Tensor>& t) {
  return t ? std::optional<Tensor>(dense(*t)) : std::nullopt;
}

// How row r = b * tokens + s of x finds its row of a modulation/gate tensor.
struct RowStrides {
  int64_t batch;
  int64_t token;
};

RowStrides row_strides(const Tensor& t) {
  return {t.size(0) == 1 ? 0 : t.stride(0), t.size(1) == 1 ? 0 : t.stride(1)};
}

// Last-dim stride 1 (or a single column): rows can be read in place.
bool rows_readable(const Tensor& t) { return t.size(2) == 1 || t.stride(2) == 1; }

Tensor readable_rows(const Tensor& t) { return rows_readable(t) ? t : dense(t); }

// t broadcast to `shape` and copied into a new contiguous tensor.
Tensor broadcast_copy(const Tensor& t, const Shape& shape) {
  Tensor out = torch::stable::new_empty(t, shape);
  torch::stable::copy_(out, t);
  return out;
}

// scale and shift are read with one pair of strides: keep views when they agree, else copy both to
// the same contiguous layout.
struct Modulation {
  Tensor scale;
  Tensor shift;
  RowStrides strides;
};

Modulation modulation_rows(const Tensor& scale, const Tensor& shift) {
  if (rows_readable(scale) && rows_readable(shift) && shape_of(scale) == shape_of(shift)) {
    const RowStrides a = row_strides(scale);
    const RowStrides b = row_strides(shift);
    if (a.batch == b.batch && a.token == b.token) return {scale, shift, a};
  }
  Shape shape = shape_of(scale);
  for (int i = 0; i < 2; ++i) shape[i] = std::max(shape[i], shift.size(i));
  Tensor sc = broadcast_copy(scale, shape);
  Tensor sh = broadcast_copy(shift, shape);
  return {sc, sh, row_strides(sc)};
}

int64_t rows_of(const Tensor& x) {
  const int64_t dim = last_dim(x);
  return dim == 0 ? 0 : x.numel() / dim;
}

void* ptr(const Tensor& t) { return t.mutable_data_ptr(); }
const void* ptr(const std::optional<Tensor>& t) {
  return t.has_value() ? t->const_data_ptr() : nullptr;
}
const float* fptr(const Tensor& t) { return static_cast<const float*>(t.const_data_ptr()); }

native::DType native_dtype(const Tensor& t) {
  switch (t.scalar_type()) {
    case ScalarType::Half: return native::DType::F16;
    case ScalarType::BFloat16: return native::DType::BF16;
#if defined(CPU_KERNEL)
    case ScalarType::Double: return native::DType::F64;
#endif
    default: return native::DType::F32;
  }
}

// ---------------------------------------------------------------------------------------------
// Where an op's native call runs. CPU: rows split across torch's intra-op threads, at least ~32k
// elements per task. CUDA: x's device, its current stream, a launch check after the call.

#if defined(CPU_KERNEL)
constexpr int64_t kElementsPerTask = 32768;

class Launch {
 public:
  explicit Launch(const Tensor&) {}

  // fn(begin, end) over [0, n) in tasks of about kElementsPerTask elements (`width` per item).
  template <typename Fn>
  void split(int64_t n, int64_t width, const Fn& fn) const {
    const int64_t grain = std::max<int64_t>(1, kElementsPerTask / std::max<int64_t>(width, 1));
    torch::stable::parallel_for(0, n, grain, fn);
  }
};

int64_t bytes_of(const Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// An uninitialised output like x; a fresh mapping (32 MiB and more) on huge pages
// (ltx_cpu::prefer_huge_pages).
Tensor output_like(const Tensor& x) {
  Tensor out = torch::stable::empty_like(x);
  native::prefer_huge_pages(out.mutable_data_ptr(), bytes_of(out));
  return out;
}

// Whether an op that reads `inputs` and writes `outputs` tensors like x streams its outputs.
bool stream(const Tensor& x, int inputs, int outputs) {
  return native::stream_outputs(bytes_of(x) * (inputs + outputs));
}
#elif defined(CUDA_KERNEL)
class Launch {
 public:
  explicit Launch(const Tensor& x) : guard_(x.get_device_index()) {
    void* s = nullptr;
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(x.get_device_index(), &s));
    stream_ = static_cast<cudaStream_t>(s);
  }

  cudaStream_t stream() const { return stream_; }
  void check() const { STD_CUDA_KERNEL_LAUNCH_CHECK(); }

 private:
  torch::stable::accelerator::DeviceGuard guard_;
  cudaStream_t stream_ = nullptr;
};

Tensor output_like(const Tensor& x) { return torch::stable::empty_like(x); }
#endif

// ---------------------------------------------------------------------------------------------
// The ops: checks, layouts, outputs, then the one native call (nothing to do for empty inputs).

Tensor rms_norm(const Tensor& x_in, const std::optional<Tensor>& weight_in, double eps) {
  constexpr const char* op = "rms_norm";
  check_input(op, x_in, "x");
  if (weight_in) check_weight(op, x_in, *weight_in, "weight");
  const Launch launch(x_in);
  const Tensor x = dense(x_in);
  const std::optional<Tensor> weight = dense(weight_in);
  Tensor out = output_like(x);
  const int64_t rows = rows_of(x), dim = last_dim(x);
  if (rows == 0) return out;
#if defined(CPU_KERNEL)
  const bool streamed = stream(x, 1, 1);
  launch.split(rows, dim, [&](int64_t begin, int64_t end) {
    native::rms_norm(ptr(out), ptr(x), ptr(weight), begin, end, dim, eps, native_dtype(x),
                     streamed);
  });
#else
  native::rms_norm(ptr(out), ptr(x), ptr(weight), rows, dim, static_cast<float>(eps),
                   native_dtype(x), launch.stream());
  launch.check();
#endif
  return out;
}

Tensor rms_norm_modulate(const Tensor& x_in, const Tensor& scale, const Tensor& shift,
                         const std::optional<Tensor>& weight_in, double eps) {
  constexpr const char* op = "rms_norm_modulate";
  check_input(op, x_in, "x");
  check_bsd(op, x_in);
  check_broadcast_rows(op, x_in, scale, "scale");
  check_broadcast_rows(op, x_in, shift, "shift");
  if (weight_in) check_weight(op, x_in, *weight_in, "weight");
  const Launch launch(x_in);
  const Tensor x = dense(x_in);
  const std::optional<Tensor> weight = dense(weight_in);
  Tensor out = output_like(x);
  const int64_t rows = rows_of(x), tokens = x.size(1), dim = x.size(2);
  if (rows == 0) return out;  // before the modulation: [B,0,D] rows broadcast to nothing
  const Modulation mod = modulation_rows(scale, shift);
#if defined(CPU_KERNEL)
  const bool streamed = stream(x, 1, 1);
  launch.split(rows, dim, [&](int64_t begin, int64_t end) {
    native::rms_norm_modulate(ptr(out), ptr(x), ptr(mod.scale), ptr(mod.shift), ptr(weight), begin,
                              end, tokens, dim, mod.strides.batch, mod.strides.token, eps,
                              native_dtype(x), streamed);
  });
#else
  native::rms_norm_modulate(ptr(out), ptr(x), ptr(mod.scale), ptr(mod.shift), ptr(weight), rows,
                            tokens, dim, mod.strides.batch, mod.strides.token,
                            static_cast<float>(eps), native_dtype(x), launch.stream());
  launch.check();
#endif
  return out;
}

std::tuple<Tensor, Tensor> add_rms_norm_modulate(const Tensor& x_in, const Tensor& y_in,
                                                 const Tensor& scale, const Tensor& shift,
                                                 const std::optional<Tensor>& gate_in,
                                                 const std::optional<Tensor>& weight_in,
                                                 double eps) {
  constexpr const char* op = "add_rms_norm_modulate";
  check_input(op, x_in, "x");
  check_bsd(op, x_in);
  check_residual(op, x_in, y_in);
  check_broadcast_rows(op, x_in, scale, "scale");
  check_broadcast_rows(op, x_in, shift, "shift");
  if (gate_in) check_broadcast_rows(op, x_in, *gate_in, "gate");
  if (weight_in) check_weight(op, x_in, *weight_in, "weight");
  const Launch launch(x_in);
  const Tensor x = dense(x_in);
  const Tensor y = dense(y_in);
  const std::optional<Tensor> weight = dense(weight_in);
  Tensor h = output_like(x);
  Tensor out = output_like(x);
  const int64_t rows = rows_of(x), tokens = x.size(1), dim = x.size(2);
  if (rows == 0) return {h, out};  // before the modulation: [B,0,D] rows broadcast to nothing
  const Modulation mod = modulation_rows(scale, shift);
  const std::optional<Tensor> gate =
      gate_in ? std::optional<Tensor>(readable_rows(*gate_in)) : std::nullopt;
  const RowStrides gs = gate ? row_strides(*gate) : RowStrides{0, 0};
#if defined(CPU_KERNEL)
  const bool streamed = stream(x, 2, 2);
  launch.split(rows, 2 * dim, [&](int64_t begin, int64_t end) {
    native::add_rms_norm_modulate(ptr(h), ptr(out), ptr(x), ptr(y), ptr(mod.scale), ptr(mod.shift),
                                  ptr(gate), ptr(weight), begin, end, tokens, dim,
                                  mod.strides.batch, mod.strides.token, gs.batch, gs.token, eps,
                                  native_dtype(x), streamed);
  });
#else
  native::add_rms_norm_modulate(ptr(h), ptr(out), ptr(x), ptr(y), ptr(mod.scale), ptr(mod.shift),
                                ptr(gate), ptr(weight), rows, tokens, dim, mod.strides.batch,
                                mod.strides.token, gs.batch, gs.token, static_cast<float>(eps),
                                native_dtype(x), launch.stream());
  launch.check();
#endif
  return {h, out};
}

std::tuple<Tensor, Tensor> rope_interleaved_qk(const Tensor& q_in, const Tensor& k_in,
                                               const Tensor& cos_in, const Tensor& sin_in) {
  constexpr const char* op = "rope_interleaved_qk";
  check_qk(op, q_in, k_in);
  check_float_table(op, q_in, cos_in, "cos", shape_of(q_in), "RoPE tables");
  check_float_table(op, q_in, sin_in, "sin", shape_of(q_in), "RoPE tables");
  const Launch launch(q_in);
  const Tensor q = dense(q_in), k = dense(k_in), cos = dense(cos_in), sin = dense(sin_in);
  Tensor q_out = output_like(q);
  Tensor k_out = output_like(q);
  const int64_t rows = rows_of(q), dim = last_dim(q);
  if (rows == 0) return {q_out, k_out};
#if defined(CPU_KERNEL)
  launch.split(rows, 2 * dim, [&](int64_t begin, int64_t end) {
    native::rope_interleaved_qk(ptr(q_out), ptr(k_out), ptr(q), ptr(k), fptr(cos), fptr(sin),
                                begin, end, dim, native_dtype(q));
  });
#else
  native::rope_interleaved_qk(ptr(q_out), ptr(k_out), ptr(q), ptr(k), fptr(cos), fptr(sin), rows,
                              dim, native_dtype(q), launch.stream());
  launch.check();
#endif
  return {q_out, k_out};
}

Tensor gelu_tanh(const Tensor& x_in) {
  check_input("gelu_tanh", x_in, "x");
  const Launch launch(x_in);
  const Tensor x = dense(x_in);
  Tensor out = output_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
#if defined(CPU_KERNEL)
  const bool streamed = stream(x, 1, 1);
  launch.split(n, 1, [&](int64_t begin, int64_t end) {
    native::gelu_tanh(ptr(out), ptr(x), begin, end, native_dtype(x), streamed);
  });
#else
  native::gelu_tanh(ptr(out), ptr(x), n, native_dtype(x), launch.stream());
  launch.check();
#endif
  return out;
}

Tensor gated_residual(const Tensor& x_in, const Tensor& y_in, const Tensor& gate_in) {
  constexpr const char* op = "gated_residual";
  check_input(op, x_in, "x");
  check_bsd(op, x_in);
  check_residual(op, x_in, y_in);
  check_broadcast_rows(op, x_in, gate_in, "gate");
  const Launch launch(x_in);
  const Tensor x = dense(x_in), y = dense(y_in), gate = readable_rows(gate_in);
  const RowStrides gs = row_strides(gate);
  Tensor out = output_like(x);
  const int64_t rows = rows_of(x), tokens = x.size(1), dim = x.size(2);
  if (rows == 0) return out;
#if defined(CPU_KERNEL)
  const bool streamed = stream(x, 2, 1);
  launch.split(rows, dim, [&](int64_t begin, int64_t end) {
    native::gated_residual(ptr(out), ptr(x), ptr(y), ptr(gate), begin, end, tokens, dim, gs.batch,
                           gs.token, native_dtype(x), streamed);
  });
#else
  native::gated_residual(ptr(out), ptr(x), ptr(y), ptr(gate), rows, tokens, dim, gs.batch,
                         gs.token, native_dtype(x), launch.stream());
  launch.check();
#endif
  return out;
}

std::tuple<Tensor, Tensor> qk_rms_norm_rope(const Tensor& q_in, const Tensor& k_in,
                                            const Tensor& weight_q_in, const Tensor& weight_k_in,
                                            const Tensor& cos_in, const Tensor& sin_in,
                                            double eps) {
  constexpr const char* op = "qk_rms_norm_rope";
  check_qk(op, q_in, k_in);
  check_float_table(op, q_in, cos_in, "cos", shape_of(q_in), "RoPE tables");
  check_float_table(op, q_in, sin_in, "sin", shape_of(q_in), "RoPE tables");
  check_weight(op, q_in, weight_q_in, "weight_q", "q");
  check_weight(op, q_in, weight_k_in, "weight_k", "q");
  const Launch launch(q_in);
  const Tensor q = dense(q_in), k = dense(k_in), wq = dense(weight_q_in), wk = dense(weight_k_in);
  const Tensor cos = dense(cos_in), sin = dense(sin_in);
  Tensor q_out = output_like(q);
  Tensor k_out = output_like(q);
  const int64_t rows = rows_of(q), dim = last_dim(q);
  if (rows == 0) return {q_out, k_out};
#if defined(CPU_KERNEL)
  launch.split(rows, 2 * dim, [&](int64_t begin, int64_t end) {
    native::qk_rms_norm_rope(ptr(q_out), ptr(k_out), ptr(q), ptr(k), ptr(wq), ptr(wk), fptr(cos),
                             fptr(sin), begin, end, dim, eps, native_dtype(q));
  });
#else
  native::qk_rms_norm_rope(ptr(q_out), ptr(k_out), ptr(q), ptr(k), ptr(wq), ptr(wk), fptr(cos),
                           fptr(sin), rows, dim, static_cast<float>(eps), native_dtype(q),
                           launch.stream());
  launch.check();
#endif
  return {q_out, k_out};
}

std::tuple<Tensor, Tensor> qk_rms_norm_rope_grid(const Tensor& q_in, const Tensor& k_in,
                                                 const Tensor& weight_q_in,
                                                 const Tensor& weight_k_in, const Tensor& pos_in,
                                                 const Tensor& freqs_in, double eps) {
  constexpr const char* op = "qk_rms_norm_rope_grid";
  check_qk(op, q_in, k_in);
  check_weight(op, q_in, weight_q_in, "weight_q", "q");
  check_weight(op, q_in, weight_k_in, "weight_k", "q");
  Shape pos_shape = shape_of(q_in);
  pos_shape.back() = 3;
  check_float_table(op, q_in, pos_in, "pos", pos_shape,
                    "positions (frame, height, width per token)");
  check_float_table(op, q_in, freqs_in, "freqs", {last_dim(q_in) / 6},
                    "RoPE frequencies (hidden size / 6)");
  const Launch launch(q_in);
  const Tensor q = dense(q_in), k = dense(k_in), wq = dense(weight_q_in), wk = dense(weight_k_in);
  const Tensor pos = dense(pos_in), freqs = dense(freqs_in);
  Tensor q_out = output_like(q);
  Tensor k_out = output_like(q);
  const int64_t rows = rows_of(q), dim = last_dim(q);
  if (rows == 0) return {q_out, k_out};
#if defined(CPU_KERNEL)
  launch.split(rows, 2 * dim, [&](int64_t begin, int64_t end) {
    native::qk_rms_norm_rope_grid(ptr(q_out), ptr(k_out), ptr(q), ptr(k), ptr(wq), ptr(wk),
                                  fptr(pos), fptr(freqs), begin, end, dim, eps, native_dtype(q));
  });
#else
  native::qk_rms_norm_rope_grid(ptr(q_out), ptr(k_out), ptr(q), ptr(k), ptr(wq), ptr(wk),
                                fptr(pos), fptr(freqs), rows, dim, static_cast<float>(eps),
                                native_dtype(q), launch.stream());
  launch.check();
#endif
  return {q_out, k_out};
}

#if defined(CUDA_KERNEL)
// Self-attention over [B, S, H, 64] bf16 q, k, v on an sm_90 GPU: the kernel is built for sm_90a only, so
// ltx_kernels.attention checks the device first and calls torch's SDPA elsewhere.
Tensor attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, double scale) {
  constexpr const char* op = "attention";
  check_input(op, q_in, "q");
  require(q_in.dim() == 4 && q_in.size(3) == 64, op,
          "q must be [batch, tokens, heads, 64] (the head dimension is 64), got shape ",
          shape_name(q_in.sizes()));
  require(q_in.scalar_type() == ScalarType::BFloat16, op, "q has dtype ", dtype_name(q_in.scalar_type()),
          "; the kernel takes bfloat16 (torch.nn.functional.scaled_dot_product_attention takes the others)");
  const auto like_q = [&](const Tensor& t, const char* name) {
    check_device(op, q_in, t, name, "q");
    check_same_dtype(op, q_in, t, name, "q");
    require(shape_of(t) == shape_of(q_in), op, name, " has shape ", shape_name(t.sizes()), " but q has ",
            shape_name(q_in.sizes()), "; self-attention takes q, k and v of one shape");
  };
  like_q(k_in, "k");
  like_q(v_in, "v");
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, q_in.get_device_index());
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, q_in.get_device_index());
  require(major == 9 && minor == 0, op, "needs an sm_90 GPU (H100, H200); ", device_name(q_in.device()),
          " is sm_", std::to_string(major * 10 + minor),
          "; use torch.nn.functional.scaled_dot_product_attention there (ltx_kernels.attention does)");
  const Launch launch(q_in);
  const Tensor q = dense(q_in), k = dense(k_in), v = dense(v_in);
  Tensor out = output_like(q);
  if (q.numel() == 0) return out;
  // V in fp16 for the kernel's first pass: torch's caching allocator, on this stream, so it is reused call to call
  Tensor v16 = torch::stable::empty_like(v);
  const char* why = ltx_cuda_sm90::attention(ptr(out), ptr(q), ptr(k), ptr(v), ptr(v16), q.size(0), q.size(1),
                                             q.size(2), static_cast<float>(scale), launch.stream());
  require(why == nullptr, op, why ? why : "");
  launch.check();
  return out;
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
  m.def("attention(Tensor q, Tensor k, Tensor v, float scale) -> Tensor");
}

#if defined(CPU_KERNEL)
#define LTX_DISPATCH_KEY CPU
#elif defined(CUDA_KERNEL)
#define LTX_DISPATCH_KEY CUDA
#endif

LTX_LIBRARY_IMPL(TORCH_EXTENSION_NAME, LTX_DISPATCH_KEY, m) {
  m.impl("rms_norm", TORCH_BOX(&rms_norm));
  m.impl("rms_norm_modulate", TORCH_BOX(&rms_norm_modulate));
  m.impl("add_rms_norm_modulate", TORCH_BOX(&add_rms_norm_modulate));
  m.impl("rope_interleaved_qk", TORCH_BOX(&rope_interleaved_qk));
  m.impl("gelu_tanh", TORCH_BOX(&gelu_tanh));
  m.impl("gated_residual", TORCH_BOX(&gated_residual));
  m.impl("qk_rms_norm_rope", TORCH_BOX(&qk_rms_norm_rope));
  m.impl("qk_rms_norm_rope_grid", TORCH_BOX(&qk_rms_norm_rope_grid));
#if defined(CUDA_KERNEL)
  m.impl("attention", TORCH_BOX(&attention));
#endif
}

// An empty Python module, so `from . import <id>` loads this library (and runs the registrations
// above) through the limited C API: no pybind11, one .abi3.so for every CPython >= 3.9.
PyMODINIT_FUNC LTX_CONCAT(PyInit_, TORCH_EXTENSION_NAME)(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, LTX_STRINGIFY(TORCH_EXTENSION_NAME), nullptr,
                               0, nullptr};
  return PyModule_Create(&module);
}
