#pragma once
// The chained block-hash prefix index shared by the paged backend's hash mode
// (paged/hash_prefix_cache.hpp, vLLM v1's automatic prefix caching) and the vmm backend's page
// sharing (vmm/page_sharing.hpp). docs/prefix-caching.md and docs/vmm.md describe both uses.
#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvlab {

// Design note
//
// Rationale. Both prefix caches that key KV by content need the same thing: find the longest
// prefix of a prompt, in whole blocks of tokens, whose KV some physical memory still holds, and
// never share KV that differs. Two copies of that scheme (one per backend) drifted apart in
// storage but not in rules; one index keeps the rules in one place.
//
// Approach. A block of `block_tokens` token ids becomes an *entry* naming the `units_per_entry`
// units of physical memory that hold its KV (a unit is the caller's: one paged block, or a vmm
// block's G rows x T tensor pages). Block i's key chains its parent's: key_i = H(key_{i-1}, ids of
// block i), with the extra keys (salt) mixed into block 0 (alloc/backend/block_hash.hpp). The key only
// finds a candidate; a hit is verified exactly: the candidate's stored ids equal the block's, and
// its parent is the entry matched one step earlier in the same *generation* (bumped whenever an
// entry is dropped, so the cached children of a dropped parent are unreachable), or for block 0
// its stored extra keys are equal. A 64-bit collision or a stale child therefore never shares
// wrong KV. Entry ids are recycled; unit -> entry is kept per unit, so the caller drops the entry
// of a unit it is about to overwrite in O(1) (forget_unit). A unit is in at most one entry.
//
// Limitations. Not thread-safe (the owning backend serialises calls). Only whole blocks are
// indexed. The index owns no memory and decides no eviction: when a unit is reused is the
// caller's policy (an LRU free queue in both backends).
class ChainedPrefixIndex {
 public:
  using EntryId = std::int32_t;
  using UnitId = std::int32_t;  ///< a BlockId (paged) or a PageId (vmm)
  /// Fills block `i`'s units (units_per_entry of them, none indexed yet) into `out`.
  using UnitsOfBlock = std::function<void(std::int64_t i, std::span<UnitId> out)>;

  ChainedPrefixIndex(std::int64_t num_units, std::int64_t block_tokens, std::int64_t units_per_entry);

  /// Entries of the longest verified chain over the first `max_blocks` blocks of `tokens` (which
  /// holds at least max_blocks * block_tokens ids). No side effects.
  [[nodiscard]] std::vector<EntryId> match(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                           std::int64_t max_blocks) const;
  /// Enters blocks [from, to) of a sequence whose block from-1 is entry `parent` (-1 when from is
  /// 0). Stops at the first block whose content is already cached under another entry (those
  /// units stay private to the sequence); drops a stale entry or a true collision found under a
  /// block's key. Returns the number of blocks entered.
  std::int64_t insert(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra, EntryId parent,
                      std::int64_t from, std::int64_t to, const UnitsOfBlock& units);
  /// Drops the entry holding `unit`, if any (its bytes are about to change). True when it had one.
  bool forget_unit(UnitId unit);
  /// The entry holding `from` now names `to` instead (its bytes were copied there: a move between
  /// memory tiers). Key, parent and generation stay, so its cached children stay reachable. `to`
  /// must hold no entry. False when `from` held none.
  bool move_unit(UnitId from, UnitId to);

  [[nodiscard]] EntryId entry_of(UnitId unit) const noexcept { return unit_entry_[static_cast<std::size_t>(unit)]; }
  [[nodiscard]] std::span<const UnitId> units(EntryId entry) const noexcept;
  [[nodiscard]] std::int64_t block_tokens() const noexcept { return block_tokens_; }
  [[nodiscard]] std::int64_t units_per_entry() const noexcept { return units_per_entry_; }
  [[nodiscard]] std::size_t num_entries() const noexcept { return table_.size(); }
  /// Called with every unit that loses its entry (forget_unit, or a stale entry insert drops).
  void set_on_unindex(std::function<void(UnitId)> hook) { on_unindex_ = std::move(hook); }

 private:
  struct Entry {
    bool cached = false;
    std::uint64_t key = 0;
    std::uint32_t generation = 0;  // bumped whenever the entry is dropped
    EntryId parent = -1;
    std::uint32_t parent_generation = 0;
    std::vector<std::int32_t> tokens;
    std::vector<std::int64_t> extra;  // block 0 only
  };
  /// Whether entry `e` holds exactly block i of a sequence whose block i-1 is `parent` (-1: i = 0).
  [[nodiscard]] bool verifies(EntryId e, std::span<const std::int32_t> block, EntryId parent,
                              std::span<const std::int64_t> extra) const;
  EntryId new_entry();
  void forget(EntryId e);

  std::int64_t block_tokens_, units_per_entry_;
  std::vector<Entry> entries_;
  std::vector<UnitId> entry_units_;  // [entry][units_per_entry]
  std::vector<EntryId> free_entries_;
  std::unordered_map<std::uint64_t, EntryId> table_;  // key -> entry
  std::vector<EntryId> unit_entry_;                   // [unit] -> entry or -1
  std::function<void(UnitId)> on_unindex_;
};

}  // namespace kvlab
