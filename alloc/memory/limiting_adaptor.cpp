#include "alloc/memory/limiting_adaptor.hpp"

#include "alloc/core/error.hpp"

namespace kvlab {

std::size_t LimitingAdaptor::allocated() const {
  std::lock_guard lock(mutex_);
  return allocated_;
}

void* LimitingAdaptor::do_allocate(std::size_t bytes, std::size_t alignment) {
  {
    std::lock_guard lock(mutex_);
    if (bytes > limit_ - allocated_) {
      KVLAB_THROW(OutOfMemory, "limit of " + std::to_string(limit_) + " bytes reached: " + std::to_string(allocated_) +
                                   " allocated, " + std::to_string(bytes) + " requested");
    }
    allocated_ += bytes;  // claim first so concurrent callers cannot overshoot together
  }
  try {
    return upstream_.allocate(bytes, alignment);
  } catch (...) {
    std::lock_guard lock(mutex_);
    allocated_ -= bytes;
    throw;
  }
}

void LimitingAdaptor::do_deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept {
  upstream_.deallocate(p, bytes, alignment);
  std::lock_guard lock(mutex_);
  allocated_ -= bytes;
}

}  // namespace kvlab
