// overlap.cu: ltx_cuda::Overlap, a per-device side stream forked from and joined to the caller's stream.
#include <mutex>

#include "ltx_cuda.h"

namespace ltx_cuda {

// One device's side stream and the two events that fork it from and join it to a caller's stream; `lock` is
// held from fork to join, so two host threads never interleave their forks and joins on it.
struct Overlap::Slot {
  bool made = false;  // under kMake
  std::mutex lock;
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr;
  cudaEvent_t join = nullptr;
  const char* error = nullptr;
};

namespace {

constexpr int kMaxDevices = 64;
std::mutex kMake;  // guards making the slots (std::call_once would need glibc 2.34's pthread_once)

}  // namespace

Overlap::Overlap(cudaStream_t main) : main_(main), side_(main) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) {
    error_ = "no current CUDA device to fork a stream on";
    return;
  }
  static Slot slots[kMaxDevices];
  Slot& s = slots[device];
  {
    const std::lock_guard<std::mutex> making(kMake);
    int least = 0, greatest = 0;
    if (!s.made && (cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess ||
                    cudaStreamCreateWithPriority(&s.stream, cudaStreamNonBlocking, greatest) != cudaSuccess ||
                    cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming) != cudaSuccess ||
                    cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming) != cudaSuccess))
      s.error = "could not create a CUDA stream and events on this device";
    s.made = true;
  }
  if ((error_ = s.error)) return;
  s.lock.lock();
  if (cudaEventRecord(s.fork, main) != cudaSuccess || cudaStreamWaitEvent(s.stream, s.fork, 0) != cudaSuccess) {
    s.lock.unlock();
    error_ = "could not fork a CUDA stream from the current one (cudaEventRecord / cudaStreamWaitEvent)";
    return;
  }
  slot_ = &s;
  side_ = s.stream;
}

Overlap::~Overlap() {
  if (!slot_) return;
  // Errors here surface at the caller's launch check (cudaGetLastError): a destructor cannot throw.
  cudaEventRecord(slot_->join, slot_->stream);
  cudaStreamWaitEvent(main_, slot_->join, 0);
  slot_->lock.unlock();
}

}  // namespace ltx_cuda
