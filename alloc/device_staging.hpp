#pragma once
// The device copy of a backend's per-batch arrays (sequence bases or block tables, lengths):
// grown as needed, uploaded once per prepared batch, freed with its owner. Host backends do not
// use it (the kernels read their host vectors directly).
#include <cstddef>
#include <span>

#include "alloc/copy.hpp"
#include "alloc/memory_resource.hpp"

namespace kvlab {

class DeviceStaging {
 public:
  DeviceStaging() = default;
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;
  ~DeviceStaging() {
    try {
      if (mr_ != nullptr) mr_->deallocate(data_, bytes_);
    } catch (...) {  // a device error at teardown cannot be reported; the resource's statistics show it
    }
  }

  /// Uploads `first` followed by `second` into device memory from `mr` and returns where they start.
  std::byte* upload(MemoryResource& mr, std::span<const std::byte> first, std::span<const std::byte> second) {
    const std::size_t bytes = first.size() + second.size();
    if (bytes > bytes_ || &mr != mr_) {
      if (mr_ != nullptr) mr_->deallocate(data_, bytes_);
      data_ = nullptr;
      bytes_ = 0;
      mr_ = nullptr;
      data_ = mr.allocate(bytes);
      bytes_ = bytes;
      mr_ = &mr;
    }
    auto* dst = static_cast<std::byte*>(data_);
    upload_bytes(mr.device(), dst, first.data(), first.size());
    upload_bytes(mr.device(), dst + first.size(), second.data(), second.size());
    return dst;
  }
  [[nodiscard]] void* data() const noexcept { return data_; }

 private:
  MemoryResource* mr_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace kvlab
