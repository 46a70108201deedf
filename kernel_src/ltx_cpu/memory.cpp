// memory.cpp: how the CPU ops' outputs meet memory. A fresh output of many MiB costs one page
// fault per 4 KiB page on first touch, often more than the op itself; transparent huge pages make
// that one fault per 2 MiB. Outputs larger than the cache are stored non-temporally, so they do
// not evict the inputs still to be read, and skip the read-for-ownership of each line.
#include <sys/mman.h>

#include <cstdio>

#include "ltx_cpu.h"

namespace ltx_cpu {
namespace {

constexpr uintptr_t kHugePage = uintptr_t(2) << 20;
// Smaller blocks come from malloc's heap (glibc's largest mmap threshold is 32 MiB), mostly reused
// and already faulted in: advice there only splits the heap's mapping and wakes khugepaged.
constexpr int64_t kFreshMappingBytes = int64_t(32) << 20;
constexpr int64_t kUnknownCache = int64_t(32) << 20;

// The largest cache of cpu0 in bytes, from sysfs: sysconf's figure is the host's, not the VM's, on
// some hypervisors. Read once.
int64_t last_level_cache_bytes() {
  int64_t best = 0;
  for (int index = 0; index < 8; ++index) {
    char path[96];
    std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
    FILE* f = std::fopen(path, "r");
    if (f == nullptr) break;
    long long value = 0;
    char unit = 0;
    const int got = std::fscanf(f, "%lld%c", &value, &unit);
    std::fclose(f);
    if (got < 1) continue;
    const int64_t bytes = unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : value;
    best = bytes > best ? bytes : best;
  }
  return best > 0 ? best : kUnknownCache;
}

}  // namespace

void prefer_huge_pages(void* p, int64_t bytes) {
#if defined(MADV_HUGEPAGE)
  if (bytes < kFreshMappingBytes) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + uintptr_t(bytes)) & ~(kHugePage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

bool stream_outputs(int64_t bytes) {
  static const int64_t cache = last_level_cache_bytes();
  return bytes >= cache / 2;
}

}  // namespace ltx_cpu
