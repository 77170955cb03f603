#pragma once
// Host arrays where a device's kernels read them: the arrays themselves when there is no device
// memory (the host), else device copies uploaded once and freed with this object. For one-off
// measurements (kvlab calibrate, the measured figures); the replayer reuses its staging across steps.
#include <memory>
#include <span>
#include <vector>

#include "alloc/transfer/device_staging.hpp"
#include "alloc/memory/memory_resource.hpp"

namespace kvlab {

class StagedArrays {
 public:
  /// `device_memory`: where the kernels read (nullptr: the host, where nothing is copied).
  explicit StagedArrays(MemoryResource* device_memory) : memory_(device_memory) {}

  /// Where the kernels read `host`'s elements.
  template <class T>
  T* put(std::span<T> host) {
    if (memory_ == nullptr) return host.data();
    auto& buffer = *buffers_.emplace_back(std::make_unique<DeviceStaging>());
    return reinterpret_cast<T*>(buffer.upload(*memory_, std::as_bytes(host), {}));  // NOLINT
  }

 private:
  MemoryResource* memory_;
  std::vector<std::unique_ptr<DeviceStaging>> buffers_;
};

}  // namespace kvlab
