// clocks.py's clock reader: every CTA (one per SM of an H100/H200) spins `spin` cycles and records the cycles and
// the nanoseconds of %globaltimer that took; cycles / ns is the SM clock in GHz.
#include <cuda_runtime.h>
__global__ void clk(unsigned long long* out, long long spin) {
  unsigned long long t0, t1;
  const long long c0 = clock64();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (clock64() - c0 < spin) {
  }
  const long long c1 = clock64();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = c1 - c0;
    out[2 * blockIdx.x + 1] = t1 - t0;
  }
}
extern "C" int clk_launch(void* out, long long spin, void* stream) {
  clk<<<132, 32, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<unsigned long long*>(out), spin);
  return cudaGetLastError();
}
