// emu.h: the part of CUDA that kernel_src/ltx_cuda uses, on the CPU, so that the real kernel
// sources run under g++ (harness.py prepares them, cases.cpp checks them).
//
// A launch runs its blocks one after another. Each CUDA thread of a block is a fiber (its own
// stack; emu.cpp switches them) on the calling thread: a fiber runs until it waits at a
// barrier (__syncthreads; __syncwarp and the warp shuffles wait for the warp) or returns, then
// the next one runs. A barrier opens when every thread that has not returned is waiting at it
// (PTX `exit` releases barriers that only exited threads hold up). When no fiber can run and some
// have not returned, that is a deadlock on the GPU too: the launch aborts and says who waits
// where. Alternate blocks run their fibers in thread order and in reverse, so a result that
// depends on the order of the threads between two barriers (a missing __syncthreads) usually
// shows as a wrong value.
// A shuffle that reads a lane which has returned aborts. __shared__ variables are static: one
// copy, reused by every block (a kernel that reads shared memory before writing it reads the
// previous block's values here, garbage on the GPU).
//
// Every launch is checked against the CUDA limits (grid <= 2^31-1 x 65535 x 65535 blocks, block
// <= 1024 threads) and the kernel's __launch_bounds__; every kernel instantiation that a launcher
// can pick is registered at start-up and counted when launched, so a test can require that each
// one ran. Built with -fsanitize=address,undefined: a misaligned 16-byte (uint4) access, an
// access out of a buffer or an out of range array index aborts with the sanitizer's report.
#pragma once

#define __host__
#define __device__
#define __global__
#define __shared__ static
#define __constant__ static

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

namespace emu {

[[noreturn]] inline void fail(const std::string& what) {
  std::fflush(stdout);
  std::fprintf(stderr, "EMU ERROR: %s\n", what.c_str());
  std::abort();
}

// ---- kernel registry ------------------------------------------------------------------------

struct KernelInfo {
  std::string name;
  long long launches = 0;
};

inline std::vector<KernelInfo*>& registry() {
  static std::vector<KernelInfo*> kernels;
  return kernels;
}

// "... [with auto K = ltx_cuda::detail::row_norm_resident_kernel<__nv_bfloat16, 8, 64, 4, 1, ...>]"
template <auto K>
const char* pretty_name() {
  return __PRETTY_FUNCTION__;
}

inline KernelInfo* add_kernel(const char* pretty) {
  std::string s = pretty;
  const auto at = s.find("K = ");
  if (at != std::string::npos) s = s.substr(at + 4, s.size() - at - 5);
  registry().push_back(new KernelInfo{s});
  return registry().back();
}

// One per kernel instantiation that some launcher names; initialised before main().
template <auto K>
struct Registered {
  static inline KernelInfo* const info = add_kernel(pretty_name<K>());
};

// Names of the kernels launched since the last clear (for failure messages).
inline std::vector<std::string> recent;

// ---- fibers -------------------------------------------------------------------------------------

// Saves the callee-saved registers on the current stack, stores the stack pointer in *from, and
// continues on the stack `to` (defined in emu.cpp: x86-64 assembly, no system call per switch).
extern "C" void emu_switch(void** from, void* to);

constexpr size_t kStackBytes = size_t(256) << 10;  // mapped lazily; a guard page below each

struct Fiber {
  void* sp = nullptr;     // saved stack pointer while switched out
  char* stack = nullptr;  // lowest usable byte
  uint3 tid;
  unsigned lin = 0;  // linear thread index in the block
  int waiting = 0;   // 0 runnable, 1 at __syncthreads, 2 at a warp barrier
  bool done = false;
  void* fake_stack = nullptr;
};

struct Block {
  std::vector<Fiber> fibers;  // grows to the largest block launched, stacks reused
  unsigned threads = 0, live = 0, at_sync = 0;
  std::vector<unsigned> warp_live, warp_waiting;
  alignas(8) unsigned char slots[1024][8];  // one shuffle value per thread
  void* scheduler_sp = nullptr;
  const void* scheduler_stack = nullptr;
  size_t scheduler_stack_size = 0;
  std::function<void()> body;  // the kernel call with its arguments
};

inline Block block;
inline Fiber* current = nullptr;
inline uint3 bid;
inline dim3 bdim, gdim;

void wait(bool warp);                                       // emu.cpp
void run_block(unsigned threads, dim3 b, bool reverse);     // emu.cpp

// ---- launch ---------------------------------------------------------------------------------

// The <<<grid, block, shared_bytes, stream>>> of a launch.
struct Config {
  dim3 grid, block;
  size_t shared_bytes;
  Config(dim3 g, dim3 b, size_t shmem = 0, cudaStream_t = nullptr)
      : grid(g), block(b), shared_bytes(shmem) {}
};

inline std::string dims(dim3 d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

inline long long blocks_run = 0;

// kernel<<<cfg>>>(args...) becomes emu::launch<&kernel>(emu::Config(cfg), args...).
template <auto Kernel, class... Args>
void launch(const Config& cfg, Args... args) {
  KernelInfo& info = *Registered<Kernel>::info;
  const dim3 g = cfg.grid, b = cfg.block;
  const std::string what = info.name + " <<<" + dims(g) + ", " + dims(b) + ">>>";
  if (current != nullptr) fail("a launch from device code is not emulated: " + what);
  if (g.x == 0 || g.y == 0 || g.z == 0) fail("zero-size grid (a launch error on the GPU): " + what);
  if (g.x > 2147483647u || g.y > 65535u || g.z > 65535u) fail("grid over the CUDA limits: " + what);
  const unsigned long long nt = 1ull * b.x * b.y * b.z;
  if (nt == 0 || nt > 1024 || b.z > 64) fail("block over the CUDA limits: " + what);
  if (cfg.shared_bytes != 0) fail("dynamic shared memory is not emulated: " + what);
  ++info.launches;
  recent.push_back(info.name);
  block.body = [&] { Kernel(args...); };
  bdim = b;
  gdim = g;
  for (unsigned z = 0; z < g.z; ++z)
    for (unsigned y = 0; y < g.y; ++y)
      for (unsigned x = 0; x < g.x; ++x) {
        bid = {x, y, z};
        run_block(static_cast<unsigned>(nt), b, (blocks_run++ & 1) != 0);
      }
  block.body = nullptr;
}

// Inserted at the top of every kernel body: the GPU refuses a launch of more threads per block
// than the kernel's __launch_bounds__.
inline void check_launch_bounds(unsigned long long max_threads) {
  const unsigned long long nt = 1ull * bdim.x * bdim.y * bdim.z;
  if (nt > max_threads)
    fail("a block of " + std::to_string(nt) + " threads exceeds the kernel's __launch_bounds__(" +
         std::to_string(max_threads) + "): " + recent.back());
}

// ---- warps --------------------------------------------------------------------------------------

inline void full_mask(unsigned mask, const char* what) {
  if (mask != 0xffffffffu)
    fail(std::string(what) + " with a partial mask is not emulated (add it to tests/cuda_emu/emu.h)");
}

inline unsigned lane() { return current->lin % 32; }

// Every lane publishes v, then reads lane src's value.
template <class T>
T shuffle(T v, int src) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffle of a value up to 8 bytes");
  const unsigned t = current->lin, s = (t & ~31u) + static_cast<unsigned>(src);
  std::memcpy(block.slots[t], &v, sizeof(T));
  wait(true);
  if (s >= block.threads || block.fibers[s].done)
    fail("a shuffle reads lane " + std::to_string(src) + ", which has returned or does not exist: " +
         recent.back());
  T r;
  std::memcpy(&r, block.slots[s], sizeof(T));
  wait(true);
  return r;
}

inline int segment(int width) {
  if (width <= 0 || width > 32 || (width & (width - 1)))
    fail("shuffle width " + std::to_string(width) + " is not a power of two up to 32");
  return static_cast<int>(lane()) & ~(width - 1);
}

// ---- approximate PTX instructions (harness.py maps inline asm to these) --------------------------

// ex2.approx.ftz.f32: 2^x, subnormal inputs and results flushed to zero. The GPU's result is within
// 2 ulp of this (exact) one.
inline float ex2_approx_ftz(float x) {
  if (std::fpclassify(x) == FP_SUBNORMAL) x = 0.0f;
  const float r = std::exp2(x);
  return std::fpclassify(r) == FP_SUBNORMAL ? 0.0f : r;
}

}  // namespace emu

