// ltx_cuda_sm90.h: the LTX-Video ops that only Hopper (sm_90a) runs: plain C++ + the CUDA runtime, raw pointers,
// sizes in elements, the stream to launch on. torch_binding.cpp checks the arguments and the device and calls
// cudaGetLastError() after the launch.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace ltx_cuda_sm90 {

// Self-attention, softmax(q k^T * scale) v, over q, k, v and out of shape [batch, tokens, heads, 64], bf16,
// contiguous; fp32 softmax and accumulation. v16: scratch of v's size (the call writes V in fp16 there). Returns
// nullptr, or why nothing was launched.
const char* attention(void* out, const void* q, const void* k, const void* v, void* v16, int64_t batch,
                      int64_t tokens, int64_t heads, float scale, cudaStream_t stream);

}  // namespace ltx_cuda_sm90
