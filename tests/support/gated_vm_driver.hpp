#pragma once
// A POSIX driver whose map() can be held shut: a test sees when a map (a background mapper's, say)
// is waiting inside it and lets it go on when it chooses, so the mapper takes as long as the test
// likes, and what waits for it shows.
#include <atomic>
#include <cstddef>
#include <optional>
#include <string>
#include <thread>

#include "vmm/posix_vm_driver.hpp"

namespace kvlab::testing {

class GatedDriver final : public VmDriver {
 public:
  explicit GatedDriver(std::size_t budget) : inner_(budget) {}
  std::string name() const override { return inner_.name(); }
  Device device() const noexcept override { return inner_.device(); }
  std::size_t granularity() const noexcept override { return inner_.granularity(); }
  void* reserve(std::size_t bytes, std::size_t alignment) override { return inner_.reserve(bytes, alignment); }
  void free_reservation(void* base, std::size_t bytes) override { inner_.free_reservation(base, bytes); }
  std::optional<PhysHandle> create(std::size_t bytes) override { return inner_.create(bytes); }
  void release(PhysHandle handle) override { inner_.release(handle); }
  bool map(void* va, std::size_t bytes, PhysHandle handle) override {
    waiting_ = true;
    while (shut_) std::this_thread::yield();
    waiting_ = false;
    return inner_.map(va, bytes, handle);
  }
  void set_access(void* va, std::size_t bytes) override { inner_.set_access(va, bytes); }
  void unmap(void* va, std::size_t bytes) override { inner_.unmap(va, bytes); }
  void synchronize() override { inner_.synchronize(); }
  [[nodiscard]] PosixVmUsage usage() const { return inner_.usage(); }

  std::atomic<bool> shut_{false}, waiting_{false};

 private:
  PosixVmDriver inner_;
};

}  // namespace kvlab::testing
