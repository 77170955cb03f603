#pragma once
// Wall time of work run on a device, as execute mode's clock measures it: the host's steady clock
// for host and emulated kernels (they run on the calling thread), CUDA events on a GPU (kernels
// are asynchronous: the stop event is waited for, so the time covers the work, not the launches).
#include <functional>

#include "alloc/core/device.hpp"

namespace kvlab {

class DeviceTimer {
 public:
  /// Throws CudaError when Device::cuda is asked for and the events cannot be created.
  explicit DeviceTimer(Device device);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  void start();
  /// Seconds since start(), once the device finished everything queued before this call.
  /// `meanwhile` runs after the stop is recorded and before it is waited for: host work that
  /// overlaps the device's (vmm: starting the background mapper while a GPU computes) without
  /// delaying a launch or the stop mark. On the host and the emulated device the kernels ran
  /// already, so the time is taken before `meanwhile` runs.
  [[nodiscard]] double stop(const std::function<void()>& meanwhile = {});

 private:
  Device device_;
  double start_s_ = 0;
  void* events_[2] = {nullptr, nullptr};  // cudaEvent_t start and stop (cuda only)
};

}  // namespace kvlab
