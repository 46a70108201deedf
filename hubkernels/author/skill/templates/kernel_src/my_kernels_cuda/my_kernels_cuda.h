// my_kernels_cuda.h: launchers of the my_kernels ops on CUDA. Plain C++ and the CUDA runtime, no
// ATen: raw pointers, sizes in elements, the stream to launch on. torch_binding.cpp checks the
// arguments and calls cudaGetLastError() after each launch; launchers never synchronise.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace my_kernels_cuda {

enum class DType : int { F32 = 0, F16 = 1, BF16 = 2 };

// out = x * rsqrt(mean(x^2) + eps) (* weight) over `rows` contiguous rows of `dim` elements; weight
// ([dim]) may be nullptr. out, x and weight share `dtype`; arithmetic in fp32, one rounding.
void rms_norm(void* out, const void* x, const void* weight, int64_t rows, int64_t dim, float eps,
              DType dtype, cudaStream_t stream);

}  // namespace my_kernels_cuda