#define threadIdx (emu::current->tid)
#define blockIdx emu::bid
#define blockDim emu::bdim
#define gridDim emu::gdim
constexpr int warpSize = 32;

inline void __syncthreads() { emu::wait(false); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  emu::full_mask(mask, "__syncwarp");
  emu::wait(true);
}
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  emu::full_mask(mask, "__shfl_sync");
  return emu::shuffle(v, emu::segment(width) + (src & (width - 1)));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  emu::full_mask(mask, "__shfl_xor_sync");
  const int seg = emu::segment(width), lane = static_cast<int>(emu::lane()), src = lane ^ lane_mask;
  return emu::shuffle(v, src >= seg + width ? lane : src);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  emu::full_mask(mask, "__shfl_down_sync");
  const int seg = emu::segment(width), lane = static_cast<int>(emu::lane());
  const int src = lane + static_cast<int>(delta);
  return emu::shuffle(v, src >= seg + width ? lane : src);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  emu::full_mask(mask, "__shfl_up_sync");
  const int seg = emu::segment(width), lane = static_cast<int>(emu::lane());
  const int src = lane - static_cast<int>(delta);
  return emu::shuffle(v, src < seg ? lane : src);
}

// Loads through the read-only path are plain loads here (the sanitizers check their alignment).
template <class T>
inline T __ldg(const T* p) {
  return *p;
}

// Fast-math intrinsics: exact here, within a few ulp on the GPU.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline void __sincosf(float x, float* s, float* c) { sincosf(x, s, c); }
inline float __saturatef(float x) { return std::isnan(x) ? 0.0f : std::fmin(std::fmax(x, 0.0f), 1.0f); }
using std::max;
using std::min;
