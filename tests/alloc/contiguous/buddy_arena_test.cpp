#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "alloc/contiguous/buddy_arena.hpp"
#include "alloc/core/error.hpp"

namespace kvlab {
namespace {

using Hole = std::pair<std::size_t, std::size_t>;

TEST(BuddyArena, SplitsTheSmallestBlockAndRoundsToPowersOfTwo) {
  BuddyArena a(16 * 100, 100);     // one root of 16 units
  const auto x = a.allocate(100);  // 1 unit
  const auto y = a.allocate(250);  // 3 units -> a block of 4
  const auto z = a.allocate(101);  // 2 units
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(*x, 0u);
  EXPECT_EQ(*y, 400u);  // split 16 -> 8 + 8, 8 -> 4 + 4, 4 -> 2 + 2, 2 -> 1 + 1: 4-block at unit 4
  EXPECT_EQ(*z, 200u);  // the free 2-block left at unit 2
  EXPECT_EQ(a.block_size(*x), 100u);
  EXPECT_EQ(a.block_size(*y), 400u);
  EXPECT_EQ(a.block_size(*z), 200u);
  EXPECT_EQ(a.rounded(250), 400u);
  EXPECT_EQ(a.free_bytes(), 900u);
  EXPECT_EQ(a.holes(), (std::vector<Hole>{{100, 100}, {800, 800}}));
  EXPECT_EQ(a.largest_hole(), 800u);
}

TEST(BuddyArena, FreeingMergesBuddiesBackToTheRoot) {
  BuddyArena a(16 * 100, 100);
  std::vector<std::size_t> off;
  for (int i = 0; i < 16; ++i) off.push_back(*a.allocate(100));
  EXPECT_FALSE(a.can_allocate(1));
  // Free units 1 and 2: free neighbours, but not buddies (1's buddy is 0, 2's is 3).
  a.deallocate(off[1]);
  a.deallocate(off[2]);
  EXPECT_EQ(a.holes(), (std::vector<Hole>{{100, 100}, {200, 100}}));
  EXPECT_FALSE(a.can_allocate(200));  // 200 bytes free, but no free 2-block
  EXPECT_EQ(a.free_bytes_in_holes_smaller_than(200), 200u);
  EXPECT_EQ(a.free_bytes_in_holes_smaller_than(100), 0u);
  for (int i : {0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) a.deallocate(off[i]);
  EXPECT_EQ(a.holes(), (std::vector<Hole>{{0, 1600}}));
  EXPECT_EQ(a.num_allocations(), 0u);
}

TEST(BuddyArena, ACapacityThatIsNoPowerOfTwoIsSeveralRootsThatNeverMerge) {
  BuddyArena a(13 * 10 + 7, 10);  // 13 units (8 + 4 + 1); the 7-byte tail is never used
  EXPECT_EQ(a.capacity(), 130u);
  EXPECT_EQ(a.holes(), (std::vector<Hole>{{0, 80}, {80, 40}, {120, 10}}));
  EXPECT_FALSE(a.can_allocate(81));  // no block of 16 units exists
  EXPECT_FALSE(a.allocate(81).has_value());
  EXPECT_FALSE(a.allocate(200).has_value());  // larger than the region: no order fits
  EXPECT_EQ(a.free_bytes(), 130u);            // failed allocations change nothing
  const auto four = a.allocate(40);
  ASSERT_TRUE(four);
  EXPECT_EQ(*four, 80u);  // the exact-size root, not a split of the 8
  a.deallocate(*four);
  EXPECT_EQ(a.holes(), (std::vector<Hole>{{0, 80}, {80, 40}, {120, 10}}));
  // Every byte of a region too small for one unit is unusable, not an error.
  BuddyArena none(5, 10);
  EXPECT_EQ(none.capacity(), 0u);
  EXPECT_FALSE(none.allocate(1).has_value());
}

TEST(BuddyArena, RejectsUnknownOffsets) {
  BuddyArena a(8 * 64, 64);
  EXPECT_THROW(a.deallocate(64), InvalidArgument);
  EXPECT_THROW((void)a.block_size(0), InvalidArgument);
  const auto x = a.allocate(1);
  EXPECT_THROW(a.deallocate(*x + 1), InvalidArgument);  // not a block start
  a.deallocate(*x);
  EXPECT_THROW(a.deallocate(*x), InvalidArgument);       // double free
  const auto y = a.allocate(128);                        // a block of two units
  EXPECT_THROW(a.deallocate(*y + 64), InvalidArgument);  // a unit inside it, not its start
  EXPECT_EQ(a.rounded(9 * 64), 0u);                      // larger than any block of the region
  EXPECT_FALSE(a.can_allocate(SIZE_MAX));
  EXPECT_THROW(BuddyArena(100, 0), InvalidArgument);
}

TEST(BuddyArena, RandomOperationsKeepTheBuddyInvariants) {
  // 1000 units: roots of 512, 256, 128, 64, 32, 8 at 0, 512, 768, 896, 960, 992.
  const std::vector<std::size_t> roots = {0, 512, 768, 896, 960, 992, 1000};
  const std::size_t unit = 48;
  BuddyArena a(1000 * unit + 5, unit);
  std::mt19937_64 rng(11);
  std::vector<std::size_t> live;
  for (int step = 0; step < 4000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const std::size_t bytes = 1 + rng() % (70 * unit);
      const bool could = a.can_allocate(bytes);
      const auto o = a.allocate(bytes);
      ASSERT_EQ(could, o.has_value());
      if (o) {
        ASSERT_EQ(a.block_size(*o), a.rounded(bytes));
        live.push_back(*o);
      }
    } else {
      const std::size_t i = rng() % live.size();
      a.deallocate(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    // Live and free blocks tile the region exactly; each is aligned to its size within its root
    // and lies inside one root.
    std::vector<Hole> blocks = a.holes();
    std::size_t used = 0;
    for (std::size_t o : live) {
      blocks.emplace_back(o, a.block_size(o));
      used += a.block_size(o);
    }
    ASSERT_EQ(used + a.free_bytes(), a.capacity());
    std::sort(blocks.begin(), blocks.end());
    std::size_t end = 0;
    for (const auto& [o, s] : blocks) {
      ASSERT_EQ(o, end);
      const std::size_t u = o / unit, n = s / unit;
      const auto root = *std::prev(std::upper_bound(roots.begin(), roots.end(), u));
      ASSERT_EQ((u - root) % n, 0u);
      ASSERT_LE(u + n, *std::upper_bound(roots.begin(), roots.end(), u));
      end = o + s;
    }
    ASSERT_EQ(end, a.capacity());
  }
  for (std::size_t o : live) a.deallocate(o);
  EXPECT_EQ(a.holes().size(), roots.size() - 1);  // all merged back to the roots
}

}  // namespace
}  // namespace kvlab
