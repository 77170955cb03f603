#include "vmm/page_pool.hpp"

#include <algorithm>
#include <string>

#include "alloc/core/error.hpp"

namespace kvlab {

PhysicalPagePool::PhysicalPagePool(VmDriver* driver, std::size_t page_bytes, std::int64_t num_pages,
                                   PageFreeOrder order)
    : driver_(driver), page_bytes_(page_bytes), order_(order) {
  KVLAB_EXPECTS(num_pages >= 0 && num_pages <= INT32_MAX, "page count out of range");
  KVLAB_EXPECTS(page_bytes > 0, "page size must be positive");
  if (driver_ != nullptr) {
    KVLAB_EXPECTS(page_bytes % driver_->granularity() == 0,
                  "page size " + std::to_string(page_bytes) + " is not a multiple of the " + driver_->name() +
                      " driver's granularity " + std::to_string(driver_->granularity()));
    handles_.reserve(static_cast<std::size_t>(num_pages));
    try {
      for (std::int64_t i = 0; i < num_pages; ++i) {
        const std::optional<PhysHandle> h = driver_->create(page_bytes);
        if (!h) {
          KVLAB_THROW(OutOfMemory, "creating physical page " + std::to_string(i) + " of " + std::to_string(num_pages) +
                                       " (" + std::to_string(page_bytes) + " bytes each): out of memory");
        }
        handles_.push_back(*h);
      }
    } catch (...) {
      // All or nothing: give back what was made, newest first. A release that fails as well
      // cannot be reported twice; the first error is the one that matters.
      for (auto it = handles_.rbegin(); it != handles_.rend(); ++it) {
        try {
          driver_->release(*it);
        } catch (...) {
        }
      }
      throw;
    }
  } else {
    handles_.assign(static_cast<std::size_t>(num_pages), 0);
  }
  const auto n = static_cast<std::size_t>(num_pages);
  in_use_.assign(n, 0);
  num_free_.store(num_pages, std::memory_order_relaxed);
  if (order_ == PageFreeOrder::lifo) {
    stack_.resize(n);
    for (std::size_t i = 0; i < n; ++i) stack_[i] = static_cast<PageId>(n - 1 - i);  // page 0 on top
    return;
  }
  prev_.resize(n);
  next_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {  // page 0 first
    prev_[i] = static_cast<PageId>(i) - 1;
    next_[i] = i + 1 < n ? static_cast<PageId>(i + 1) : -1;
  }
  head_ = n > 0 ? 0 : -1;
  tail_ = static_cast<PageId>(n) - 1;
}

void PhysicalPagePool::unlink(PageId page) noexcept {
  const auto i = static_cast<std::size_t>(page);
  if (prev_[i] >= 0)
    next_[static_cast<std::size_t>(prev_[i])] = next_[i];
  else
    head_ = next_[i];
  if (next_[i] >= 0)
    prev_[static_cast<std::size_t>(next_[i])] = prev_[i];
  else
    tail_ = prev_[i];
  prev_[i] = next_[i] = -1;
  add_free(-1);
}

PhysicalPagePool::~PhysicalPagePool() {
  if (driver_ == nullptr) return;
  for (auto it = handles_.rbegin(); it != handles_.rend(); ++it) {
    try {
      driver_->release(*it);
    } catch (...) {
      // Nothing to do in a destructor: the driver's own leak accounting reports it.
    }
  }
}

PageId PhysicalPagePool::allocate_lru() {
  if (head_ < 0) return kNoPage;
  const PageId p = head_;
  unlink(p);
  in_use_[static_cast<std::size_t>(p)] = 1;
  return p;
}

void PhysicalPagePool::take(PageId page) {
  KVLAB_EXPECTS(page >= 0 && page < num_pages() && !in_use(page), "page " + std::to_string(page) + " is not free");
  if (order_ == PageFreeOrder::lifo) {
    stack_.erase(std::find(stack_.begin(), stack_.end(), page));  // free, so on the stack; the order of the rest stays
    add_free(-1);
  } else {
    unlink(page);
  }
  in_use_[static_cast<std::size_t>(page)] = 1;
}

void PhysicalPagePool::append_lru(PageId page) noexcept {
  const auto i = static_cast<std::size_t>(page);
  next_[i] = -1;  // at the tail
  prev_[i] = tail_;
  if (tail_ >= 0)
    next_[static_cast<std::size_t>(tail_)] = page;
  else
    head_ = page;
  tail_ = page;
}

}  // namespace kvlab
