#pragma once
// A binary buddy allocator over one fixed region [0, capacity), managing offsets only.
//
// Rationale: the vLLM paper (SOSP'23, sec. 6.1) implemented its Orca baselines "assuming it uses
// the buddy allocation algorithm to determine the memory address to store KV cache", and its
// Figure 2 / Figure 13 numbers for Orca (Pow2) and Orca (Oracle) carry that allocator's rounding:
// a reservation occupies the next power of two of its size. To reproduce those figures the
// contiguous backend can place reservations here instead of in the FirstFitArena.
// Approach: sizes are counted in units (the contiguous backend's unit is one token's KV bytes, so
// a reservation of 2^k tokens is exactly one order-k block). A region that is not a power of two
// of units is split into power-of-two roots, largest first, each a buddy tree of its own (blocks
// never merge across roots). Allocation takes the lowest-addressed free block of the smallest
// sufficient order and splits it; freeing merges a block with its buddy while both are free.
// Limitations: O(log) per operation over std::set free lists; the region's tail below one unit
// is never used.
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "alloc/contiguous/reservation_arena.hpp"

namespace kvlab {

class BuddyArena final : public ReservationArena {
 public:
  /// `unit`: the smallest block in bytes (any positive size); capacity is used in whole units.
  BuddyArena(std::size_t capacity, std::size_t unit);

  [[nodiscard]] std::optional<std::size_t> allocate(std::size_t bytes) override;
  [[nodiscard]] bool can_allocate(std::size_t bytes) const override;
  void deallocate(std::size_t offset) override;

  [[nodiscard]] std::size_t capacity() const noexcept override { return capacity_units_ * unit_; }
  /// Bytes a request of `bytes` occupies: the next power of two of its units (0 when no block of
  /// this region is that large).
  [[nodiscard]] std::size_t rounded(std::size_t bytes) const noexcept;
  [[nodiscard]] std::size_t block_size(std::size_t offset) const override;
  [[nodiscard]] std::size_t free_bytes() const noexcept override { return free_units_ * unit_; }
  [[nodiscard]] std::size_t largest_hole() const noexcept override;
  [[nodiscard]] std::size_t free_bytes_in_holes_smaller_than(std::size_t bytes) const noexcept override;
  [[nodiscard]] std::size_t num_allocations() const noexcept override { return used_.size(); }
  /// Free blocks as (offset, size) in address order (adjacent free blocks that are not buddies
  /// stay apart: the allocator cannot hand them out as one).
  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> holes() const override;

 private:
  /// Units that hold `bytes` (at least one).
  [[nodiscard]] std::size_t units_for(std::size_t bytes) const noexcept;
  /// The order of the smallest block that holds `bytes`; -1 when no order of this region does.
  [[nodiscard]] int order_for(std::size_t bytes) const noexcept;
  /// Start (in units) of the root that holds the unit `u`, and that root's order.
  [[nodiscard]] std::pair<std::size_t, int> root_of(std::size_t u) const;

  std::size_t unit_;
  std::size_t capacity_units_ = 0;
  std::size_t free_units_ = 0;
  std::map<std::size_t, int> roots_;           // start unit -> order
  std::vector<std::set<std::size_t>> free_;    // per order: start units of free blocks
  std::unordered_map<std::size_t, int> used_;  // start unit -> order
};

}  // namespace kvlab
