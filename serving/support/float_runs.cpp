#include "serving/support/float_runs.hpp"

namespace kvlab {

void FloatRuns::push_back(float x) {
  const std::uint64_t key = std::uint64_t{radix::key_of<std::uint32_t>(x)} << 32;
  ++size_;
  if (!words_.empty()) {
    std::uint64_t& last = words_.back();
    if ((last & ~kMaxCount) == key && (last & kMaxCount) < kMaxCount) {
      ++last;
      return;
    }
  }
  words_.push_back(key | 1);
}

void FloatRuns::sort() { radix::radix_sort(words_, 32); }

FloatRuns::Run FloatRuns::run_of(std::uint64_t word) noexcept {
  return {static_cast<double>(radix::value_of<float>(static_cast<std::uint32_t>(word >> 32))),
          static_cast<std::int64_t>(word & kMaxCount)};
}

}  // namespace kvlab
