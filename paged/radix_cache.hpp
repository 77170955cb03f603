#pragma once
// SGLang's RadixCache, as the paged backend's `radix` mode (docs/prefix-caching.md).
//
//  * A radix tree over token ids. A node's key is a run of token ids cut to whole blocks and its
//    value the blocks that hold their KV; a child is found by its first block of token ids
//    (SGLang's paged key), through one hash map of edges (parent node, first-block hash) whose
//    hits are verified token by token.
//  * A lookup that ends inside a node splits it there (at a block boundary), as SGLang does.
//  * The tree holds one pool reference on every block it caches. A sequence that uses tree blocks
//    locks the deepest node it uses; a lock counts on that node and every ancestor (lock_ref).
//    Nodes with lock 0 are evictable: eviction removes the least recently used unlocked leaves
//    (whole nodes, cascading to parents that become leaves) and drops their references, which
//    frees the blocks back to the pool.
//  * Every node has a parent index, no pointers; removed node slots are reused.
//  * Sequences with different extra keys (salts) live under different roots and never share.
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "paged/block_pool.hpp"
#include "paged/prefix_cache.hpp"

namespace kvlab {

class RadixCache final : public PrefixCache {
 public:
  RadixCache(std::int32_t block_size, BlockPool& pool);

  /// A match: the cached blocks of the prefix, the node it ends in and the blocks of that node it
  /// covers; `revived` counts the matched blocks now evictable (locking them takes them away).
  using Match = PrefixHit;
  /// The longest cached prefix within the first `max_blocks` full blocks of `tokens`. No side effects.
  [[nodiscard]] Match match(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                            std::int64_t max_blocks) const override;

  // --- PrefixCache: a sequence's hold is the tree node it locks ---

  /// Commits the match, locks its node and takes a pool reference on every hit block.
  std::int32_t acquire_hit(const PrefixHit& hit, std::span<const std::int64_t> extra) override;
  /// Inserts the blocks as a leaf under `hold`; when it was new, the sequence's lock moves to it.
  std::int64_t enter_blocks(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                            std::span<const BlockId> blocks, std::int64_t from, std::int64_t to,
                            std::int32_t& hold) override;
  void share_hold(std::int32_t hold) override { lock(hold); }
  /// Unlocks and touches the node: SGLang re-inserts a finished request, so its path becomes recent.
  void release_hold(std::int32_t hold) override;
  /// Tree blocks are never in the free list: handing one out drops nothing.
  void forget_block(BlockId) override {}
  /// Unlocked tree blocks: held by the tree alone.
  [[nodiscard]] std::int64_t cached_free_blocks() const override { return evictable_; }
  [[nodiscard]] std::int64_t evictions() const override { return evicted_; }

  // --- the tree ---

  /// Makes `m` real: creates the root for the extra keys, splits the node the match ends inside,
  /// marks the path used now. Returns the node that ends exactly at the matched prefix.
  std::int32_t commit(const Match& m, std::span<const std::int64_t> extra);
  /// Adds `blocks` (full blocks whose token ids are `tokens`) as a new leaf under `node`, taking a
  /// pool reference on each. When `node` already has a child starting with the same block (the
  /// prompt's last block after the last-token rule), nothing is inserted and `node` is returned;
  /// otherwise the new leaf.
  std::int32_t insert(std::int32_t node, std::span<const std::int32_t> tokens, std::span<const BlockId> blocks);
  /// Lock / unlock `node` and its ancestors (SGLang's inc_lock_ref / dec_lock_ref).
  void lock(std::int32_t node);
  void unlock(std::int32_t node);
  /// Marks `node` and its ancestors most recently used.
  void touch(std::int32_t node);
  /// Evicts least recently used unlocked leaves until at least `blocks` blocks went back to the
  /// pool (or nothing is left to evict). Returns the blocks freed.
  std::int64_t evict(std::int64_t blocks) override;
  /// Evicts until at most `keep` blocks are evictable. `by_pages` (a page-ordered pool), so that
  /// the blocks kept gather on as few pages as the tree allows (kvcached's page-aware eviction,
  /// its PR #390), where least-recently-used eviction leaves them scattered over the pages they
  /// were allocated on:
  ///  1. whole regions whose used blocks are all evictable, the cheapest first (a region's cost:
  ///     its cached blocks and everything cached after them, which must go with them), while the
  ///     cost fits in what is left to evict plus a quarter of a region (so a trim may evict a few
  ///     blocks more than asked to return a whole region);
  ///  2. then block by block from the leaves' ends: the end block on the region with the fewest
  ///     used blocks first (regions no sequence pins before those one does), least recently used
  ///     first within a region.
  /// Without `by_pages`: least recently used leaves, as evict(), but the last only as far as
  /// asked (from its end), so both ways evict the same count.
  std::int64_t trim(std::int64_t keep, bool by_pages) override;

