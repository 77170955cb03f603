#include "alloc/backend/chained_prefix_index.hpp"

#include <algorithm>

#include "alloc/backend/block_hash.hpp"
#include "alloc/core/error.hpp"

namespace kvlab {

ChainedPrefixIndex::ChainedPrefixIndex(std::int64_t num_units, std::int64_t block_tokens, std::int64_t units_per_entry)
    : block_tokens_(block_tokens), units_per_entry_(units_per_entry) {
  KVLAB_EXPECTS(block_tokens > 0 && units_per_entry > 0, "prefix index blocks must be positive");
  KVLAB_EXPECTS(num_units >= 0, "prefix index unit count must not be negative");
  unit_entry_.assign(static_cast<std::size_t>(num_units), -1);
}

std::span<const ChainedPrefixIndex::UnitId> ChainedPrefixIndex::units(EntryId entry) const noexcept {
  return {entry_units_.data() + static_cast<std::size_t>(entry) * static_cast<std::size_t>(units_per_entry_),
          static_cast<std::size_t>(units_per_entry_)};
}

bool ChainedPrefixIndex::verifies(EntryId e, std::span<const std::int32_t> block, EntryId parent,
                                  std::span<const std::int64_t> extra) const {
  const Entry& x = entries_[static_cast<std::size_t>(e)];
  if (!x.cached || x.parent != parent) return false;
  if (parent >= 0) {
    if (x.parent_generation != entries_[static_cast<std::size_t>(parent)].generation) return false;
  } else if (!std::ranges::equal(x.extra, extra)) {
    return false;
  }
  return std::ranges::equal(x.tokens, block);
}

std::vector<ChainedPrefixIndex::EntryId> ChainedPrefixIndex::match(std::span<const std::int32_t> tokens,
                                                                   std::span<const std::int64_t> extra,
                                                                   std::int64_t max_blocks) const {
  std::vector<EntryId> out;
  std::uint64_t key = 0;
  EntryId parent = -1;
  const auto bt = static_cast<std::size_t>(block_tokens_);
  for (std::int64_t i = 0; i < max_blocks; ++i) {
    const auto block = tokens.subspan(static_cast<std::size_t>(i) * bt, bt);
    key = hash_block(key, block, i == 0 ? extra : std::span<const std::int64_t>{});
    const auto it = table_.find(key);
    if (it == table_.end() || !verifies(it->second, block, parent, extra)) break;
    parent = it->second;
    out.push_back(parent);
  }
  return out;
}

ChainedPrefixIndex::EntryId ChainedPrefixIndex::new_entry() {
  if (!free_entries_.empty()) {
    const EntryId e = free_entries_.back();
    free_entries_.pop_back();
    return e;
  }
  entries_.emplace_back();
  entry_units_.resize(entry_units_.size() + static_cast<std::size_t>(units_per_entry_));
  return static_cast<EntryId>(entries_.size() - 1);
}

std::int64_t ChainedPrefixIndex::insert(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                        EntryId parent, std::int64_t from, std::int64_t to, const UnitsOfBlock& units) {
  const auto bt = static_cast<std::size_t>(block_tokens_);
  const auto upe = static_cast<std::size_t>(units_per_entry_);
  KVLAB_ASSERT((from == 0) == (parent < 0));
  KVLAB_ASSERT(parent < 0 || entries_[static_cast<std::size_t>(parent)].cached);
  std::uint64_t key = parent >= 0 ? entries_[static_cast<std::size_t>(parent)].key : 0;
  std::vector<UnitId> buffer(upe);
  std::int64_t entered = 0;
  for (std::int64_t i = from; i < to; ++i) {
    const auto block = tokens.subspan(static_cast<std::size_t>(i) * bt, bt);
    const std::span<const std::int64_t> salt = i == 0 ? extra : std::span<const std::int64_t>{};
    key = hash_block(key, block, salt);
    if (const auto it = table_.find(key); it != table_.end()) {
      if (verifies(it->second, block, parent, extra)) break;  // already cached elsewhere: keep ours private
      forget(it->second);  // a stale entry (its parent was dropped) or a true 64-bit collision
    }
    units(i, buffer);
    const EntryId e = new_entry();
    Entry& x = entries_[static_cast<std::size_t>(e)];
    x.cached = true;
    x.key = key;
    x.parent = parent;
    x.parent_generation = parent >= 0 ? entries_[static_cast<std::size_t>(parent)].generation : 0;
    x.tokens.assign(block.begin(), block.end());
    x.extra.assign(salt.begin(), salt.end());
    std::ranges::copy(buffer, entry_units_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(e) * upe));
    for (const UnitId u : buffer) {
      KVLAB_ASSERT(unit_entry_[static_cast<std::size_t>(u)] < 0);
      unit_entry_[static_cast<std::size_t>(u)] = e;
    }
    table_.emplace(key, e);
    parent = e;
    ++entered;
  }
  return entered;
}

void ChainedPrefixIndex::forget(EntryId e) {
  Entry& x = entries_[static_cast<std::size_t>(e)];
  KVLAB_ASSERT(x.cached);
  const auto it = table_.find(x.key);
  KVLAB_ASSERT(it != table_.end() && it->second == e);
  table_.erase(it);
  x.cached = false;
  ++x.generation;
  x.tokens.clear();
  x.extra.clear();
  for (const UnitId u : units(e)) {
    unit_entry_[static_cast<std::size_t>(u)] = -1;
    if (on_unindex_) on_unindex_(u);
  }
  free_entries_.push_back(e);
}

bool ChainedPrefixIndex::move_unit(UnitId from, UnitId to) {
  const EntryId e = unit_entry_[static_cast<std::size_t>(from)];
  if (e < 0) return false;
  KVLAB_ASSERT(unit_entry_[static_cast<std::size_t>(to)] < 0);
  const auto first = entry_units_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(e) *
                                                                        static_cast<std::size_t>(units_per_entry_));
  std::replace(first, first + units_per_entry_, from, to);
  unit_entry_[static_cast<std::size_t>(from)] = -1;
  unit_entry_[static_cast<std::size_t>(to)] = e;
  return true;
}

bool ChainedPrefixIndex::forget_unit(UnitId unit) {
  const EntryId e = unit_entry_[static_cast<std::size_t>(unit)];
  if (e < 0) return false;
  forget(e);
  return true;
}

}  // namespace kvlab
