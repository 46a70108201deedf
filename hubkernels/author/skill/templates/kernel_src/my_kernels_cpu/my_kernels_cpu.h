// my_kernels_cpu.h: the my_kernels ops on CPU. Plain C++, no ATen: raw pointers, sizes in elements.
// Each function does the rows [row_begin, row_end) on the calling thread; torch_binding.cpp checks
// the arguments and splits the rows across torch's threads with at::parallel_for. The signatures
// mirror my_kernels_cuda.h, with a row range where CUDA has a stream.
#pragma once

#include <cstdint>

namespace my_kernels_cpu {

enum class DType : int { F32 = 0, F16 = 1, BF16 = 2 };

// out = x * rsqrt(mean(x^2) + eps) (* weight) for rows of `dim` contiguous elements; weight ([dim])
// may be nullptr. out, x and weight share `dtype`; arithmetic in fp32, one rounding per output.
void rms_norm(void* out, const void* x, const void* weight, int64_t row_begin, int64_t row_end,
              int64_t dim, float eps, DType dtype);

}  // namespace my_kernels_cpu
