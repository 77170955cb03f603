#pragma once
// Physical KV memory that several backends share (several models, or tenants, on one GPU).
#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>

#include "alloc/core/error.hpp"

namespace kvlab {

/// Bytes of physical memory backends may hold mapped at once, and what they hold now. A backend that
/// maps memory on demand (the elastic family) takes bytes before it maps and gives them back after
/// it unmaps. A budget may have a parent (the GPU's memory): taking from a tenant's budget takes
/// from its parent too, so tenants share the parent's bytes up to their own limits. A limit can
/// drop below what is held (kvcached's `kvctl limit`): nothing more is taken until the holder gives
/// back enough (over_limit() tells it to return what it can). Not thread-safe: the tenants of one
/// replay run on one thread.
class PhysicalBudget {
 public:
  explicit PhysicalBudget(std::size_t limit, std::shared_ptr<PhysicalBudget> parent = nullptr)
      : limit_(limit), parent_(std::move(parent)) {}
  PhysicalBudget(const PhysicalBudget&) = delete;
  PhysicalBudget& operator=(const PhysicalBudget&) = delete;
  ~PhysicalBudget() {
    if (parent_ != nullptr) parent_->held_ -= std::min(held_, parent_->held_);
  }

  [[nodiscard]] std::size_t limit() const noexcept { return limit_; }
  [[nodiscard]] std::size_t held() const noexcept { return held_; }
  [[nodiscard]] bool over_limit() const noexcept { return held_ > limit_; }
  /// Bytes take() would grant now: what this limit and every parent's leave.
  [[nodiscard]] std::size_t available() const noexcept {
    const std::size_t own = held_ >= limit_ ? 0 : limit_ - held_;
    return parent_ == nullptr ? own : std::min(own, parent_->available());
  }
  /// Takes `bytes` here and from every parent if that many are available: true, else false with
  /// nothing taken.
  [[nodiscard]] bool take(std::size_t bytes) noexcept {
    if (bytes > available()) return false;
    for (PhysicalBudget* b = this; b != nullptr; b = b->parent_.get()) b->held_ += bytes;
    return true;
  }
  void give(std::size_t bytes) {
    KVLAB_EXPECTS(bytes <= held_,
                  "giving back " + std::to_string(bytes) + " bytes of a budget that holds " + std::to_string(held_));
    for (PhysicalBudget* b = this; b != nullptr; b = b->parent_.get()) b->held_ -= bytes;
  }
  /// A new limit from now on (may be below what is held).
  void set_limit(std::size_t limit) noexcept { limit_ = limit; }
  [[nodiscard]] const PhysicalBudget* parent() const noexcept { return parent_.get(); }

 private:
  std::size_t limit_;
  std::size_t held_ = 0;
  std::shared_ptr<PhysicalBudget> parent_;
};

}  // namespace kvlab