  [[nodiscard]] std::int64_t evictable_blocks() const noexcept override { return evictable_; }
  /// The blocks of unlocked nodes (held by the tree alone).
  [[nodiscard]] std::vector<BlockId> movable_blocks() const override;
  void relocate(const std::vector<std::pair<BlockId, BlockId>>& moves) override;
  [[nodiscard]] std::int64_t cached_blocks() const noexcept { return cached_; }
  [[nodiscard]] std::int64_t evicted_blocks() const noexcept { return evicted_; }
  [[nodiscard]] std::int32_t lock_count(std::int32_t node) const {
    return nodes_.at(static_cast<std::size_t>(node)).lock;
  }
  /// The tree as text, children in key order: "(tokens a..b: blocks [..] lock L)" nested (tests).
  [[nodiscard]] std::string dump() const;
  /// Checks every invariant (lock counts, evictable and cached totals, edges); throws on a bug.
  void check_invariants() const;

 private:
  struct Node {
    std::vector<std::int32_t> key;  // token ids, a whole number of blocks
    std::vector<BlockId> blocks;
    std::int32_t parent = -1;  // -1: a root
    std::int32_t children = 0;
    std::int32_t lock = 0;
    std::uint64_t last_access = 0;
    bool live = false;
    std::vector<std::int64_t> extra;  // roots: their extra keys
  };
  [[nodiscard]] std::int32_t find_root(std::span<const std::int64_t> extra) const;
  [[nodiscard]] std::int32_t find_child(std::int32_t node, std::span<const std::int32_t> first_block) const;
  [[nodiscard]] std::uint64_t edge_key(std::int32_t parent, std::span<const std::int32_t> first_block) const noexcept;
  void add_edge(std::int32_t child);
  void remove_edge(std::int32_t child);
  std::int32_t new_node();
  std::int32_t split(std::int32_t node, std::int64_t keep_blocks);
  void dump_node(std::int32_t node, std::int64_t start, std::string& out) const;
  /// Least recently used leaves until `blocks` went back: whole (SGLang's eviction, evict()), or
  /// the last one only as far as asked, from its end (trim()'s, which keeps the count).
  std::int64_t evict_lru(std::int64_t blocks, bool whole_nodes);
  /// trim() by pages (see there): whole regions, then leaves' end blocks by region.
  std::int64_t evict_regions(std::int64_t blocks);
  struct TrimIndex;  // the tree and its evictable blocks as evict_regions sees them (radix_cache.cpp)
  void index_for_trim(TrimIndex& t) const;
  /// What evicting every evictable block of region r takes (with all cached after them).
  [[nodiscard]] std::int64_t region_cost(const TrimIndex& t, std::int32_t r) const;
  /// Evicts node x's blocks from `index` on and everything below x. Returns the blocks evicted.
  std::int64_t cut(TrimIndex& t, std::int32_t x, std::int32_t index);
  std::int64_t evict_whole_regions(TrimIndex& t, std::int64_t blocks);
  std::int64_t evict_ends_by_region(TrimIndex& t, std::int64_t blocks);
  /// Drops one evicted block's pool reference and counts it.
  void drop_block(BlockId b);
  /// Removes the unlocked node `x` (its edge, its slot; its parent loses a child).
  void remove_node(std::int32_t x);

  std::int32_t block_size_;
  BlockPool* pool_;
  std::vector<Node> nodes_;  // node 0: the root for no extra keys
  std::vector<std::int32_t> free_nodes_;
  std::unordered_multimap<std::uint64_t, std::int32_t> edges_;  // (parent, first block) -> child
  std::unordered_multimap<std::uint64_t, std::int32_t> roots_;  // extra keys -> root
  std::uint64_t clock_ = 0;
  std::int64_t evictable_ = 0, cached_ = 0, evicted_ = 0;
};

}  // namespace kvlab
