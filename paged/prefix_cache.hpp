#pragma once
// The paged backend's prefix cache behind one interface: `none`, `hash` (vLLM v1's block hashes,
// paged/hash_prefix_cache.hpp) or `radix` (SGLang's radix tree, paged/radix_cache.hpp).
// docs/prefix-caching.md compares the two.
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "alloc/backend/kv_backend.hpp"
#include "paged/block_pool.hpp"

namespace kvlab {

enum class PrefixCacheMode { none, hash, radix };
/// "none", "hash", "radix" (the --prefix-cache values); InvalidArgument for anything else.
[[nodiscard]] PrefixCacheMode parse_prefix_cache_mode(std::string_view name);
[[nodiscard]] std::string_view to_string(PrefixCacheMode mode) noexcept;

/// What a lookup found, before anything is committed.
struct PrefixHit {
  /// The cached blocks of the longest cached prefix, in order. With a host tier, an id at or past
  /// the pool's block count is host slot (id - blocks) whose KV a fresh block takes back (promote).
  std::vector<BlockId> blocks;
  std::int64_t revived = 0;      ///< hit blocks that stop being available once taken (free or evictable now)
  std::int64_t promoted = 0;     ///< hit blocks on the host tier (each needs a fresh device block)
  std::int32_t node = -1;        ///< radix: the node the match ends in (-1: no root for these extra keys yet)
  std::int64_t node_blocks = 0;  ///< radix: blocks of `node` matched (less than its size: a split is due)
};

// Design note
//
// Rationale. The two caches hold blocks differently (hash: cached blocks sit in the pool's LRU
// free queue and lose their entry when handed out; radix: the tree holds a pool reference and
// evicts least recently used unlocked leaves), but the backend asks the same questions at the
// same points: what does a prompt hit, take the hit, enter the new full blocks (at admit and
// whenever growth fills one), a block was handed out, a sequence forks or finishes, what can be
// evicted. One interface keeps the backend
// free of per-mode branches; `none` is a cache that never hits.
//
// Approach. A sequence that uses the cache gets a *hold* (an int, -1 for none): radix mode's
// locked tree node, which the backend passes back at fork and release. The calls mirror vLLM's
// and SGLang's call order exactly, so hit counts, inserted blocks and eviction order are those of
// the two designs.
//
// Limitations. The backend keeps the pool; a cache borrows it and must not outlive it. Not
// thread-safe (the backend is single-threaded).
class PrefixCache {
 public:
  PrefixCache() = default;
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;
  virtual ~PrefixCache() = default;

  /// The longest cached prefix within the first `max_blocks` full blocks of `tokens`. No side effects.
  [[nodiscard]] virtual PrefixHit match(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                        std::int64_t max_blocks) const = 0;
  /// A new sequence takes `hit`: a pool reference on every hit block (reviving a cached free one)
  /// and whatever keeps them cached while it runs. Returns the sequence's hold (-1: none).
  virtual std::int32_t acquire_hit(const PrefixHit& hit, std::span<const std::int64_t> extra) = 0;
  /// Enters the sequence's full blocks [from, to) (blocks[i] holds tokens [i * block_size,
  /// (i + 1) * block_size), whose ids are in `tokens`): its prompt blocks after the hit at admit,
  /// and every later block as soon as it is full, during chunked prefill and decode. Blocks
  /// [0, from) are the sequence's hit or were entered by it. May move `hold`. Returns the blocks
  /// entered: fewer than to - from when a block's content is already cached under another block
  /// (that block stays private, and the sequence enters nothing after it).
  virtual std::int64_t enter_blocks(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                    std::span<const BlockId> blocks, std::int64_t from, std::int64_t to,
                                    std::int32_t& hold) = 0;
  /// A forked child holds what its parent holds.
  virtual void share_hold(std::int32_t hold) = 0;
  /// A sequence released its blocks and gives its hold back.
  virtual void release_hold(std::int32_t hold) = 0;
  /// The pool just handed `block` out for new KV: whatever it cached is gone.
  virtual void forget_block(BlockId block) = 0;
  /// Blocks only the cache holds, which evict() can give back to the pool.
  [[nodiscard]] virtual std::int64_t evictable_blocks() const = 0;
  /// Gives at least `blocks` blocks back to the pool (or all it can). Returns how many.
  virtual std::int64_t evict(std::int64_t blocks) = 0;
  /// Evicts until at most `keep` blocks are evictable (kvcached's cap on cached tokens, applied
  /// when a sequence's blocks become cached). `by_pages`: choose the victims so that whole regions
  /// of a page-ordered pool empty (the radix cache; others evict in their own order). Returns the
  /// blocks evicted.
  virtual std::int64_t trim(std::int64_t keep, bool /*by_pages*/) {
    const std::int64_t excess = evictable_blocks() - keep;
    return excess > 0 ? evict(excess) : 0;
  }
  /// Blocks the cache alone holds that may move to other blocks (compaction); none by default.
  [[nodiscard]] virtual std::vector<BlockId> movable_blocks() const { return {}; }
  /// Each (from, to): `from`'s KV now lives in `to` (copied there, taken from the pool with one
  /// reference, which the cache keeps); the cache lets go of `from`. Only blocks movable_blocks() gave.
  virtual void relocate(const std::vector<std::pair<BlockId, BlockId>>& /*moves*/) {}
  /// Blocks holding cached KV that no sequence holds (free in the accounting, reusable on a hit).
  [[nodiscard]] virtual std::int64_t cached_free_blocks() const = 0;
  /// Cached blocks dropped so far.
  [[nodiscard]] virtual std::int64_t evictions() const = 0;
  /// Host tier: the KV of hit unit `host_unit` (see PrefixHit::blocks) is copied into the fresh
  /// block `into`, which takes over its cache entry. Only for units acquire_hit was given.
  virtual void promote(BlockId /*host_unit*/, BlockId /*into*/) {}
  /// Per-tier counters (host tier: inserts, hits, evictions, blocks moved), by name.
  [[nodiscard]] virtual BackendCounters tier_counters() const { return {}; }
  /// Blocks copied between tiers so far (both ways).
  [[nodiscard]] virtual std::int64_t transferred_blocks() const { return 0; }
};

/// The cache for `mode` over `pool` (which must outlive it); `host_blocks` > 0 adds a host tier
/// (hash mode only).
[[nodiscard]] std::unique_ptr<PrefixCache> make_prefix_cache(PrefixCacheMode mode, BlockPool& pool,
                                                             std::int32_t block_size, std::int32_t host_blocks = 0);

}  // namespace kvlab
