#pragma once
// The sequence table every backend keeps: SeqId -> the backend's per-sequence state, which starts
// with what every backend tracks (SequenceState). Lookups of unknown ids fail the same way
// everywhere; the front door (KvBackend) has already checked ids before a hook runs, so at() failing
// inside a hook is a backend bug.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "alloc/backend/id_index.hpp"
#include "alloc/core/error.hpp"

namespace kvlab {

using SeqId = std::int64_t;

/// What every backend knows of a sequence.
struct SequenceState {
  std::int64_t length = 0;         ///< tokens whose KV slots exist
  std::int64_t final_tokens = 0;   ///< tokens it will hold when it finishes (SequenceSpec::final_tokens)
  std::int64_t cached_tokens = 0;  ///< prompt tokens that came from the prefix cache at admit
};

/// A hash map with a flat index and a one-entry memo. The front door and the scheduler ask about
/// one sequence several times in a row (contains, is_swapped, can_grow, grow), so the last entry
/// found is remembered; other lookups go through the flat IdIndex (one cache line, not a node
/// map's three). Entries live in a std::unordered_map, which keeps node addresses across rehashing
/// (so the index and the memo may point at them) and gives iteration its order; erase forgets both.
template <class State>
class SequenceTable {
 public:
  /// The entry for `id`, or nullptr.
  [[nodiscard]] State* find(SeqId id) const {
    if (memo_ != nullptr && memo_id_ == id) return memo_;
    State* s = index_.find(id);
    if (s == nullptr) return nullptr;
    memo_id_ = id;
    memo_ = s;
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
    KVLAB_EXPECTS(id != IdIndex<State>::kEmpty, "sequence id " + std::to_string(id) + " is reserved");
    const auto [it, fresh] = map_.emplace(id, std::move(s));
    KVLAB_EXPECTS(fresh, "sequence " + std::to_string(id) + " already exists");
    try {
      index_.insert(id, &it->second);
    } catch (...) {  // out of memory growing the index: the table stays as it was
      map_.erase(it);
      throw;
    }
    return it->second;
  }
  void erase(SeqId id) {
    if (memo_id_ == id) memo_ = nullptr;
    index_.erase(id);
    map_.erase(id);
  }

  [[nodiscard]] auto begin() const { return map_.begin(); }
  [[nodiscard]] auto end() const { return map_.end(); }
  [[nodiscard]] auto begin() { return map_.begin(); }
  [[nodiscard]] auto end() { return map_.end(); }

 private:
  std::unordered_map<SeqId, State> map_;
  IdIndex<State> index_;           // id -> &map_[id]
  mutable State* memo_ = nullptr;  // the entry found last (nullptr: none)
  mutable SeqId memo_id_ = 0;
};

}  // namespace kvlab
