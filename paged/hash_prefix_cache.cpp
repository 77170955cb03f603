#include "paged/hash_prefix_cache.hpp"

#include "alloc/core/error.hpp"

namespace kvlab {

HashPrefixCache::HashPrefixCache(BlockPool& pool, std::int32_t block_size, std::int32_t host_blocks)
    : pool_(&pool),
      host_blocks_(host_blocks),
      index_(static_cast<std::int64_t>(pool.num_blocks()) + host_blocks, block_size, 1),
      host_pos_(static_cast<std::size_t>(host_blocks)),
      host_listed_(static_cast<std::size_t>(host_blocks), 0) {
  // The pool counts the cached free blocks: it knows which blocks have an entry.
  index_.set_on_unindex([p = pool_](ChainedPrefixIndex::UnitId u) {
    if (u < p->num_blocks()) p->set_cached(u, false);  // host units are not the pool's
  });
  for (std::int32_t slot = host_blocks - 1; slot >= 0; --slot) host_free_.push_back(slot);
}

PrefixHit HashPrefixCache::match(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                 std::int64_t max_blocks) const {
  PrefixHit hit;
  for (const auto e : index_.match(tokens, extra, max_blocks)) {
    const BlockId b = index_.units(e).front();
    hit.blocks.push_back(b);
    if (b >= pool_->num_blocks()) {
      ++hit.promoted;  // on the host tier
    } else {
      hit.revived += pool_->ref_count(b) == 0 ? 1 : 0;
    }
  }
  return hit;
}

std::int32_t HashPrefixCache::acquire_hit(const PrefixHit& hit, std::span<const std::int64_t>) {
  for (const BlockId b : hit.blocks) {
    if (b >= pool_->num_blocks()) {  // pin the host slot until promote: no demotion may take it
      const auto slot = static_cast<std::size_t>(b - pool_->num_blocks());
      if (host_listed_[slot]) host_lru_.erase(host_pos_[slot]);
      host_listed_[slot] = 0;
      continue;
    }
    if (pool_->ref_count(b) == 0) {
      pool_->take(b);  // revive a cached free block
    } else {
      pool_->add_ref(b);
    }
  }
  return -1;
}

std::int64_t HashPrefixCache::enter_blocks(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                           std::span<const BlockId> blocks, std::int64_t from, std::int64_t to,
                                           std::int32_t&) {
  const ChainedPrefixIndex::EntryId parent =
      from > 0 ? index_.entry_of(blocks[static_cast<std::size_t>(from - 1)]) : -1;
  KVLAB_ASSERT(from == 0 || parent >= 0);
  const std::int64_t entered =
      index_.insert(tokens, extra, parent, from, to,
                    [&](std::int64_t i, std::span<BlockId> out) { out[0] = blocks[static_cast<std::size_t>(i)]; });
  for (std::int64_t i = from; i < from + entered; ++i) pool_->set_cached(blocks[static_cast<std::size_t>(i)], true);
  return entered;
}

void HashPrefixCache::forget_block(BlockId block) {
  if (index_.entry_of(block) < 0) return;
  if (const std::int32_t slot = host_blocks_ > 0 ? take_host_slot() : -1; slot >= 0) {
    if (copy_) copy_(block, slot, true);  // demote: the entry moves to the host tier
    index_.move_unit(block, pool_->num_blocks() + slot);
    pool_->set_cached(block, false);
    host_pos_[static_cast<std::size_t>(slot)] = host_lru_.insert(host_lru_.end(), slot);
    host_listed_[static_cast<std::size_t>(slot)] = 1;
    ++host_inserts_;
    return;
  }
  if (index_.forget_unit(block)) ++evictions_;  // the LRU head loses its cache entry
}

std::int32_t HashPrefixCache::take_host_slot() {
  if (!host_free_.empty()) {
    const std::int32_t slot = host_free_.back();
    host_free_.pop_back();
    return slot;
  }
  if (host_lru_.empty()) return -1;  // every occupied slot is pinned by the hit being admitted
  const std::int32_t slot = host_lru_.front();
  host_lru_.pop_front();
  host_listed_[static_cast<std::size_t>(slot)] = 0;
  index_.forget_unit(pool_->num_blocks() + slot);
  ++host_evictions_;
  ++evictions_;
  return slot;
}

void HashPrefixCache::promote(BlockId host_unit, BlockId into) {
  const std::int32_t slot = host_unit - pool_->num_blocks();
  KVLAB_ASSERT(slot >= 0 && slot < host_blocks_ && !host_listed_[static_cast<std::size_t>(slot)]);
  if (copy_) copy_(into, slot, false);
  index_.move_unit(host_unit, into);
  pool_->set_cached(into, true);
  host_free_.push_back(slot);
  ++host_hits_;
}

BackendCounters HashPrefixCache::tier_counters() const {
  if (host_blocks_ == 0) return {};
  return {{"prefix_host_inserted_blocks", static_cast<double>(host_inserts_)},
          {"prefix_host_hit_blocks", static_cast<double>(host_hits_)},
          {"prefix_host_evictions", static_cast<double>(host_evictions_)},
          {"prefix_host_cached_blocks", static_cast<double>(host_cached())}};
}

std::int64_t HashPrefixCache::cached_free_blocks() const { return pool_->num_free_cached(); }

}  // namespace kvlab
