#include "vmm/page_pool.hpp"

#include <string>

#include "alloc/error.hpp"

namespace kvlab {

PhysicalPagePool::PhysicalPagePool(VmDriver* driver, std::size_t page_bytes, std::int64_t num_pages)
    : driver_(driver), page_bytes_(page_bytes) {
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
  in_use_.assign(static_cast<std::size_t>(num_pages), 0);
  free_.reserve(static_cast<std::size_t>(num_pages));
  for (std::int64_t i = num_pages - 1; i >= 0; --i) free_.push_back(static_cast<PageId>(i));  // page 0 first
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

std::optional<PageId> PhysicalPagePool::allocate() {
  if (free_.empty()) return std::nullopt;
  const PageId p = free_.back();
  free_.pop_back();
  in_use_[static_cast<std::size_t>(p)] = 1;
  return p;
}

void PhysicalPagePool::release(PageId page) {
  KVLAB_EXPECTS(page >= 0 && page < num_pages() && in_use(page), "page " + std::to_string(page) + " is not in use");
  in_use_[static_cast<std::size_t>(page)] = 0;
  free_.push_back(page);
}

}  // namespace kvlab
