// emu.cpp: the fiber scheduler of emu.h (one fiber per CUDA thread of the running block).
#include "emu.h"

#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define ASAN_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define ASAN_START(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define ASAN_FINISH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#endif

#if !defined(__x86_64__)
#error "emu.cpp switches fibers in x86-64 assembly; port emu_switch to this architecture"
#endif

// emu_switch(from, to): push the System V callee-saved registers, save rsp in *from, load `to`,
// pop the registers saved there and return into that fiber.
asm(R"(
  .pushsection .text
  .globl emu_switch
  .type emu_switch, @function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch, .-emu_switch
  .popsection
)");

namespace emu {
namespace {

void switch_to_scheduler(bool finished) {
  Fiber& f = *current;
  ASAN_START(finished ? nullptr : &f.fake_stack, block.scheduler_stack, block.scheduler_stack_size);
  emu_switch(&f.sp, block.scheduler_sp);
  ASAN_FINISH(f.fake_stack, &block.scheduler_stack, &block.scheduler_stack_size);
}

void open_sync() {
  for (unsigned t = 0; t < block.threads; ++t)
    if (block.fibers[t].waiting == 1) block.fibers[t].waiting = 0;
  block.at_sync = 0;
}

void open_warp(unsigned w) {
  for (unsigned t = w * 32; t < std::min(block.threads, w * 32 + 32); ++t)
    if (block.fibers[t].waiting == 2) block.fibers[t].waiting = 0;
  block.warp_waiting[w] = 0;
}

[[noreturn]] void fiber_main() {
  ASAN_FINISH(nullptr, &block.scheduler_stack, &block.scheduler_stack_size);
  block.body();
  Fiber& f = *current;
  f.done = true;
  const unsigned w = f.lin / 32;
  --block.live;
  --block.warp_live[w];
  // Threads that return no longer hold a barrier up (as on the GPU).
  if (block.at_sync > 0 && block.at_sync == block.live) open_sync();
  if (block.warp_waiting[w] > 0 && block.warp_waiting[w] == block.warp_live[w]) open_warp(w);
  switch_to_scheduler(true);
  fail("a finished fiber was resumed");
}

std::string deadlock_report() {
  unsigned sync = 0, warp = 0;
  for (unsigned t = 0; t < block.threads; ++t) {
    const Fiber& f = block.fibers[t];
    if (!f.done) (f.waiting == 1 ? sync : warp) += 1;
  }
  return "deadlock: no thread of the block can go on (" + std::to_string(sync) +
         " wait at __syncthreads, " + std::to_string(warp) + " at a warp barrier or shuffle, " +
         std::to_string(block.threads - block.live) +
         " have returned): a barrier that some threads of the block never reach";
}

// A fresh stack whose first switch "returns" into fiber_main.
void* initial_stack(char* stack) {
  auto* top = reinterpret_cast<uintptr_t*>(stack + kStackBytes);  // 16-byte aligned
  *--top = 0;                                                 // fiber_main's return address (never used)
  *--top = reinterpret_cast<uintptr_t>(&fiber_main);        // popped by emu_switch's ret
  for (int i = 0; i < 6; ++i) *--top = 0;                     // rbp rbx r12..r15
  uint32_t control[2];                                        // mxcsr, x87 control word
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(control[0]), "=m"(control[1]));
  *--top = 0;
  std::memcpy(top, control, sizeof(control));
  return top;
}

}  // namespace

void wait(bool warp) {
  Fiber& f = *current;
  const unsigned w = f.lin / 32;
  if (warp) {
    if (++block.warp_waiting[w] == block.warp_live[w]) return open_warp(w);
    f.waiting = 2;
  } else {
    if (++block.at_sync == block.live) return open_sync();
    f.waiting = 1;
  }
  switch_to_scheduler(false);
}

void run_block(unsigned threads, dim3 b, bool reverse) {
  Block& blk = block;
  while (blk.fibers.size() < threads) {
    Fiber f;
    char* m = static_cast<char*>(mmap(nullptr, kStackBytes + 4096, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (m == MAP_FAILED) fail("cannot map a fiber stack");
    mprotect(m, 4096, PROT_NONE);  // an overflow faults instead of writing into a neighbour
    f.stack = m + 4096;
    blk.fibers.push_back(f);
  }
  blk.threads = blk.live = threads;
  blk.at_sync = 0;
  const unsigned warps = (threads + 31) / 32;
  blk.warp_live.assign(warps, 0);
  blk.warp_waiting.assign(warps, 0);
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& f = blk.fibers[t];
    f.lin = t;
    f.tid = {t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
    f.waiting = 0;
    f.done = false;
    f.fake_stack = nullptr;
    ASAN_UNPOISON_MEMORY_REGION(f.stack, kStackBytes);  // frames left by the last block's fiber
    f.sp = initial_stack(f.stack);
    ++blk.warp_live[t / 32];
  }
  while (blk.live > 0) {
    bool ran = false;
    for (unsigned i = 0; i < threads; ++i) {
      Fiber& f = blk.fibers[reverse ? threads - 1 - i : i];
      if (f.done || f.waiting) continue;
      ran = true;
      current = &f;
      void* fake = nullptr;
      ASAN_START(&fake, f.stack, kStackBytes);
      emu_switch(&blk.scheduler_sp, f.sp);
      ASAN_FINISH(fake, nullptr, nullptr);
      current = nullptr;
    }
    if (!ran) fail(deadlock_report() + ": " + recent.back());
  }
}

}  // namespace emu
