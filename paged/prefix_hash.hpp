#pragma once
// vLLM v1's hash-based automatic prefix caching, as the paged backend's `hash` mode
// (docs/prefix-caching.md).
//
//  * Only full blocks are cached. Block i's key chains its parent's key with its token ids:
//    key_i = H(key_{i-1}, tokens of block i) and key_0 = H(seed, extra keys, tokens of block 0),
//    H = a wyhash-style 64-bit hash (128-bit multiply-fold rounds).
//  * The key only finds a candidate. A hit is verified exactly: the candidate's stored token ids
//    equal the block's, and its parent is the block matched one step before (same block id and
//    the same *generation* of that block, so a parent that was evicted and reused invalidates its
//    cached children) — or, for the first block, the stored extra keys are equal. A hash
//    collision therefore never shares a block whose KV differs.
//  * Freed blocks keep their entries and wait in the pool's LRU free queue (FreeOrder::lru); an
//    entry is dropped (an eviction) only when its block is handed out again (forget()).
// This class is the index only; the PagedBackend owns the pool and calls it.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "paged/block_pool.hpp"

namespace kvlab {

/// The 64-bit block hash: parent key, extra keys (salt) and token ids.
[[nodiscard]] std::uint64_t hash_block(std::uint64_t parent, std::span<const std::int32_t> tokens,
                                       std::span<const std::int64_t> extra = {}) noexcept;

class HashPrefixCache {
 public:
  HashPrefixCache(std::int32_t num_blocks, std::int32_t block_size);

  /// The longest verified chain of cached blocks for the first `max_blocks` full blocks of
  /// `tokens` (which must hold at least max_blocks * block_size ids). No side effects.
  [[nodiscard]] std::vector<BlockId> match(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                           std::int64_t max_blocks) const;
  /// Enters blocks[from, to) of a sequence — full blocks whose token ids are tokens[i * bs, ...) —
  /// into the cache. blocks[from - 1] (when from > 0) must be cached: it is their parent. Stops
  /// at the first block whose content is already cached under another block (that block stays
  /// private to the sequence). Returns the number of blocks entered.
  std::int64_t insert(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                      std::span<const BlockId> blocks, std::int64_t from, std::int64_t to);
  /// Drops the entry of block `b` if it has one (it is about to be reused). True when it had one.
  bool forget(BlockId b);

  [[nodiscard]] bool is_cached(BlockId b) const noexcept { return cached_[static_cast<std::size_t>(b)] != 0; }
  [[nodiscard]] std::uint64_t key(BlockId b) const noexcept { return key_[static_cast<std::size_t>(b)]; }
  [[nodiscard]] std::size_t num_cached() const noexcept { return table_.size(); }

 private:
  [[nodiscard]] std::span<const std::int32_t> stored_tokens(BlockId b) const noexcept;
  /// Whether block `c` holds exactly block i of a sequence whose block i-1 is `parent` (-1: i = 0).
  [[nodiscard]] bool verifies(BlockId c, std::span<const std::int32_t> block_tokens, BlockId parent,
                              std::span<const std::int64_t> extra) const;

  std::int32_t block_size_;
  std::unordered_map<std::uint64_t, BlockId> table_;  // key -> cached block
  // Per block id (no pointers): entry flag, key, generation, verification data.
  std::vector<std::uint8_t> cached_;
  std::vector<std::uint64_t> key_;
  std::vector<std::uint32_t> gen_;         // bumped whenever the block loses its entry
  std::vector<BlockId> parent_;            // -1 for a first block
  std::vector<std::uint32_t> parent_gen_;  // parent's generation when this entry was made
  std::vector<std::int32_t> tokens_;       // [block][block_size]
  std::vector<std::vector<std::int64_t>> extra_;  // first blocks: the extra keys
};

}  // namespace kvlab
