#include "kernels/device_timer.hpp"

#include <chrono>

#include "alloc/core/error.hpp"
#if KVLAB_HAS_CUDA
#include "alloc/cuda/cuda_check.hpp"
#endif

namespace kvlab {

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

DeviceTimer::DeviceTimer(Device device) : device_(device) {
  if (device_ != Device::cuda) return;
#if KVLAB_HAS_CUDA
  cudaEvent_t a = nullptr, b = nullptr;
  KVLAB_CUDA_TRY(cudaEventCreate(&a));
  if (const cudaError_t e = cudaEventCreate(&b); e != cudaSuccess) {
    cudaEventDestroy(a);
    KVLAB_CUDA_TRY(e);
  }
  events_[0] = a;
  events_[1] = b;
#else
  KVLAB_THROW(InvalidArgument, "CUDA timing is not built into this binary (configured without nvcc)");
#endif
}

DeviceTimer::~DeviceTimer() {
#if KVLAB_HAS_CUDA
  for (void* e : events_)
    if (e != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(e));
#endif
}

void DeviceTimer::start() {
#if KVLAB_HAS_CUDA
  if (device_ == Device::cuda) {
    KVLAB_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(events_[0]), nullptr));
    return;
  }
#endif
  start_s_ = now_s();
}

double DeviceTimer::stop(const std::function<void()>& meanwhile) {
#if KVLAB_HAS_CUDA
  if (device_ == Device::cuda) {
    const auto a = static_cast<cudaEvent_t>(events_[0]);
    const auto b = static_cast<cudaEvent_t>(events_[1]);
    KVLAB_CUDA_TRY(cudaEventRecord(b, nullptr));
    if (meanwhile) meanwhile();
    KVLAB_CUDA_TRY(cudaEventSynchronize(b));
    float ms = 0;
    KVLAB_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
    return static_cast<double>(ms) * 1e-3;
  }
#endif
  const double elapsed = now_s() - start_s_;
  if (meanwhile) meanwhile();
  return elapsed;
}

}  // namespace kvlab
