#pragma once
// Caps the bytes outstanding through an upstream resource, so a host run can stand for a GPU with
// a given KV budget: an allocation that would exceed the limit throws OutOfMemory and changes
// nothing. Thread-safe.
#include <cstddef>
#include <mutex>

#include "alloc/memory/memory_resource.hpp"

namespace kvlab {

class LimitingAdaptor final : public MemoryResource {
 public:
  LimitingAdaptor(MemoryResource& upstream, std::size_t limit_bytes) : upstream_(upstream), limit_(limit_bytes) {}
  [[nodiscard]] std::size_t limit() const noexcept { return limit_; }
  [[nodiscard]] std::size_t allocated() const;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept override;
  [[nodiscard]] Device do_device() const noexcept override { return upstream_.device(); }
  [[nodiscard]] std::string do_name() const override {
    return "limiting(" + upstream_.name() + ", " + std::to_string(limit_) + " B)";
  }

  MemoryResource& upstream_;
  const std::size_t limit_;
  mutable std::mutex mutex_;
  std::size_t allocated_ = 0;
};

}  // namespace kvlab
