#pragma once
// Counts what passes through to an upstream resource: bytes and allocations outstanding now, the
// peak, and totals. Thread-safe, so a background mapper may allocate through it.
#include <cstddef>
#include <mutex>

#include "alloc/memory/memory_resource.hpp"

namespace kvlab {

struct AllocationStatistics {
  std::size_t current_bytes = 0;
  std::size_t peak_bytes = 0;
  std::size_t total_bytes = 0;
  std::size_t current_count = 0;
  std::size_t peak_count = 0;
  std::size_t total_count = 0;
};

class StatisticsAdaptor final : public MemoryResource {
 public:
  explicit StatisticsAdaptor(MemoryResource& upstream) : upstream_(upstream) {}
  [[nodiscard]] AllocationStatistics statistics() const;
  [[nodiscard]] MemoryResource& upstream() const noexcept { return upstream_; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept override;
  [[nodiscard]] Device do_device() const noexcept override { return upstream_.device(); }
  [[nodiscard]] std::string do_name() const override { return "statistics(" + upstream_.name() + ")"; }

  MemoryResource& upstream_;
  mutable std::mutex mutex_;
  AllocationStatistics stats_;
};

}  // namespace kvlab
