#pragma once
// vLLM v1's hash-based automatic prefix caching, as the paged backend's `hash` mode
// (docs/prefix-caching.md).
//
//  * Only full blocks are cached, in the chained block-hash index shared with the vmm backend
//    (alloc/chained_prefix_index.hpp), one paged block per entry: a hit is verified token by
//    token and through its parent's generation, so a hash collision never shares other KV.
//  * Freed blocks keep their entries and wait in the pool's LRU free queue (FreeOrder::lru); an
//    entry is dropped (an eviction) only when its block is handed out again (forget_block).
#include <cstdint>
#include <span>
#include <vector>

#include "alloc/chained_prefix_index.hpp"
#include "paged/block_pool.hpp"
#include "paged/prefix_cache.hpp"

namespace kvlab {

class HashPrefixCache final : public PrefixCache {
 public:
  /// `pool` must use FreeOrder::lru and outlive the cache.
  HashPrefixCache(BlockPool& pool, std::int32_t block_size);

  [[nodiscard]] PrefixHit match(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                std::int64_t max_blocks) const override;
  std::int32_t acquire_hit(const PrefixHit& hit, std::span<const std::int64_t> extra) override;
  /// blocks[from - 1] (when from > 0) must be cached: it is their parent. Stops at the first block
  /// whose content is already cached under another block (that block stays private).
  std::int64_t enter_blocks(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                            std::span<const BlockId> blocks, std::int64_t from, std::int64_t to,
                            std::int32_t& hold) override;
  void share_hold(std::int32_t) override {}
  void release_hold(std::int32_t) override {}
  void forget_block(BlockId block) override;
  /// Cached blocks wait in the free queue: nothing to evict ahead of time.
  [[nodiscard]] std::int64_t evictable_blocks() const override { return 0; }
  std::int64_t evict(std::int64_t) override { return 0; }
  [[nodiscard]] std::int64_t cached_free_blocks() const override;
  [[nodiscard]] std::int64_t evictions() const override { return evictions_; }

  [[nodiscard]] bool is_cached(BlockId b) const noexcept { return index_.entry_of(b) >= 0; }
  [[nodiscard]] std::size_t num_cached() const noexcept { return index_.num_entries(); }

 private:
  BlockPool* pool_;
  ChainedPrefixIndex index_;
  std::int64_t evictions_ = 0;
};

}  // namespace kvlab
