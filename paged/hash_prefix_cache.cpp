#include "paged/hash_prefix_cache.hpp"

#include "alloc/error.hpp"

namespace kvlab {

HashPrefixCache::HashPrefixCache(BlockPool& pool, std::int32_t block_size)
    : pool_(&pool), index_(pool.num_blocks(), block_size, 1) {
  // The pool counts the cached free blocks: it knows which blocks have an entry.
  index_.set_on_unindex([p = pool_](ChainedPrefixIndex::UnitId u) { p->set_cached(u, false); });
}

PrefixHit HashPrefixCache::match(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                 std::int64_t max_blocks) const {
  PrefixHit hit;
  for (const auto e : index_.match(tokens, extra, max_blocks)) {
    const BlockId b = index_.units(e).front();
    hit.blocks.push_back(b);
    hit.revived += pool_->ref_count(b) == 0 ? 1 : 0;
  }
  return hit;
}

std::int32_t HashPrefixCache::acquire_hit(const PrefixHit& hit, std::span<const std::int64_t>) {
  for (const BlockId b : hit.blocks) {
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
  const ChainedPrefixIndex::EntryId parent = from > 0 ? index_.entry_of(blocks[static_cast<std::size_t>(from - 1)]) : -1;
  KVLAB_ASSERT(from == 0 || parent >= 0);
  const std::int64_t entered = index_.insert(tokens, extra, parent, from, to, [&](std::int64_t i, std::span<BlockId> out) {
    out[0] = blocks[static_cast<std::size_t>(i)];
  });
  for (std::int64_t i = from; i < from + entered; ++i) pool_->set_cached(blocks[static_cast<std::size_t>(i)], true);
  return entered;
}

void HashPrefixCache::forget_block(BlockId block) {
  if (index_.forget_unit(block)) ++evictions_;  // the LRU head loses its cache entry
}

std::int64_t HashPrefixCache::cached_free_blocks() const { return pool_->num_free_cached(); }

}  // namespace kvlab
