#pragma once
// A flat hash index from a 64-bit id to a pointer owned elsewhere: how SequenceTable finds a
// sequence's state.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace kvlab {

// Design note
//
// Rationale. The replayer asks its backend about every running sequence several times a step
// (contains, can_grow, grow, length), each time by id. Through std::unordered_map each lookup
// divides by a prime bucket count and then reads a bucket, a node and its key from three places;
// that was a tenth of a whole replay's time (issue 34, `perf record` of
// BM_ReplayAzureConversation). Here a lookup is one multiply and, almost always, one cache line.
//
// Approach. Open addressing with linear probing over a power-of-two table kept at most half full;
// the home slot is the id times 2^64/phi, top bits (Fibonacci hashing, so consecutive ids spread).
// Erase shifts the entries behind the hole back instead of leaving tombstones, so lookups never
// slow down however many ids come and go. The index owns no values: it maps ids to pointers whose
// targets must stay put while indexed (SequenceTable keeps them in a node map).
//
// Limitations. The id kEmpty (INT64_MIN) marks an empty slot and cannot be indexed. Not
// thread-safe.
template <class T>
class IdIndex {
 public:
  static constexpr std::int64_t kEmpty = std::numeric_limits<std::int64_t>::min();

  /// The pointer indexed under `id`, or nullptr.
  [[nodiscard]] T* find(std::int64_t id) const noexcept {
    if (size_ == 0) return nullptr;
    for (std::size_t i = home(id);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.id == id) return e.value;  // an empty slot holds nullptr: looking up kEmpty finds nothing
      if (e.id == kEmpty) return nullptr;
    }
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  /// Indexes `value` under `id`, which must not be indexed yet nor be kEmpty (the caller checks).
  void insert(std::int64_t id, T* value) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? kMinSlots : slots_.size() * 2);
    std::size_t i = home(id);
    while (slots_[i].id != kEmpty) i = (i + 1) & mask_;
    slots_[i] = {id, value};
    ++size_;
  }

  /// Forgets `id`; false when it was not indexed.
  bool erase(std::int64_t id) noexcept {
    if (size_ == 0 || id == kEmpty) return false;
    std::size_t hole = home(id);
    while (slots_[hole].id != id) {
      if (slots_[hole].id == kEmpty) return false;
      hole = (hole + 1) & mask_;
    }
    // Backward shift: an entry after the hole moves into it when the hole lies between its home
    // and where it sits, so no entry is ever separated from its home by an empty slot.
    for (std::size_t j = (hole + 1) & mask_; slots_[j].id != kEmpty; j = (j + 1) & mask_) {
      const std::size_t from_home = (j - home(slots_[j].id)) & mask_;
      if (from_home >= ((j - hole) & mask_)) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Entry{};
    --size_;
    return true;
  }

 private:
  struct Entry {
    std::int64_t id = kEmpty;
    T* value = nullptr;
  };
  static constexpr std::size_t kMinSlots = 16;

  [[nodiscard]] std::size_t home(std::int64_t id) const noexcept {
    return static_cast<std::size_t>((static_cast<std::uint64_t>(id) * 0x9E3779B97F4A7C15ULL) >> shift_);
  }
  void rehash(std::size_t slots) {
    std::vector<Entry> old(slots, Entry{});
    old.swap(slots_);
    mask_ = slots - 1;
    shift_ = 64 - std::countr_zero(slots);
    size_ = 0;
    for (const Entry& e : old)
      if (e.id != kEmpty) insert(e.id, e.value);
  }

  std::vector<Entry> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace kvlab
