// SlotArena and MapTransaction on the POSIX driver: the arena's books against the driver's.
#include <gtest/gtest.h>

#include <cstring>
#include <algorithm>
#include <memory>
#include <random>
#include <utility>
#include <stdexcept>

#include "alloc/error.hpp"
#include "tests/vmm/vmm_test_support.hpp"
#include "vmm/slot_arena.hpp"

namespace kvlab {
namespace {

using testing::kKiB;

ArenaShape small_shape() {
  ArenaShape s;
  s.tensors = 2;
  s.slots = 3;
  s.page_bytes = 4 * kKiB;
  s.slot_bytes = 4 * s.page_bytes;
  s.num_pages = 6;
  return s;
}

/// Maps `n` fresh pages as the next rows of (slot, tensor) inside `txn`.
void map_fresh(SlotArena& arena, MapTransaction& txn, int slot, int tensor, int n) {
  for (int i = 0; i < n; ++i) {
    const auto page = arena.pool().allocate();
    ASSERT_TRUE(page.has_value());
    ASSERT_TRUE(arena.map_tail(slot, tensor, *page, MapOrigin::critical));
    txn.record(slot, tensor);
  }
}

TEST(SlotArena, AnUncommittedTransactionUnmapsWhatItMapped) {
  auto driver = std::make_shared<PosixVmDriver>(64 * kKiB);
  {
    SlotArena arena(driver.get(), small_shape(), PageFreeOrder::lifo);
    EXPECT_EQ(driver->usage().reservations, 1u);
    EXPECT_EQ(arena.reserved_bytes(), 2u * 3 * 16 * kKiB);
    {
      MapTransaction txn(arena);
      map_fresh(arena, txn, 1, 0, 2);
      map_fresh(arena, txn, 1, 1, 1);
      EXPECT_EQ(arena.held(1), 3);
      EXPECT_EQ(driver->usage().mappings, 3u);
    }  // not committed: rolled back
    EXPECT_EQ(arena.held(1), 0);
    EXPECT_EQ(arena.pool().num_free(), 6);
    EXPECT_EQ(driver->usage().mappings, 0u);
    EXPECT_EQ(arena.activity(MapOrigin::critical).unmaps, 3);
    EXPECT_EQ(arena.synchronizations(), 0) << "fresh pages were never read: no synchronize";
  }
  EXPECT_TRUE(driver->usage().empty());
}

TEST(SlotArena, ACommittedTransactionKeepsItsPagesAndAThrowRollsBack) {
  auto driver = std::make_shared<PosixVmDriver>(64 * kKiB);
  {
    SlotArena arena(driver.get(), small_shape(), PageFreeOrder::lifo);
    {
      MapTransaction txn(arena);
      map_fresh(arena, txn, 0, 0, 2);
      txn.commit();
    }
    EXPECT_EQ(arena.held(0), 2);
    EXPECT_EQ(arena.complete_rows(0), 0);
    EXPECT_EQ(arena.top_rows(0), 2);
    EXPECT_EQ(arena.missing_pages(0, 3), 1 + 3);
    // The committed page 0 of slot 0 is shared into slot 2; a later throw undoes only that map.
    const PageId shared = arena.pages(0, 0)[0];
    try {
      MapTransaction txn(arena);
      ASSERT_TRUE(arena.map_tail(2, 0, shared, MapOrigin::critical));
      txn.record(2, 0);
      EXPECT_EQ(arena.mappings(shared), 2);
      throw std::runtime_error("a copy failed");
    } catch (const std::runtime_error&) {
    }
    EXPECT_EQ(arena.mappings(shared), 1);
    EXPECT_EQ(arena.held(2), 0);
    EXPECT_EQ(driver->usage().mappings, 2u);
  }
  EXPECT_TRUE(driver->usage().empty()) << "the destructor unmaps and frees everything";
}

TEST(SlotArena, TheLastUnmapFreesAPageAndCallsTheHook) {
  auto driver = std::make_shared<PosixVmDriver>(64 * kKiB);
  SlotArena arena(driver.get(), small_shape(), PageFreeOrder::lifo);
  std::vector<PageId> freed;
  arena.set_on_page_freed([&](PageId p) { freed.push_back(p); });
  const PageId p = *arena.pool().allocate();
  ASSERT_TRUE(arena.map_tail(0, 1, p, MapOrigin::critical));
  ASSERT_TRUE(arena.map_tail(1, 1, p, MapOrigin::background));
  // Both slots see the same bytes at the same offset.
  std::memset(arena.slot_base(1, 0), 0x5a, 16);
  EXPECT_EQ(std::to_integer<int>(arena.slot_base(1, 1)[15]), 0x5a);
  arena.synchronize(MapOrigin::critical);
  EXPECT_FALSE(arena.unmap_tail(0, 1, MapOrigin::critical));
  EXPECT_TRUE(freed.empty());
  EXPECT_TRUE(arena.unmap_tail(1, 1, MapOrigin::background));
  EXPECT_EQ(freed, std::vector<PageId>{p});
  EXPECT_FALSE(arena.pool().in_use(p));
  EXPECT_EQ(arena.activity(MapOrigin::background).maps, 1);
  EXPECT_EQ(arena.activity(MapOrigin::background).unmaps, 1);
}

TEST(SlotArena, AFailedMapGivesAFreshPageBackAndChangesNothingElse) {
  auto driver = std::make_shared<PosixVmDriver>(64 * kKiB);
  SlotArena arena(driver.get(), small_shape(), PageFreeOrder::lifo);
  driver->set_fault_hook([](VmCall call) { return call == VmCall::map ? VmFault::out_of_memory : VmFault::none; });
  const PageId p = *arena.pool().allocate();
  EXPECT_FALSE(arena.map_tail(0, 0, p, MapOrigin::critical));
  EXPECT_FALSE(arena.pool().in_use(p));
  EXPECT_EQ(arena.held(0), 0);
  driver->set_fault_hook([](VmCall call) { return call == VmCall::set_access ? VmFault::error : VmFault::none; });
  const PageId q = *arena.pool().allocate();
  EXPECT_THROW(arena.map_tail(0, 0, q, MapOrigin::critical), Error);
  EXPECT_FALSE(arena.pool().in_use(q));
  EXPECT_EQ(driver->usage().mappings, 0u);
  driver->set_fault_hook({});
}

TEST(SlotArena, WithoutADriverItOnlyKeepsTheBooks) {
  SlotArena arena(nullptr, small_shape(), PageFreeOrder::lifo);
  EXPECT_EQ(arena.slot_base(0, 0), nullptr);
  EXPECT_EQ(arena.reserved_bytes(), 0u);
  MapTransaction txn(arena);
  map_fresh(arena, txn, 2, 1, 4);
  EXPECT_EQ(arena.held(2), 4);
  EXPECT_EQ(arena.pool().num_free(), 2);
}

/// complete_rows, top_rows and missing_pages of `slot` (kept incrementally) against the page lists;
/// returns the shortest and longest tensor's rows.
std::pair<std::int64_t, std::int64_t> expect_row_bounds_match(const SlotArena& arena, int slot) {
  std::int64_t lo = INT64_MAX, hi = 0;
  for (int t = 0; t < arena.num_tensors(); ++t) {
    lo = std::min<std::int64_t>(lo, static_cast<std::int64_t>(arena.pages(slot, t).size()));
    hi = std::max<std::int64_t>(hi, static_cast<std::int64_t>(arena.pages(slot, t).size()));
  }
  EXPECT_EQ(arena.complete_rows(slot), lo);
  EXPECT_EQ(arena.top_rows(slot), hi);
  for (std::int64_t rows = 0; rows <= arena.rows_per_slot(); ++rows) {
    std::int64_t missing = 0;
    for (int t = 0; t < arena.num_tensors(); ++t)
      missing += std::max<std::int64_t>(0, rows - static_cast<std::int64_t>(arena.pages(slot, t).size()));
    EXPECT_EQ(arena.missing_pages(slot, rows), missing) << "rows " << rows;
  }
  return {lo, hi};
}

/// complete_rows, top_rows and missing_pages are kept incrementally; recomputed here from the page
/// lists after every one of a seeded random walk of maps and unmaps (shared pages included, so a
/// page's last unmap and an unmap that keeps it both occur), over 1, 2, 3 and 5 tensors.
TEST(SlotArena, RowBoundsMatchThePageListsAfterEveryMapAndUnmap) {
  for (const int tensors : {1, 2, 3, 5}) {
    ArenaShape shape;
    shape.tensors = tensors;
    shape.slots = 3;
    shape.page_bytes = 4 * kKiB;
    shape.slot_bytes = 6 * shape.page_bytes;
    shape.num_pages = static_cast<std::int64_t>(tensors) * 3 * 6;
    SlotArena arena(nullptr, shape, PageFreeOrder::lifo);
    std::mt19937 rng(20261126u + static_cast<unsigned>(tensors));
    int checked_partial = 0;
    for (int step = 0; step < 4000; ++step) {
      const int slot = static_cast<int>(rng() % 3), tensor = static_cast<int>(rng() % static_cast<unsigned>(tensors));
      const auto size = static_cast<std::int64_t>(arena.pages(slot, tensor).size());
      const bool grow = size == 0 || (size < arena.rows_per_slot() && rng() % 2 == 0);
      if (grow) {
        // Every third map shares a page another slot maps (when there is one).
        const int other = (slot + 1) % 3;
        const std::span<const PageId> theirs = arena.pages(other, tensor);
        if (rng() % 3 == 0 && static_cast<std::int64_t>(theirs.size()) > size) {
          ASSERT_TRUE(arena.map_tail(slot, tensor, theirs[static_cast<std::size_t>(size)], MapOrigin::critical));
        } else {
          const auto page = arena.pool().allocate();
          ASSERT_TRUE(page.has_value());
          ASSERT_TRUE(arena.map_tail(slot, tensor, *page, MapOrigin::critical));
        }
      } else {
        arena.unmap_tail(slot, tensor, MapOrigin::critical);
      }
      for (int s = 0; s < 3; ++s) {
        const auto [lo, hi] = expect_row_bounds_match(arena, s);
        ASSERT_FALSE(::testing::Test::HasFailure()) << tensors << " tensors, step " << step << ", slot " << s;
        for (std::int64_t rows = lo + 1; rows < hi; ++rows) ++checked_partial;
      }
    }
    if (tensors > 1) {
      EXPECT_GT(checked_partial, 100) << "the walk never left a slot with a partial row";
    }
  }
}

/// The bounds follow the books on the driver's failure paths too: a page whose set_access and
/// undoing unmap both fail stays mapped and booked; an unmap that fails changes nothing.
TEST(SlotArena, RowBoundsFollowTheBooksWhenTheDriverFails) {
  auto driver = std::make_shared<PosixVmDriver>(64 * kKiB);
  {
    SlotArena arena(driver.get(), small_shape(), PageFreeOrder::lifo);
    ASSERT_TRUE(arena.map_tail(0, 0, *arena.pool().allocate(), MapOrigin::critical));
    expect_row_bounds_match(arena, 0);
    driver->set_fault_hook(
        [](VmCall c) { return c == VmCall::set_access || c == VmCall::unmap ? VmFault::error : VmFault::none; });
    EXPECT_THROW(arena.map_tail(0, 1, *arena.pool().allocate(), MapOrigin::critical), Error);
    EXPECT_EQ(arena.held(0), 2) << "stuck mapped: kept in the books";
    EXPECT_EQ(expect_row_bounds_match(arena, 0), (std::pair<std::int64_t, std::int64_t>{1, 1}));
    EXPECT_THROW(arena.unmap_tail(0, 0, MapOrigin::critical), Error);
    EXPECT_EQ(arena.held(0), 2);
    EXPECT_EQ(expect_row_bounds_match(arena, 0), (std::pair<std::int64_t, std::int64_t>{1, 1}));
    driver->set_fault_hook({});
    arena.synchronize(MapOrigin::critical);
    EXPECT_TRUE(arena.unmap_tail(0, 1, MapOrigin::critical));
    EXPECT_EQ(expect_row_bounds_match(arena, 0), (std::pair<std::int64_t, std::int64_t>{0, 1}));
  }
  EXPECT_TRUE(driver->usage().empty()) << "the destructor unmapped the rest";
}

}  // namespace
}  // namespace kvlab
