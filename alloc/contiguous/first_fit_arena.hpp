#pragma once
// An address-ordered first-fit arena over one fixed region [0, capacity), managing offsets only.
//
// Rationale: the contiguous backend must show *real* external fragmentation, so reservations are
// placed in one region the way a static KV pool would place them. First-fit with immediate
// coalescing is the classic choice (Knuth; Wilson et al. found address-ordered first fit among the
// lowest-fragmentation policies) and, unlike a buddy allocator (BuddyArena, what the vLLM paper
// assumed for Orca), it adds no power-of-two rounding of its own, so it shows what the max, pow2
// and oracle policies cost by themselves.
// Limitations: O(holes) allocation; fine for the thousands of live sequences kvlab simulates.
#include <cstddef>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "alloc/contiguous/reservation_arena.hpp"

namespace kvlab {

class FirstFitArena final : public ReservationArena {
 public:
  /// `alignment`: every offset and size is rounded up to a multiple (a power of two).
  explicit FirstFitArena(std::size_t capacity, std::size_t alignment = 256);

  /// Places `bytes` (rounded up to the alignment) in the lowest hole that fits, or returns nullopt
  /// and changes nothing.
  [[nodiscard]] std::optional<std::size_t> allocate(std::size_t bytes) override;
  /// Whether allocate(bytes) would succeed. No side effects.
  [[nodiscard]] bool can_allocate(std::size_t bytes) const override;
  /// Returns the block at `offset`; throws InvalidArgument for an offset that is not allocated.
  void deallocate(std::size_t offset) override;

  [[nodiscard]] std::size_t capacity() const noexcept override { return capacity_; }
  [[nodiscard]] std::size_t alignment() const noexcept { return alignment_; }
  [[nodiscard]] std::size_t rounded(std::size_t bytes) const noexcept {
    return (bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  /// Size the block at `offset` really occupies (after rounding).
  [[nodiscard]] std::size_t block_size(std::size_t offset) const override;
  [[nodiscard]] std::size_t free_bytes() const noexcept override { return free_bytes_; }
  [[nodiscard]] std::size_t largest_hole() const noexcept override;
  /// Free bytes in holes smaller than `bytes` (rounded): the external fragmentation an
  /// allocation of that size sees.
  [[nodiscard]] std::size_t free_bytes_in_holes_smaller_than(std::size_t bytes) const noexcept override;
  [[nodiscard]] std::size_t num_allocations() const noexcept override { return used_.size(); }
  /// Holes as (offset, size), in address order.
  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> holes() const override;

 private:
  std::size_t capacity_;
  std::size_t alignment_;
  std::size_t free_bytes_;
  std::map<std::size_t, std::size_t> holes_;           // offset -> size, address order
  std::unordered_map<std::size_t, std::size_t> used_;  // offset -> size
};

}  // namespace kvlab
