#pragma once
// The sequence table every backend keeps: SeqId -> the backend's per-sequence state, which starts
// with what every backend tracks (SequenceState). Lookups of unknown ids fail the same way
// everywhere; the front door (KvBackend) has already checked ids before a hook runs, so at() failing
// inside a hook is a backend bug.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "alloc/error.hpp"

namespace kvlab {

using SeqId = std::int64_t;

/// What every backend knows of a sequence.
struct SequenceState {
  std::int64_t length = 0;         ///< tokens whose KV slots exist
  std::int64_t final_tokens = 0;   ///< tokens it will hold when it finishes (SequenceSpec::final_tokens)
  std::int64_t cached_tokens = 0;  ///< prompt tokens that came from the prefix cache at admit
};

template <class State>
class SequenceTable {
 public:
  [[nodiscard]] bool contains(SeqId id) const { return map_.count(id) != 0; }
  [[nodiscard]] std::size_t size() const noexcept { return map_.size(); }
  [[nodiscard]] bool empty() const noexcept { return map_.empty(); }

  [[nodiscard]] const State& at(SeqId id) const {
    const auto it = map_.find(id);
    KVLAB_EXPECTS(it != map_.end(), "unknown sequence " + std::to_string(id));
    return it->second;
  }
  [[nodiscard]] State& at(SeqId id) { return const_cast<State&>(std::as_const(*this).at(id)); }

  State& insert(SeqId id, State s) {
    const auto [it, fresh] = map_.emplace(id, std::move(s));
    KVLAB_EXPECTS(fresh, "sequence " + std::to_string(id) + " already exists");
    return it->second;
  }
  void erase(SeqId id) { map_.erase(id); }

  [[nodiscard]] auto begin() const { return map_.begin(); }
  [[nodiscard]] auto end() const { return map_.end(); }
  [[nodiscard]] auto begin() { return map_.begin(); }
  [[nodiscard]] auto end() { return map_.end(); }

 private:
  std::unordered_map<SeqId, State> map_;
};

}  // namespace kvlab
