#pragma once
// Where the contiguous backend places its reservations: an arena over one fixed region
// [0, capacity) that manages offsets only (no bytes, no pointers).
//
// Two placements stand behind it: FirstFitArena (address-ordered first fit, coalescing; no
// rounding beyond an alignment) and BuddyArena (binary buddy: power-of-two blocks, the allocator
// the vLLM paper assumed for its Orca baselines). A backend chooses one; the accounting treats the
// space a block holds beyond the bytes asked for as the allocator's waste (external fragmentation
// in the vLLM paper's Figure 2 categories).
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

namespace kvlab {

class ReservationArena {
 public:
  virtual ~ReservationArena() = default;

  /// Places `bytes` and returns its offset, or returns nullopt and changes nothing.
  [[nodiscard]] virtual std::optional<std::size_t> allocate(std::size_t bytes) = 0;
  /// Whether allocate(bytes) would succeed. No side effects.
  [[nodiscard]] virtual bool can_allocate(std::size_t bytes) const = 0;
  /// Returns the block at `offset`; throws InvalidArgument for an offset that is not allocated.
  virtual void deallocate(std::size_t offset) = 0;

  [[nodiscard]] virtual std::size_t capacity() const noexcept = 0;
  /// Size the block at `offset` really occupies (after the arena's rounding).
  [[nodiscard]] virtual std::size_t block_size(std::size_t offset) const = 0;
  [[nodiscard]] virtual std::size_t free_bytes() const noexcept = 0;
  [[nodiscard]] virtual std::size_t largest_hole() const noexcept = 0;
  /// Free bytes in holes too small for an allocation of `bytes`: the external fragmentation an
  /// allocation of that size sees.
  [[nodiscard]] virtual std::size_t free_bytes_in_holes_smaller_than(std::size_t bytes) const noexcept = 0;
  [[nodiscard]] virtual std::size_t num_allocations() const noexcept = 0;
  /// Holes as (offset, size), in address order.
  [[nodiscard]] virtual std::vector<std::pair<std::size_t, std::size_t>> holes() const = 0;
};

}  // namespace kvlab
