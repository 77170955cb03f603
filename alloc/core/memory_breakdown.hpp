#pragma once
// The vLLM paper's Figure 2 categories. Every byte of a backend's KV capacity is in exactly one:
//   token_states            KV of tokens the sequences hold now
//   reserved                allocated for tokens a sequence will still produce (it will fill them)
//   internal_fragmentation  allocated but never to be filled (over-reservation, block/page tails)
//   external_fragmentation  lost to the allocator: held by an arena beyond what was asked for (a
//                           buddy block's rounding, alignment padding), or free but in holes too
//                           small for the allocation that is waiting
//   free                    everything else
// so the five fractions sum to 1 by construction.
#include <cstddef>

namespace kvlab {

struct MemoryBreakdown {
  std::size_t capacity = 0;
  std::size_t token_states = 0;
  std::size_t reserved = 0;
  std::size_t internal_fragmentation = 0;
  std::size_t external_fragmentation = 0;
  std::size_t shared_savings = 0;  ///< bytes that would be needed without sharing (not part of capacity)
  /// Informational, NOT one of the five: bytes of blocks that hold prefix-cached KV no sequence
  /// references (reusable on demand, evicted when reallocated). They are counted inside `free`.
  std::size_t cached = 0;

  [[nodiscard]] std::size_t used() const noexcept {
    return token_states + reserved + internal_fragmentation + external_fragmentation;
  }
  [[nodiscard]] std::size_t free() const noexcept { return capacity - used(); }
  /// Bytes the sequences asked for (token states + reserved + internal fragmentation); an arena's
  /// rounding of those requests (contiguous-*-buddy) is in external_fragmentation, not here.
  [[nodiscard]] std::size_t allocated() const noexcept { return token_states + reserved + internal_fragmentation; }

  [[nodiscard]] double fraction(std::size_t part) const noexcept {
    return capacity == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(capacity);
  }
};

/// The same five categories as fractions of capacity, averaged over time or runs.
struct MemoryFractions {
  double token_states = 0, reserved = 0, internal_fragmentation = 0, external_fragmentation = 0, free = 0;

  static MemoryFractions of(const MemoryBreakdown& b) noexcept {
    return {b.fraction(b.token_states), b.fraction(b.reserved), b.fraction(b.internal_fragmentation),
            b.fraction(b.external_fragmentation), b.fraction(b.free())};
  }
  [[nodiscard]] double sum() const noexcept {
    return token_states + reserved + internal_fragmentation + external_fragmentation + free;
  }
  MemoryFractions& add_scaled(const MemoryFractions& o, double w) noexcept {
    token_states += w * o.token_states;
    reserved += w * o.reserved;
    internal_fragmentation += w * o.internal_fragmentation;
    external_fragmentation += w * o.external_fragmentation;
    free += w * o.free;
    return *this;
  }
};

}  // namespace kvlab
