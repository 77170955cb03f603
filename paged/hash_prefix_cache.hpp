#pragma once
// vLLM v1's hash-based automatic prefix caching, as the paged backend's `hash` mode
// (docs/prefix-caching.md).
//
//  * Only full blocks are cached, in the chained block-hash index shared with the vmm backend
//    (alloc/backend/chained_prefix_index.hpp), one paged block per entry: a hit is verified token by
//    token and through its parent's generation, so a hash collision never shares other KV.
//  * Freed blocks keep their entries and wait in the pool's LRU free queue (FreeOrder::lru); an
//    entry is dropped (an eviction) only when its block is handed out again (forget_block).
//  * Host tier (host_blocks > 0, vLLM's CPU offloading / SGLang's HiCache in spirit): a cached block
//    handed out again is first copied to a host slot, and its entry moves there (same key, parent
//    and generation, so its cached children stay reachable); host slots are dropped least recently
//    demoted first. A hit on a host entry copies it back into a fresh device block (promote). Host
//    units are numbered after the pool's blocks in the shared index.
#include <cstdint>
#include <functional>
#include <list>
#include <span>
#include <vector>

#include "alloc/backend/chained_prefix_index.hpp"
#include "paged/block_pool.hpp"
#include "paged/prefix_cache.hpp"

namespace kvlab {

class HashPrefixCache final : public PrefixCache {
 public:
  /// `pool` must use FreeOrder::lru and outlive the cache. `host_blocks`: slots of the host tier.
  HashPrefixCache(BlockPool& pool, std::int32_t block_size, std::int32_t host_blocks = 0);
  /// Copies one block's KV between device block `b` and host slot `slot` (to_host: device to
  /// host). Unset: accounting only.
  using Copy = std::function<void(BlockId b, std::int32_t slot, bool to_host)>;
  void set_copy(Copy copy) { copy_ = std::move(copy); }

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
  void promote(BlockId host_unit, BlockId into) override;
  [[nodiscard]] BackendCounters tier_counters() const override;
  [[nodiscard]] std::int64_t transferred_blocks() const override { return host_inserts_ + host_hits_; }
  [[nodiscard]] std::int32_t host_blocks() const noexcept { return host_blocks_; }
  /// Host slots holding an entry.
  [[nodiscard]] std::int64_t host_cached() const noexcept {
    return host_blocks_ - static_cast<std::int64_t>(host_free_.size());
  }

  [[nodiscard]] bool is_cached(BlockId b) const noexcept { return index_.entry_of(b) >= 0; }
  [[nodiscard]] std::size_t num_cached() const noexcept { return index_.num_entries(); }

 private:
  /// A host slot for a demoted entry: a free one, else the least recently demoted one not pinned
  /// by a hit (its entry is dropped); -1 when there is none.
  std::int32_t take_host_slot();

  BlockPool* pool_;
  std::int32_t host_blocks_;
  ChainedPrefixIndex index_;
  std::int64_t evictions_ = 0;  // entries dropped altogether (device without a host tier, or host)
  Copy copy_;
  std::vector<std::int32_t> host_free_;
  std::list<std::int32_t> host_lru_;                         // occupied, unpinned slots; front: oldest
  std::vector<std::list<std::int32_t>::iterator> host_pos_;  // [slot] its place in host_lru_
  std::vector<std::uint8_t> host_listed_;                    // [slot] in host_lru_
  std::int64_t host_inserts_ = 0, host_hits_ = 0, host_evictions_ = 0;
};

}  // namespace kvlab
