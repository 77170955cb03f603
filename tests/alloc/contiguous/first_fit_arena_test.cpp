#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "alloc/core/error.hpp"
#include "alloc/contiguous/first_fit_arena.hpp"

namespace kvlab {
namespace {

TEST(FirstFitArena, PlacesInLowestHoleAndCoalesces) {
  FirstFitArena a(1000, 4);
  const auto x = a.allocate(200), y = a.allocate(300), z = a.allocate(100);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(*x, 0u);
  EXPECT_EQ(*y, 200u);
  EXPECT_EQ(*z, 500u);
  a.deallocate(*x);  // holes: [0,200) and [600,1000)
  EXPECT_EQ(a.free_bytes(), 600u);
  EXPECT_EQ(a.largest_hole(), 400u);
  EXPECT_EQ(*a.allocate(150), 0u);  // rounded to 152, first fit at 0
  a.deallocate(0);
  a.deallocate(*y);  // [0,500) coalesces with the freed neighbours
  a.deallocate(*z);  // and with the tail: one hole again
  ASSERT_EQ(a.holes().size(), 1u);
  EXPECT_EQ(a.holes()[0], std::make_pair(std::size_t{0}, std::size_t{1000}));
}

TEST(FirstFitArena, ExternalFragmentationKnownByHand) {
  // Ten 100-byte slots; free every other one: 500 bytes free, none in a hole of 200.
  FirstFitArena a(1000, 4);
  std::vector<std::size_t> off;
  for (int i = 0; i < 10; ++i) off.push_back(*a.allocate(100));
  for (int i = 0; i < 10; i += 2) a.deallocate(off[i]);
  EXPECT_EQ(a.free_bytes(), 500u);
  EXPECT_FALSE(a.can_allocate(200));
  EXPECT_FALSE(a.allocate(200).has_value());
  EXPECT_EQ(a.free_bytes(), 500u);  // a failed allocation changes nothing
  EXPECT_EQ(a.free_bytes_in_holes_smaller_than(200), 500u);
  EXPECT_EQ(a.free_bytes_in_holes_smaller_than(100), 0u);
  EXPECT_TRUE(a.can_allocate(100));
}

TEST(FirstFitArena, RejectsUnknownOffsets) {
  FirstFitArena a(1024, 256);
  EXPECT_THROW(a.deallocate(256), InvalidArgument);
  const auto x = a.allocate(1);
  EXPECT_EQ(a.block_size(*x), 256u);
  a.deallocate(*x);
  EXPECT_THROW(a.deallocate(*x), InvalidArgument);  // double free
}

TEST(FirstFitArena, RandomOperationsKeepBytesConserved) {
  FirstFitArena a(1 << 20, 256);
  std::mt19937_64 rng(3);
  std::vector<std::size_t> live;
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      if (auto o = a.allocate(1 + rng() % 20000)) live.push_back(*o);
    } else {
      const std::size_t i = rng() % live.size();
      a.deallocate(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    std::size_t used = 0;
    for (std::size_t o : live) used += a.block_size(o);
    ASSERT_EQ(used + a.free_bytes(), a.capacity());
    std::size_t holes = 0, prev_end = 0;
    bool first = true;
    for (auto [o, s] : a.holes()) {
      if (!first) {
        ASSERT_GT(o, prev_end);  // neighbouring holes are always coalesced
      }
      first = false;
      holes += s;
      prev_end = o + s;
    }
    ASSERT_EQ(holes, a.free_bytes());
  }
}

}  // namespace
}  // namespace kvlab
