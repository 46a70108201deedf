// torch_binding.cpp: the my_kernels ops as a TORCH_LIBRARY (functional schemas: every op returns new
// tensors), argument checks a user can act on, and the CPU or CUDA implementation that hands raw
// pointers to my_kernels_cpu / my_kernels_cuda. The only file of the kernel that includes torch.
// The build defines TORCH_EXTENSION_NAME (this build's unique op namespace, e.g.
// _my_kernels_cuda_1a2b3c4) and exactly one of CPU_KERNEL / CUDA_KERNEL.
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#if defined(CPU_KERNEL)
#include <ATen/Parallel.h>

#include "my_kernels_cpu.h"
#elif defined(CUDA_KERNEL)
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "my_kernels_cuda.h"
#endif

// TORCH_LIBRARY pastes and stringifies its namespace argument, so TORCH_EXTENSION_NAME must be
// expanded to the id before it gets there.
#define MY_KERNELS_CONCAT_(a, b) a##b
#define MY_KERNELS_CONCAT(a, b) MY_KERNELS_CONCAT_(a, b)
#define MY_KERNELS_STRINGIFY_(x) #x
#define MY_KERNELS_STRINGIFY(x) MY_KERNELS_STRINGIFY_(x)
#define MY_KERNELS_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define MY_KERNELS_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)

namespace {

// ---------------------------------------------------------------------------------------------
// Argument checks, shared by both backends. Each message names the op and says what to do; the
// fake implementation in my_kernels/_fake.py applies the same rules while torch.compile traces.

void check_rms_norm(const at::Tensor& x, const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(x.dim() >= 1,
              "my_kernels.rms_norm: x must have at least one dimension (the normalised one)");
  const auto t = x.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kHalf || t == at::kBFloat16,
              "my_kernels.rms_norm: x has dtype ", t,
              "; supported are float32, float16 and bfloat16");
  TORCH_CHECK(x.is_contiguous(), "my_kernels.rms_norm: x must be contiguous (got shape ", x.sizes(),
              " with strides ", x.strides(), "); pass x.contiguous()");
  if (!weight) return;
  TORCH_CHECK(weight->device() == x.device(), "my_kernels.rms_norm: weight is on ",
              weight->device(), " but x is on ", x.device(), "; move both to the same device");
  TORCH_CHECK(weight->scalar_type() == t, "my_kernels.rms_norm: weight has dtype ",
              weight->scalar_type(), " but x has ", t, "; pass weight.to(x.dtype)");
  TORCH_CHECK(weight->dim() == 1 && weight->size(0) == x.size(-1),
              "my_kernels.rms_norm: weight has shape ", weight->sizes(), " but must be [",
              x.size(-1), "] (the last dimension of x)");
  TORCH_CHECK(weight->is_contiguous(),
              "my_kernels.rms_norm: weight must be contiguous; pass weight.contiguous()");
}

int64_t rows_of(const at::Tensor& x) {
  const int64_t dim = x.size(-1);
  return dim == 0 ? 0 : x.numel() / dim;
}

const void* optional_ptr(const std::optional<at::Tensor>& t) {
  return t ? t->const_data_ptr() : nullptr;
}

#if defined(CPU_KERNEL)
// ---------------------------------------------------------------------------------------------
// CPU: whole rows per task, split across torch's intra-op threads.

my_kernels_cpu::DType cpu_dtype(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return my_kernels_cpu::DType::F16;
    case at::kBFloat16: return my_kernels_cpu::DType::BF16;
    default: return my_kernels_cpu::DType::F32;
  }
}

// Tasks of fewer elements cost more to hand to a thread than to run.
constexpr int64_t kElementsPerTask = 32768;

at::Tensor rms_norm_cpu(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps) {
  check_rms_norm(x, weight);
  at::Tensor out = at::empty_like(x);
  const int64_t dim = x.size(-1);
  const int64_t grain = std::max<int64_t>(1, kElementsPerTask / std::max<int64_t>(dim, 1));
  at::parallel_for(0, rows_of(x), grain, [&](int64_t begin, int64_t end) {
    my_kernels_cpu::rms_norm(out.mutable_data_ptr(), x.const_data_ptr(), optional_ptr(weight),
                             begin, end, dim, static_cast<float>(eps), cpu_dtype(x.scalar_type()));
  });
  return out;
}

#elif defined(CUDA_KERNEL)
// ---------------------------------------------------------------------------------------------
// CUDA: one launch on the current stream of x's device; nothing to launch for empty tensors.

my_kernels_cuda::DType cuda_dtype(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return my_kernels_cuda::DType::F16;
    case at::kBFloat16: return my_kernels_cuda::DType::BF16;
    default: return my_kernels_cuda::DType::F32;
  }
}

at::Tensor rms_norm_cuda(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps) {
  check_rms_norm(x, weight);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty_like(x);
  if (out.numel() == 0) return out;
  my_kernels_cuda::rms_norm(out.mutable_data_ptr(), x.const_data_ptr(), optional_ptr(weight),
                            rows_of(x), x.size(-1), static_cast<float>(eps),
                            cuda_dtype(x.scalar_type()), c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
#endif

}  // namespace

// ---------------------------------------------------------------------------------------------
// Schemas and the implementation of this build. Add one m.def and one m.impl per op.

MY_KERNELS_LIBRARY(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm(Tensor x, Tensor? weight, float eps) -> Tensor");
}

#if defined(CPU_KERNEL)
MY_KERNELS_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CPU, m) { m.impl("rms_norm", &rms_norm_cpu); }
#elif defined(CUDA_KERNEL)
MY_KERNELS_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("rms_norm", &rms_norm_cuda); }
#endif

// An empty Python module, so that `from . import <id>` (the generated _ops.py) loads this library
// and runs the registrations above. Limited C API only: one .abi3.so serves every CPython >= 3.9,
// and there is no pybind11.
PyMODINIT_FUNC MY_KERNELS_CONCAT(PyInit_, TORCH_EXTENSION_NAME)(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, MY_KERNELS_STRINGIFY(TORCH_EXTENSION_NAME),
                               nullptr, 0, nullptr};
  return PyModule_Create(&module);
}
