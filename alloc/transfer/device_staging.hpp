#pragma once
// The device copy of a backend's per-batch arrays (sequence bases or block tables, lengths):
// grown as needed, uploaded once per prepared batch, freed with its owner. Host backends do not
// use it (the kernels read their host vectors directly).
#include <cstddef>
#include <initializer_list>
#include <span>

#include "alloc/transfer/copy.hpp"
#include "alloc/memory/memory_resource.hpp"

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
    return upload(mr, {first, second});
  }
  /// Uploads `parts` one after another (each at the offset the sizes before it give).
  std::byte* upload(MemoryResource& mr, std::initializer_list<std::span<const std::byte>> parts) {
    std::size_t bytes = 0;
    for (const auto& part : parts) bytes += part.size();
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
    std::size_t at = 0;
    for (const auto& part : parts) {
      upload_bytes(mr.device(), dst + at, part.data(), part.size());
      at += part.size();
    }
    return dst;
  }
  [[nodiscard]] void* data() const noexcept { return data_; }

 private:
  MemoryResource* mr_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace kvlab
