#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "alloc/core/error.hpp"
#include "paged/block_pool.hpp"

namespace kvlab {
namespace {

TEST(BlockPool, AllocatesEveryBlockOnceThenRunsOut) {
  BlockPool pool(5);
  std::set<BlockId> got;
  for (int i = 0; i < 5; ++i) got.insert(*pool.allocate());
  EXPECT_EQ(got.size(), 5u);
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_TRUE(pool.release(2));
  EXPECT_EQ(*pool.allocate(), 2);  // LIFO reuse
}

TEST(BlockPool, ReferenceCountsDecideWhenABlockIsFree) {
  BlockPool pool(2);
  const BlockId b = *pool.allocate();
  pool.add_ref(b);
  pool.add_ref(b);
  EXPECT_EQ(pool.ref_count(b), 3);
  EXPECT_FALSE(pool.release(b));
  EXPECT_FALSE(pool.release(b));
  EXPECT_TRUE(pool.release(b));
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_THROW(pool.release(b), InvalidArgument);  // double free
  EXPECT_THROW(pool.add_ref(b), InvalidArgument);
  EXPECT_THROW(pool.add_ref(7), InvalidArgument);
  EXPECT_THROW(BlockPool(0), InvalidArgument);
}

TEST(BlockPool, CountsTheFreeBlocksMarkedCached) {
  for (const FreeOrder order : {FreeOrder::lifo, FreeOrder::lru, FreeOrder::region}) {
    BlockPool pool(4, order, 2);
    const BlockId a = *pool.allocate(), b = *pool.allocate();
    pool.set_cached(a, true);
    pool.set_cached(b, true);
    pool.set_cached(b, true);              // marking twice changes nothing
    EXPECT_EQ(pool.num_free_cached(), 0);  // held blocks are not free
    EXPECT_TRUE(pool.release(a));
    EXPECT_EQ(pool.num_free_cached(), 1);
    pool.set_cached(3, true);  // a free block gains an entry
    EXPECT_EQ(pool.num_free_cached(), 2);
    if (order == FreeOrder::lru) {
      pool.take(a);  // a prefix hit revives it
      EXPECT_EQ(pool.num_free_cached(), 1);
      EXPECT_TRUE(pool.release(a));
    }
    pool.set_cached(3, false);  // a free block loses its entry
    EXPECT_EQ(pool.num_free_cached(), 1);
    while (pool.allocate().has_value()) {
    }
    EXPECT_EQ(pool.num_free_cached(), 0);
    EXPECT_TRUE(pool.is_cached(a));
  }
}

TEST(BlockPool, RegionOrderKeepsEachSequenceAscendingWithinARegion) {
  BlockPool pool(16, FreeOrder::region, 4);  // regions {0-3} {4-7} {8-11} {12-15}
  EXPECT_EQ(pool.region_blocks(), 4);
  EXPECT_EQ(*pool.peek(), 0);
  const BlockId a = *pool.allocate();  // every region has 4 free: the lowest region
  const BlockId b = *pool.allocate();  // region 0 now has 3 free, the others 4
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 4);
  EXPECT_EQ(*pool.allocate(a), 1);  // each sequence continues after its last block
  EXPECT_EQ(*pool.allocate(b), 5);
  EXPECT_EQ(*pool.allocate(1), 2);
  EXPECT_EQ(*pool.allocate(2), 3);
  EXPECT_EQ(*pool.allocate(3), 8);  // region 0 is full: the region with the most free blocks
  EXPECT_TRUE(pool.release(2));
  EXPECT_EQ(*pool.allocate(1), 2);  // the freed block right after 1
  EXPECT_TRUE(pool.release(1));
  // Nothing free after 2 in its region: the region with the most free blocks (region 3; region 0's
  // free block 1 lies behind).
  EXPECT_EQ(*pool.allocate(2), 12);
  EXPECT_EQ(*pool.allocate(4), 6);  // 5 is held: skipped
  EXPECT_THROW((void)pool.allocate(16), InvalidArgument);
  EXPECT_THROW((void)pool.allocate(-2), InvalidArgument);
  EXPECT_THROW(BlockPool(4, FreeOrder::region, 0), InvalidArgument);
  EXPECT_EQ(blocks_per_region(32 << 10), 64);  // block 16 of llama-3-8b: 32 KiB per plane
  EXPECT_EQ(blocks_per_region(3 << 20), 1);    // a block larger than a region
  EXPECT_EQ(blocks_per_region(896, 8192), 9);  // rounded down
}

TEST(BlockPool, LifoAndLruIgnoreTheHint) {
  for (const FreeOrder order : {FreeOrder::lifo, FreeOrder::lru}) {
    BlockPool with(8, order), without(8, order);
    std::mt19937 rng(5);
    std::vector<BlockId> held;
    for (int i = 0; i < 200; ++i) {
      if (with.num_free() > 0 && (held.empty() || rng() % 2 == 0)) {
        const BlockId b = *with.allocate(static_cast<BlockId>(rng() % 8));
        ASSERT_EQ(b, *without.allocate());
        held.push_back(b);
      } else {
        const std::size_t k = rng() % held.size();
        ASSERT_TRUE(with.release(held[k]));
        ASSERT_TRUE(without.release(held[k]));
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
      }
      ASSERT_EQ(with.free_list(), without.free_list());
    }
  }
}

/// The region order against a reference that scans every block: a random mix of allocations
/// (with and without a hint) and releases over pools whose last region is partial.
TEST(BlockPool, RegionOrderMatchesAScanningReference) {
  for (const auto& sizes : std::vector<std::pair<int, int>>{{1, 1}, {7, 3}, {64, 8}, {100, 7}, {33, 64}}) {
    const int blocks = sizes.first, region = sizes.second;  // named, not bound: clang 14 cannot capture bindings
    BlockPool pool(blocks, FreeOrder::region, region);
    std::vector<bool> free(static_cast<std::size_t>(blocks), true);
    std::vector<BlockId> held;
    std::mt19937 rng(static_cast<unsigned>(blocks * 1000 + region));
    const auto expected = [&](BlockId near) -> BlockId {
      if (near >= 0)
        for (BlockId x = near + 1; x < std::min(blocks, (near / region + 1) * region); ++x)
          if (free[static_cast<std::size_t>(x)]) return x;
      int best = -1, best_free = 0;
      for (int r = 0; r * region < blocks; ++r) {
        int n = 0;
        for (BlockId x = r * region; x < std::min(blocks, (r + 1) * region); ++x)
          n += free[static_cast<std::size_t>(x)];
        if (n > best_free) best = r, best_free = n;
      }
      for (BlockId x = best * region;; ++x)
        if (free[static_cast<std::size_t>(x)]) return x;
    };
    int exhausted = 0;
    for (int step = 0; step < 3000; ++step) {
      const int n_free = static_cast<int>(std::count(free.begin(), free.end(), true));
      ASSERT_EQ(pool.num_free(), n_free);
      // Phases of 300 steps that mostly fill, then mostly drain, so every occupancy is visited.
      const bool filling = (step / 300) % 2 == 0;
      if (n_free == 0) {
        ASSERT_FALSE(pool.allocate().has_value());
        ASSERT_FALSE(pool.allocate(held.front()).has_value());
        ASSERT_FALSE(pool.peek().has_value());
        ++exhausted;
      }
      if (n_free > 0 && (held.empty() || rng() % 4 < (filling ? 3u : 1u))) {
        const BlockId near = held.empty() || rng() % 4 == 0 ? -1 : held[rng() % held.size()];
        const BlockId want = expected(near);
        if (near < 0) {
          ASSERT_EQ(*pool.peek(), want);
        }
        const BlockId got = *pool.allocate(near);
        ASSERT_EQ(got, want) << "blocks " << blocks << " region " << region << " step " << step << " near " << near;
        free[static_cast<std::size_t>(got)] = false;
        held.push_back(got);
      } else {
        const std::size_t i = rng() % held.size();
        ASSERT_TRUE(pool.release(held[i]));
        free[static_cast<std::size_t>(held[i])] = true;
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      }
      std::vector<BlockId> want_free;
      for (BlockId x = 0; x < blocks; ++x)
        if (free[static_cast<std::size_t>(x)]) want_free.push_back(x);
      ASSERT_EQ(pool.free_list(), want_free);
    }
    EXPECT_GT(exhausted, 0) << "blocks " << blocks;
  }
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

// Page orders (the elastic backend): blocks come only from open regions; `pages` hands out the
// fullest open region's blocks, `pages_lifo` the block freed last wherever it lies.
TEST(BlockPoolPages, OnlyOpenRegionsHandOutBlocks) {
  for (const FreeOrder order : {FreeOrder::pages, FreeOrder::pages_lifo}) {
    BlockPool pool(12, order, 4);  // regions {0-3} {4-7} {8-11}, all closed
    EXPECT_EQ(pool.num_free(), 12);
    EXPECT_EQ(pool.num_open_free(), 0);
    EXPECT_FALSE(pool.allocate().has_value()) << "a closed region handed out a block";
    pool.open_region(1);
    EXPECT_EQ(pool.num_open_free(), 4);
    EXPECT_EQ(pool.num_open_empty(), 1);
    std::set<BlockId> got;
    for (int i = 0; i < 4; ++i) got.insert(*pool.allocate());
    EXPECT_EQ(got, (std::set<BlockId>{4, 5, 6, 7}));
    EXPECT_FALSE(pool.allocate().has_value());
    EXPECT_EQ(pool.num_open_empty(), 0);
    EXPECT_THROW(pool.close_region(1), InvalidArgument);  // blocks in use
    EXPECT_THROW(pool.open_region(1), InvalidArgument);   // open already
    for (const BlockId b : got) pool.release(b);
    EXPECT_EQ(pool.take_emptied(), std::vector<std::int32_t>{1});
    EXPECT_TRUE(pool.take_emptied().empty()) << "listed twice";
    pool.close_region(1);
    EXPECT_EQ(pool.num_open(), 0);
    EXPECT_EQ(pool.num_free(), 12);
    EXPECT_FALSE(pool.allocate().has_value());
    EXPECT_THROW(BlockPool(10, order, 4), InvalidArgument);  // not whole regions
  }
}

TEST(BlockPoolPages, PageAwareOrderFillsTheFullestRegionFirst) {
  BlockPool pool(12, FreeOrder::pages, 4);
  pool.open_region(0);
  pool.open_region(2);
  std::vector<BlockId> a, c;
  for (int i = 0; i < 8; ++i) {
    const BlockId b = *pool.allocate();
    (b < 4 ? a : c).push_back(b);
  }
  ASSERT_EQ(a.size(), 4u);
  // Region 0 three free, region 2 one free: the next block comes from region 2.
  pool.release(a[0]);
  pool.release(a[1]);
  pool.release(a[2]);
  pool.release(c[3]);
  EXPECT_EQ(pool.region_of(*pool.peek()), 2);
  EXPECT_EQ(pool.region_of(*pool.allocate()), 2);
  EXPECT_EQ(pool.region_of(*pool.allocate()), 0);  // region 2 full now
  // The page-blind order hands out the block freed last: region 0's, though region 2 has one free.
  BlockPool lifo(12, FreeOrder::pages_lifo, 4);
  lifo.open_region(0);
  lifo.open_region(2);
  std::vector<BlockId> all;
  for (int i = 0; i < 8; ++i) all.push_back(*lifo.allocate());
  const BlockId in_two = *std::find_if(all.begin(), all.end(), [](BlockId b) { return b >= 8; });
  const BlockId in_zero = *std::find_if(all.begin(), all.end(), [](BlockId b) { return b < 4; });
  lifo.release(in_two);
  lifo.release(in_zero);
  EXPECT_EQ(*lifo.allocate(), in_zero);
}

// Regions {0-3} {4-7} {8-11} {12-15}: region 0 with 1 free block, region 1 with 3, region 2 empty
// and open, region 3 closed. `held` gets the blocks taken.
BlockPool three_open_regions(PagePlacement placement, std::vector<BlockId>& held) {
  BlockPool pool(16, FreeOrder::pages, 4, placement);
  pool.open_region(0);
  for (int i = 0; i < 3; ++i) held.push_back(*pool.allocate());
  pool.open_region(1);
  held.push_back(*pool.allocate_in(1));
  pool.open_region(2);
  return pool;
}

TEST(BlockPoolPages, LocalPlacementPutsARunWhereItFitsWholeAndANextBlockBesideTheLast) {
  for (const PagePlacement placement : {PagePlacement::local, PagePlacement::spread}) {
    std::vector<BlockId> held;
    BlockPool pool = three_open_regions(placement, held);
    ASSERT_EQ(pool.region_free(0), 1);
    ASSERT_EQ(pool.region_free(1), 3);
    // A run of 2 skips region 0 (one free) for the fullest region that holds it whole.
    const BlockId first = *pool.allocate(-1, 2);
    EXPECT_EQ(pool.region_of(first), 1);
    // The next block follows its sequence's last block, though region 0 is fuller.
    EXPECT_EQ(pool.region_of(*pool.allocate(first)), 1);
    // A run no region holds whole starts on the fullest (region 1: one free).
    EXPECT_EQ(pool.region_of(*pool.allocate(-1, 5)), 1);
    // Region 1 is full now: a block after `first` goes to the fullest open region (local: region 0,
    // one free) or to the emptiest (spread: region 2, four free).
    EXPECT_EQ(pool.region_of(*pool.allocate(first)), placement == PagePlacement::local ? 0 : 2);
    // A block with neither a run nor a sequence before it: the fullest, whatever the placement.
    EXPECT_EQ(pool.region_of(*pool.allocate()), placement == PagePlacement::local ? 2 : 0);
  }
  // The page-aware (fullest) placement ignores both hints: the fullest region, region 0.
  std::vector<BlockId> held;
  BlockPool fullest = three_open_regions(PagePlacement::fullest, held);
  EXPECT_EQ(fullest.region_of(*fullest.allocate(-1, 2)), 0);
  EXPECT_EQ(fullest.region_of(*fullest.allocate(held[3])), 1);  // region 0 full: region 1 (three free)
  EXPECT_THROW(BlockPool(12, FreeOrder::lifo, 4, PagePlacement::local), InvalidArgument);
  EXPECT_THROW(BlockPool(12, FreeOrder::pages_lifo, 4, PagePlacement::spread), InvalidArgument);
}

TEST(BlockPoolPages, CountsStayExactUnderRandomUse) {
  const std::pair<FreeOrder, PagePlacement> forms[] = {{FreeOrder::pages, PagePlacement::fullest},
                                                       {FreeOrder::pages_lifo, PagePlacement::fullest},
                                                       {FreeOrder::pages, PagePlacement::local},
                                                       {FreeOrder::pages, PagePlacement::spread}};
  for (const auto& [order, placement] : forms) {
    BlockPool pool(60, order, 6, placement);
    std::mt19937 rng(3u + static_cast<unsigned>(order) * 7u + static_cast<unsigned>(placement));
    std::vector<BlockId> held;
    for (int step = 0; step < 5000; ++step) {
      const int r = static_cast<int>(rng() % 10);
      if (r < 5) {
        if (pool.num_open_free() == 0) {
          for (std::int32_t g = 0; g < pool.num_regions(); ++g)
            if (!pool.is_open(g)) {
              pool.open_region(g);
              break;
            }
        }
        // A sequence's next block (after a held one) or the start of a run, as PagedBackend asks.
        const BlockId near = held.empty() || rng() % 2 == 0 ? -1 : held[rng() % held.size()];
        const auto run = static_cast<std::int32_t>(near < 0 ? rng() % 9 : 0);
        if (const auto b = pool.allocate(near, run)) held.push_back(*b);
      } else if (r < 9 && !held.empty()) {
        const std::size_t i = rng() % held.size();
        pool.release(held[i]);
        held[i] = held.back();
        held.pop_back();
      } else {
        for (const std::int32_t g : pool.take_emptied()) pool.close_region(g);
      }
      std::int32_t open_free = 0, open_empty = 0, open = 0;
      for (std::int32_t g = 0; g < pool.num_regions(); ++g) {
        if (!pool.is_open(g)) {
          ASSERT_EQ(pool.region_free(g), 6);
          continue;
        }
        ++open;
        open_free += pool.region_free(g);
        open_empty += pool.region_free(g) == 6;
      }
      ASSERT_EQ(pool.num_free(), 60 - static_cast<std::int32_t>(held.size()));
      ASSERT_EQ(pool.num_open_free(), open_free);
      ASSERT_EQ(pool.num_open_empty(), open_empty);
      ASSERT_EQ(pool.num_open(), open);
      ASSERT_EQ(static_cast<std::int32_t>(pool.free_list().size()), open_free);
    }
  }
}

}  // namespace
}  // namespace kvlab
