// Trimming the radix cache to a cap (RadixCache::trim, kvcached's KVCACHED_MAX_CACHED_TOKENS):
// least recently used leaves against page-aware eviction, which chooses its victims so that whole
// regions (page groups) of a page-ordered pool empty. Answers are worked out by hand in the comments.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "paged/block_pool.hpp"
#include "paged/radix_cache.hpp"

namespace kvlab {
namespace {

using Tokens = std::vector<std::int32_t>;

/// A pool of 4 regions of 4 blocks, all open, with every block handed out: blocks 4r..4r+3 lie
/// in region r.
struct Fixture {
  BlockPool pool{16, FreeOrder::pages, 4};
  RadixCache tree{1, pool};  // one token per block: a key is its blocks' token ids
  Fixture() {
    for (std::int32_t r = 0; r < 4; ++r) pool.open_region(r);
    for (int i = 0; i < 16; ++i) EXPECT_TRUE(pool.allocate().has_value());
  }
  /// A sequence's blocks cached as a new leaf under `parent` (tokens first..), then released by
  /// the sequence: the tree alone holds them. Returns the leaf.
  std::int32_t cache(std::int32_t parent, std::int32_t first, const std::vector<BlockId>& blocks) {
    Tokens ids(blocks.size());
    std::iota(ids.begin(), ids.end(), first);
    const std::int32_t leaf = tree.insert(parent, ids, blocks);
    for (const BlockId b : blocks) pool.release(b);
    return leaf;
  }
  [[nodiscard]] std::vector<std::int32_t> used_per_region() const {
    std::vector<std::int32_t> u;
    for (std::int32_t r = 0; r < 4; ++r) u.push_back(pool.region_blocks() - pool.region_free(r));
    return u;
  }
};

/// Four finished sequences whose blocks were handed out interleaved (as concurrent decodes take
/// them): sequence k's block j lies in region j.
void four_interleaved(Fixture& f) {
  for (std::int32_t k = 0; k < 4; ++k) f.cache(0, 100 * k, {k, 4 + k, 8 + k, 12 + k});
}

TEST(RadixTrim, LeastRecentlyUsedKeepsTheBlocksScatteredOverEveryRegion) {
  Fixture f;
  four_interleaved(f);
  ASSERT_EQ(f.tree.evictable_blocks(), 16);
  // Keep 8: the two oldest sequences go whole, and each region keeps 2 blocks.
  EXPECT_EQ(f.tree.trim(8, false), 8);
  EXPECT_EQ(f.used_per_region(), (std::vector<std::int32_t>{2, 2, 2, 2}));
  EXPECT_EQ(f.tree.evicted_blocks(), 8);
  f.tree.check_invariants();
}

TEST(RadixTrim, PageAwareEmptiesWholeRegionsForTheSameCount) {
  Fixture f;
  four_interleaved(f);
  // Region 3 holds every sequence's last block (cost 4: nothing lies after them), region 2 the
  // blocks before those (cost 8 with region 3's, 4 once they are gone): both go, 8 blocks, and
  // regions 0 and 1 keep the sequences' first halves.
  EXPECT_EQ(f.tree.trim(8, true), 8);
  EXPECT_EQ(f.used_per_region(), (std::vector<std::int32_t>{4, 4, 0, 0}));
  EXPECT_EQ(f.tree.evictable_blocks(), 8);
  EXPECT_EQ(f.tree.dump(), "(0..2 [0,4] L0)(0..2 [1,5] L0)(0..2 [2,6] L0)(0..2 [3,7] L0)");
  EXPECT_EQ(f.pool.num_open_empty(), 2);
  f.tree.check_invariants();
}

TEST(RadixTrim, AChildGoesBeforeItsParentAndAPinnedRegionIsDrainedLast) {
  Fixture f;
  // A shared prefix [0,4] with two continuations [8] and [12,13]; a running sequence holds block
  // 1, so region 0 can never empty. Every other block is free.
  const std::int32_t prefix = f.cache(0, 0, {0, 4});
  f.cache(prefix, 10, {8});
  f.cache(prefix, 20, {12, 13});
  for (const BlockId b : {2, 3, 5, 6, 7, 9, 10, 11, 14, 15}) f.pool.release(b);
  ASSERT_EQ(f.used_per_region(), (std::vector<std::int32_t>{2, 1, 1, 2}));
  // Keep 2 of the 5 cached blocks (evict 3; a quarter region is 1 block of slack):
  //  * region 2 (block 8, a leaf) costs 1: it goes (1);
  //  * region 3 (12 and 13, one leaf) costs 2: it goes (3);
  //  * region 1 (block 4, the prefix's second) cost 4 with both continuations, 1 now: 4 in all,
  //    past the count by the slack: it goes too, and a whole region returns.
  EXPECT_EQ(f.tree.trim(2, true), 4);
  EXPECT_EQ(f.used_per_region(), (std::vector<std::int32_t>{2, 0, 0, 0}));
  EXPECT_EQ(f.tree.dump(), "(0..1 [0] L0)");
  // Keep none: region 0 cannot empty (block 1 runs), so its block goes from a leaf's end.
  EXPECT_EQ(f.tree.trim(0, true), 1);
  EXPECT_EQ(f.tree.dump(), "");
  EXPECT_EQ(f.pool.ref_count(1), 1) << "the running sequence's block is untouched";
  EXPECT_EQ(f.used_per_region(), (std::vector<std::int32_t>{1, 0, 0, 0}));
  f.tree.check_invariants();
}

TEST(RadixTrim, LockedNodesAreNeverEvicted) {
  Fixture f;
  four_interleaved(f);
  // Sequence 3 runs again (a hit on its blocks): its node is locked, and every region holds one
  // of its blocks.
  f.tree.lock(4);  // node ids: 1..4 in insertion order
  for (const BlockId b : {3, 7, 11, 15}) f.pool.add_ref(b);
  ASSERT_EQ(f.tree.evictable_blocks(), 12);
  EXPECT_EQ(f.tree.trim(0, true), 12);
  EXPECT_EQ(f.tree.evictable_blocks(), 0);
  EXPECT_EQ(f.tree.cached_blocks(), 4);
  EXPECT_EQ(f.used_per_region(), (std::vector<std::int32_t>{1, 1, 1, 1}));
  f.tree.check_invariants();
}

// Random trees (shared prefixes, branches, locked nodes) over a pool of 8 regions of 8: after
// every trim the cap holds, the tree's books agree with the pool's, nothing locked moved, and a
// page-aware trim evicts at most a quarter region past the count (the least recently used one
// exactly the count).
TEST(RadixTrim, RandomTreesKeepTheirBooksAndTheCap) {
  for (const bool by_pages : {false, true})
    for (std::uint64_t seed = 1; seed <= 30; ++seed) {
      std::mt19937_64 rng(seed);
      BlockPool pool(64, FreeOrder::pages, 8);
      RadixCache tree(2, pool);
      for (std::int32_t r = 0; r < 8; ++r) pool.open_region(r);
      std::vector<std::int32_t> nodes = {0};
      std::vector<std::pair<std::int32_t, std::vector<BlockId>>> path(200);  // node -> (parent, blocks)
      std::int32_t next_token = 0;
      std::vector<std::int32_t> locked;
      for (int step = 0; step < 40; ++step) {
        const auto n = static_cast<std::int64_t>(1 + rng() % 4);
        if (pool.num_open_free() < n) break;
        std::vector<BlockId> blocks;
        for (std::int64_t i = 0; i < n; ++i) blocks.push_back(*pool.allocate());
        Tokens ids(static_cast<std::size_t>(2 * n));
        std::iota(ids.begin(), ids.end(), next_token);
        next_token += static_cast<std::int32_t>(ids.size());
        const std::int32_t parent = nodes[rng() % nodes.size()];
        const std::int32_t leaf = tree.insert(parent, ids, blocks);
        for (const BlockId b : blocks) pool.release(b);
        nodes.push_back(leaf);
        path.at(static_cast<std::size_t>(leaf)) = {parent, blocks};
        if (rng() % 6 == 0) {  // a sequence runs on this path: it locks it and holds its blocks
          tree.lock(leaf);
          locked.push_back(leaf);
          for (std::int32_t x = leaf; x != 0; x = path[static_cast<std::size_t>(x)].first)
            for (const BlockId b : path[static_cast<std::size_t>(x)].second) pool.add_ref(b);
        }
      }
      const std::int64_t before = tree.evictable_blocks();
      const std::int64_t keep = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(before + 1));
      const std::int64_t cached_locked = tree.cached_blocks() - before;
      const std::int64_t freed = tree.trim(keep, by_pages);
      SCOPED_TRACE(testing::Message() << "seed " << seed << " by_pages " << by_pages);
      EXPECT_LE(tree.evictable_blocks(), keep);
      EXPECT_EQ(freed, before - tree.evictable_blocks());
      EXPECT_EQ(tree.cached_blocks() - tree.evictable_blocks(), cached_locked);
      if (by_pages) EXPECT_LE(freed, before - keep + 2) << "at most a quarter region past the count";
      if (!by_pages) EXPECT_EQ(freed, before - keep) << "least recently used: the count exactly";
      EXPECT_EQ(pool.num_used(), tree.cached_blocks());
      tree.check_invariants();
      for (const std::int32_t x : locked) EXPECT_GE(tree.lock_count(x), 1);
    }
}

}  // namespace
}  // namespace kvlab
