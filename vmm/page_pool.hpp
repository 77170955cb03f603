#pragma once
// Physical pages for the vmm backend: every handle is created once, up front, and reused.
#include <cstddef>
#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "alloc/core/error.hpp"
#include "vmm/vm_driver.hpp"

namespace kvlab {

using PageId = std::int32_t;
inline constexpr PageId kNoPage = -1;

// Design note
//
// Rationale. Creating physical memory is the slow step of the VMM API (cuMemCreate clears and
// registers the memory: tens of microseconds per 2 MiB), far slower than mapping an existing
// handle. vAttention and TensorRT-LLM's CudaVmmArena therefore create handles ahead of time and
// only map/unmap on the critical path.
//
// Approach. The pool creates `num_pages` handles of `page_bytes` at construction (all or nothing:
// if one create fails, the ones made are released and the constructor throws OutOfMemory or the
// driver's error). Pages are indices. PageFreeOrder::lifo (the default) hands out the page released
// last (warm in caches and TLBs on the host) from a stack: allocate and release touch only its top,
// which matters because a replay in accounting mode allocates tens of millions of pages.
// PageFreeOrder::lru hands out the page released longest ago, so pages that still hold
// prefix-cached KV (the backend keeps their index entries while they are free) are reused oldest
// first; its free list is threaded through prev/next index arrays so that take() removes one
// particular free page (a prefix-cache hit revives it) in O(1). (take() on a lifo pool removes the
// page from the stack in O(free pages); nothing calls it there: only prefix sharing takes pages.)
// allocate_pages / release_pages do the same for a row of pages at once (the vmm backend's
// accounting moves whole rows). Both orders hand out page 0 first. The pool knows nothing about where pages are mapped.
// Without a driver (accounting only) a page is just an index.
//
// Limitations. Not thread-safe (the backend's mutex guards it). The page count is fixed for the
// pool's lifetime; growing or shrinking the budget means a new pool. Handles are released only at
// destruction, and every page must be back (unmapped) by then.
enum class PageFreeOrder : std::uint8_t { lifo, lru };

class PhysicalPagePool {
 public:
  /// `driver` nullptr: accounting only (no handles).
  PhysicalPagePool(VmDriver* driver, std::size_t page_bytes, std::int64_t num_pages,
                   PageFreeOrder order = PageFreeOrder::lifo);
  ~PhysicalPagePool();
  PhysicalPagePool(const PhysicalPagePool&) = delete;
  PhysicalPagePool& operator=(const PhysicalPagePool&) = delete;

  /// A free page, or nullopt (nothing changes) when none is left.
  [[nodiscard]] std::optional<PageId> allocate() {
    const PageId p = allocate_page();
    return p == kNoPage ? std::nullopt : std::optional<PageId>(p);
  }
  /// allocate() for the per-page hot path: kNoPage when none is left. Inline and without the
  /// optional: GCC builds an optional<int32_t> on the stack from two stores and reads it back
  /// with one wider load, a store-forwarding stall that was most of a replay's cost per page.
  [[nodiscard]] PageId allocate_page() {
    if (order_ != PageFreeOrder::lifo) return allocate_lru();
    if (stack_.empty()) return kNoPage;
    const PageId p = stack_.back();
    stack_.pop_back();
    add_free(-1);
    in_use_[static_cast<std::size_t>(p)] = 1;
    return p;
  }
  /// allocate_page() for each of `out`, in order (the same pages): true, or false with nothing
  /// taken when fewer are free. A replay in accounting mode takes a row of pages at a time.
  [[nodiscard]] bool allocate_pages(std::span<PageId> out) {
    if (std::cmp_less(num_free(), out.size())) return false;
    if (order_ != PageFreeOrder::lifo) {
      for (PageId& p : out) p = allocate_lru();
      return true;
    }
    const std::size_t top = stack_.size();
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i] = stack_[top - 1 - i];
      in_use_[static_cast<std::size_t>(out[i])] = 1;
    }
    stack_.resize(top - out.size());
    add_free(-static_cast<std::int64_t>(out.size()));
    return true;
  }
  /// release() of each of `pages`, in order (the last one is handed out first).
  void release_pages(std::span<const PageId> pages) {
    if (order_ != PageFreeOrder::lifo) {
      for (const PageId p : pages) release(p);
      return;
    }
    for (const PageId p : pages) mark_free(p);
    stack_.insert(stack_.end(), pages.begin(), pages.end());
    add_free(static_cast<std::int64_t>(pages.size()));
  }
  /// Takes the free page `page` off the free list (it must be free).
  void take(PageId page);
  /// Gives `page` (in use) back. Inline for lifo, like allocate_page(): once per page unmapped.
  void release(PageId page) {
    mark_free(page);
    add_free(1);
    if (order_ == PageFreeOrder::lifo) {
      stack_.push_back(page);
    } else {
      append_lru(page);
    }
  }

  [[nodiscard]] PhysHandle handle(PageId page) const { return handles_[static_cast<std::size_t>(page)]; }
  [[nodiscard]] std::size_t page_bytes() const noexcept { return page_bytes_; }
  [[nodiscard]] std::int64_t num_pages() const noexcept { return static_cast<std::int64_t>(in_use_.size()); }
  /// Readable from any thread (a replay's held_bytes() while vmm's background mapper takes pages);
  /// the pool itself is changed by one thread at a time (the backend's lock).
  [[nodiscard]] std::int64_t num_free() const noexcept { return num_free_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::int64_t num_used() const noexcept { return num_pages() - num_free(); }
  [[nodiscard]] bool in_use(PageId page) const { return in_use_[static_cast<std::size_t>(page)] != 0; }

 private:
  VmDriver* driver_;
  std::size_t page_bytes_;
  std::vector<PhysHandle> handles_;
  PageFreeOrder order_;
  std::vector<char> in_use_;
  // lifo: the free pages, the next one to hand out last.
  std::vector<PageId> stack_;
  // lru: a doubly linked list over page ids; allocate() takes the head, release() appends.
  std::vector<PageId> prev_, next_;
  PageId head_ = -1, tail_ = -1;
  /// Atomic for the readers of num_free() only: every writer holds the backend's lock, so a plain
  /// load and store (add_free) suffice, with no locked read-modify-write on the per-page path.
  std::atomic<std::int64_t> num_free_{0};
  void add_free(std::int64_t delta) noexcept {
    num_free_.store(num_free_.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  }
  void unlink(PageId page) noexcept;
  void append_lru(PageId page) noexcept;
  /// Marks the in-use `page` free (the caller puts it on the free list and counts it).
  void mark_free(PageId page) {
    KVLAB_EXPECTS(page >= 0 && page < num_pages() && in_use(page), "page " + std::to_string(page) + " is not in use");
    in_use_[static_cast<std::size_t>(page)] = 0;
  }
  [[nodiscard]] PageId allocate_lru();
};

}  // namespace kvlab
