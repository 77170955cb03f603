#pragma once
// A long series of floats kept as runs of equal values: the replayer's inter-token gaps.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "serving/support/radix_sort.hpp"

namespace kvlab {

// Design note
//
// Rationale. A replay records the gap before every token it generates (ITL statistics need every
// one: percentiles are exact), millions in a run of a public trace. But one step's gap is the same
// for every sequence that was also in the step before, so the gaps arrive in runs about a batch
// long. Kept one float each they were a vector that grew by doubling to tens of MB, paid for in
// fresh pages (page faults and zeroing: about a quarter of a memory-mode replay's samples on a VM host),
// then a sorted copy of doubles as large again. Kept as runs about a batch long they take a few MB.
//
// Approach. Each run is one 64-bit word: the value's order key (radix::key_of) above, its length
// below (up to 2^32 - 1; a longer run continues in the next word), so that sorting the words by
// their upper half sorts the values. push_back extends the last run when the value has the same
// bits. sort() orders the runs by value (a radix sort through one scratch copy of the words; equal
// values end adjacent, -0.0 before +0.0); for_each and run() then visit them ascending.
//
// Limitations. A series whose consecutive values all differ (one sequence running: every step's
// gap is another) takes a word a value, up to two while the vector grows: four times a vector of
// floats. NaN has no place in the order (the replayer's gaps never are).
class FloatRuns {
 public:
  /// Appends `x` (not NaN).
  void push_back(float x);
  /// Values appended.
  [[nodiscard]] std::int64_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// Runs kept (at most size()).
  [[nodiscard]] std::size_t runs() const noexcept { return words_.size(); }
  /// Orders the runs by value, ascending; push_back after it appends in arrival order again.
  void sort();
  struct Run {
    double value;
    std::int64_t count;
  };
  /// Run `k` (< runs()), in the order kept (after sort(): ascending).
  [[nodiscard]] Run run(std::size_t k) const noexcept { return run_of(words_[k]); }
  /// Calls fn(value, count) for each run, in the order kept.
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (const std::uint64_t w : words_) {
      const Run r = run_of(w);
      fn(r.value, r.count);
    }
  }
  /// Bytes kept per value at most (a word per value, the vector's capacity up to twice its size),
  /// and what sort() needs on top of them: a scratch word per value and the radix counts.
  static constexpr std::size_t kBytesPerValue = 2 * sizeof(std::uint64_t), kSortBytesPerValue = sizeof(std::uint64_t);
  static constexpr std::size_t kSortFixedBytes = 32 / radix::kPassBits * radix::kCountBytesPerPass;

 private:
  static constexpr std::uint64_t kMaxCount = 0xffff'ffffULL;
  [[nodiscard]] static Run run_of(std::uint64_t word) noexcept;
  std::vector<std::uint64_t> words_;  // key << 32 | count
  std::int64_t size_ = 0;
};

}  // namespace kvlab
