#pragma once
// vLLM v1's hash-based automatic prefix caching, as the paged backend's `hash` mode
// (docs/prefix-caching.md): the chained block-hash index (alloc/chained_prefix_index.hpp) with one
// paged block per entry. Freed blocks keep their entries and wait in the pool's LRU free queue
// (FreeOrder::lru); an entry is dropped (an eviction) only when its block is handed out again.
// This class is the index only; the PagedBackend owns the pool and calls it.
#include <cstdint>
#include <span>
#include <vector>

#include "alloc/chained_prefix_index.hpp"
#include "paged/block_pool.hpp"

namespace kvlab {

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
  bool forget(BlockId b) { return index_.forget_unit(b); }

  [[nodiscard]] bool is_cached(BlockId b) const noexcept { return index_.entry_of(b) >= 0; }
  [[nodiscard]] std::size_t num_cached() const noexcept { return index_.num_entries(); }

 private:
  ChainedPrefixIndex index_;
};

}  // namespace kvlab
