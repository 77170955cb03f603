#pragma once
// The physical memory several elastic backends share (one GPU's KV memory, several tenants).
#include <cstddef>
#include <string>

#include "alloc/core/error.hpp"

namespace kvlab {

/// Bytes of physical memory a group of elastic backends may hold mapped at once, and what they
/// hold now. Each backend takes bytes before it maps a page group and gives them back after it
/// unmaps one. A backend alone gets a budget of its own capacity. Not thread-safe: the tenants of
/// one replay run on one thread.
class PhysicalBudget {
 public:
  explicit PhysicalBudget(std::size_t limit) : limit_(limit) {}
  PhysicalBudget(const PhysicalBudget&) = delete;
  PhysicalBudget& operator=(const PhysicalBudget&) = delete;

  [[nodiscard]] std::size_t limit() const noexcept { return limit_; }
  [[nodiscard]] std::size_t held() const noexcept { return held_; }
  [[nodiscard]] std::size_t available() const noexcept { return limit_ - held_; }
  /// Takes `bytes` if that many are left: true, else false with nothing taken.
  [[nodiscard]] bool take(std::size_t bytes) noexcept {
    if (bytes > available()) return false;
    held_ += bytes;
    return true;
  }
  void give(std::size_t bytes) {
    KVLAB_EXPECTS(bytes <= held_,
                  "giving back " + std::to_string(bytes) + " bytes of a budget that holds " + std::to_string(held_));
    held_ -= bytes;
  }

 private:
  std::size_t limit_;
  std::size_t held_ = 0;
};

}  // namespace kvlab
