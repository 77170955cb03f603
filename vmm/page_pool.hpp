#pragma once
// Physical pages for the vmm backend: every handle is created once, up front, and reused.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "vmm/vm_driver.hpp"

namespace kvlab {

using PageId = std::int32_t;

// Design note
//
// Rationale. Creating physical memory is the slow step of the VMM API (cuMemCreate clears and
// registers the memory: tens of microseconds per 2 MiB), far slower than mapping an existing
// handle. vAttention and TensorRT-LLM's CudaVmmArena therefore create handles ahead of time and
// only map/unmap on the critical path.
//
// Approach. The pool creates `num_pages` handles of `page_bytes` at construction (all or nothing:
// if one create fails, the ones made are released and the constructor throws OutOfMemory or the
// driver's error). Pages are indices with a LIFO free list (a just-unmapped page is reused first,
// warm in caches and TLBs on the host); the pool knows nothing about where pages are mapped.
// Without a driver (accounting only) a page is just an index.
//
// Limitations. Not thread-safe (the backend's mutex guards it). The page count is fixed for the
// pool's lifetime; growing or shrinking the budget means a new pool. Handles are released only at
// destruction, and every page must be back (unmapped) by then.
class PhysicalPagePool {
 public:
  /// `driver` nullptr: accounting only (no handles).
  PhysicalPagePool(VmDriver* driver, std::size_t page_bytes, std::int64_t num_pages);
  ~PhysicalPagePool();
  PhysicalPagePool(const PhysicalPagePool&) = delete;
  PhysicalPagePool& operator=(const PhysicalPagePool&) = delete;

  /// A free page, or nullopt (nothing changes) when none is left.
  [[nodiscard]] std::optional<PageId> allocate();
  void release(PageId page);

  [[nodiscard]] PhysHandle handle(PageId page) const { return handles_[static_cast<std::size_t>(page)]; }
  [[nodiscard]] std::size_t page_bytes() const noexcept { return page_bytes_; }
  [[nodiscard]] std::int64_t num_pages() const noexcept { return static_cast<std::int64_t>(in_use_.size()); }
  [[nodiscard]] std::int64_t num_free() const noexcept { return static_cast<std::int64_t>(free_.size()); }
  [[nodiscard]] std::int64_t num_used() const noexcept { return num_pages() - num_free(); }
  [[nodiscard]] bool in_use(PageId page) const { return in_use_[static_cast<std::size_t>(page)] != 0; }

 private:
  VmDriver* driver_;
  std::size_t page_bytes_;
  std::vector<PhysHandle> handles_;
  std::vector<char> in_use_;
  std::vector<PageId> free_;  // stack: the last page released is handed out first
};

}  // namespace kvlab
