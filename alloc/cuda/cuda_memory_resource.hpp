#pragma once
// Device memory from cudaMalloc (only in builds with KVLAB_HAS_CUDA). Constructing it on a
// machine without a usable GPU throws CudaError with cuda_status().message.
#include "alloc/memory/memory_resource.hpp"

namespace kvlab {

class CudaMemoryResource final : public MemoryResource {
 public:
  explicit CudaMemoryResource(int device = 0);

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept override;
  [[nodiscard]] Device do_device() const noexcept override { return Device::cuda; }
  [[nodiscard]] std::string do_name() const override { return "cuda:" + std::to_string(device_); }

  int device_;
};

/// Page-locked host memory from cudaMallocHost: the swap space of device backends (copies to and
/// from it run at full PCIe speed and can be asynchronous).
class CudaPinnedMemoryResource final : public MemoryResource {
 public:
  CudaPinnedMemoryResource();

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept override;
  [[nodiscard]] Device do_device() const noexcept override { return Device::host; }
  [[nodiscard]] std::string do_name() const override { return "cuda-pinned-host"; }
};

}  // namespace kvlab
