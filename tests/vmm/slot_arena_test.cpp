// SlotArena and MapTransaction on the POSIX driver: the arena's books against the driver's.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
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

}  // namespace
}  // namespace kvlab
