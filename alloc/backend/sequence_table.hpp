#pragma once
// The sequence table every backend keeps: SeqId -> the backend's per-sequence state, which starts
// with what every backend tracks (SequenceState). Lookups of unknown ids fail the same way
// everywhere; the front door (KvBackend) has already checked ids before a hook runs, so at() failing
// inside a hook is a backend bug.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "alloc/core/error.hpp"

namespace kvlab {

using SeqId = std::int64_t;

/// What every backend knows of a sequence.
struct SequenceState {
  std::int64_t length = 0;         ///< tokens whose KV slots exist
  std::int64_t final_tokens = 0;   ///< tokens it will hold when it finishes (SequenceSpec::final_tokens)
  std::int64_t cached_tokens = 0;  ///< prompt tokens that came from the prefix cache at admit
};

/// A hash map with a one-entry memo: the front door and the scheduler ask about one sequence
/// several times in a row (contains, is_swapped, can_grow, grow), so the last entry found is
/// remembered. Entries never move until erased (std::unordered_map keeps node addresses across
/// rehashing), and erase forgets the memo.
template <class State>
class SequenceTable {
 public:
  /// The entry for `id`, or nullptr.
  [[nodiscard]] State* find(SeqId id) const {
    if (memo_ != nullptr && memo_id_ == id) return memo_;
    const auto it = map_.find(id);
    if (it == map_.end()) return nullptr;
    memo_id_ = id;
    memo_ = const_cast<State*>(&it->second);  // the table owns it mutably; constness is the caller's view
    return memo_;
  }
  [[nodiscard]] bool contains(SeqId id) const { return find(id) != nullptr; }
  [[nodiscard]] std::size_t size() const noexcept { return map_.size(); }
  [[nodiscard]] bool empty() const noexcept { return map_.empty(); }

  [[nodiscard]] const State& at(SeqId id) const {
    const State* s = find(id);
    KVLAB_EXPECTS(s != nullptr, "unknown sequence " + std::to_string(id));
    return *s;
  }
  [[nodiscard]] State& at(SeqId id) { return const_cast<State&>(std::as_const(*this).at(id)); }

  State& insert(SeqId id, State s) {
    const auto [it, fresh] = map_.emplace(id, std::move(s));
    KVLAB_EXPECTS(fresh, "sequence " + std::to_string(id) + " already exists");
    return it->second;
  }
  void erase(SeqId id) {
    if (memo_id_ == id) memo_ = nullptr;
    map_.erase(id);
  }

  [[nodiscard]] auto begin() const { return map_.begin(); }
  [[nodiscard]] auto end() const { return map_.end(); }
  [[nodiscard]] auto begin() { return map_.begin(); }
  [[nodiscard]] auto end() { return map_.end(); }

 private:
  std::unordered_map<SeqId, State> map_;
  mutable State* memo_ = nullptr;  // the entry found last (nullptr: none)
  mutable SeqId memo_id_ = 0;
};

}  // namespace kvlab
