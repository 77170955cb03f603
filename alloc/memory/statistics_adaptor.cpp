#include "alloc/memory/statistics_adaptor.hpp"

#include <algorithm>

namespace kvlab {

AllocationStatistics StatisticsAdaptor::statistics() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void* StatisticsAdaptor::do_allocate(std::size_t bytes, std::size_t alignment) {
  void* p = upstream_.allocate(bytes, alignment);  // counts nothing if upstream throws
  std::lock_guard lock(mutex_);
  stats_.current_bytes += bytes;
  stats_.total_bytes += bytes;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  ++stats_.current_count;
  ++stats_.total_count;
  stats_.peak_count = std::max(stats_.peak_count, stats_.current_count);
  return p;
}

void StatisticsAdaptor::do_deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept {
  upstream_.deallocate(p, bytes, alignment);
  std::lock_guard lock(mutex_);
  stats_.current_bytes -= bytes;
  --stats_.current_count;
}

}  // namespace kvlab
