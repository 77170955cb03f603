// SlotArena and MapTransaction on the POSIX driver: the arena's books against the driver's.
#include <gtest/gtest.h>

#include <cstring>
#include <algorithm>
#include <memory>
#include <random>
#include <utility>
#include <stdexcept>

#include "alloc/core/error.hpp"
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

/// Three slots of `rows` 4 KiB pages per tensor, and pages enough to fill them all.
ArenaShape walk_shape(int tensors, int rows) {
  ArenaShape shape;
  shape.tensors = tensors;
  shape.slots = 3;
  shape.page_bytes = 4 * kKiB;
  shape.slot_bytes = static_cast<std::size_t>(rows) * shape.page_bytes;
  shape.num_pages = static_cast<std::int64_t>(tensors) * 3 * rows;
  return shape;
}

/// complete_rows, top_rows and missing_pages are kept incrementally; recomputed here from the page
/// lists after every one of a seeded random walk of maps and unmaps (shared pages included, so a
/// page's last unmap and an unmap that keeps it both occur), over 1, 2, 3 and 5 tensors.
TEST(SlotArena, RowBoundsMatchThePageListsAfterEveryMapAndUnmap) {
  for (const int tensors : {1, 2, 3, 5}) {
    SlotArena arena(nullptr, walk_shape(tensors, 6), PageFreeOrder::lifo);
    std::mt19937 rng(20261126u + static_cast<unsigned>(tensors));
    int checked_partial = 0;
    for (int step = 0; step < 4000; ++step) {
      const int slot = static_cast<int>(rng() % 3), tensor = static_cast<int>(rng() % static_cast<unsigned>(tensors));
      const auto size = static_cast<std::int64_t>(arena.pages(slot, tensor).size());
      const bool grow = size == 0 || (size < arena.rows_per_slot() && rng() % 2 == 0);
      if (grow) {
        // Every third map shares a page another slot maps (when there is one).
        const int other = (slot + 1) % 3;
        const PageColumn theirs = arena.pages(other, tensor);
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

/// The books a SlotArena should keep, kept plainly: a list of pages per slot and tensor, and how
/// many slots map each page. Each operation applies to the arena and to the model.
struct ArenaModel {
  SlotArena& arena;
  std::size_t T;
  std::vector<std::vector<std::vector<PageId>>> pages;  // [slot][tensor]
  std::vector<int> refs;                                // [page]

  explicit ArenaModel(SlotArena& a)
      : arena(a),
        T(static_cast<std::size_t>(a.num_tensors())),
        pages(static_cast<std::size_t>(a.num_slots()), std::vector<std::vector<PageId>>(T)),
        refs(static_cast<std::size_t>(a.pool().num_pages()), 0) {}
  std::vector<PageId>& column(int slot, std::size_t tensor) { return pages[static_cast<std::size_t>(slot)][tensor]; }
  /// A row of fresh pages; false when the pool has no row.
  bool map_row(int slot) {
    std::vector<PageId> row(T);
    if (!arena.pool().allocate_pages(row)) return false;
    arena.map_row(slot, row, MapOrigin::critical);
    for (std::size_t t = 0; t < T; ++t) column(slot, t).push_back(row[t]), ++refs[static_cast<std::size_t>(row[t])];
    return true;
  }
  void unmap_row(int slot) {
    std::int64_t freed = 0;
    for (std::size_t t = T; t-- > 0;) {
      const PageId p = column(slot, t).back();
      column(slot, t).pop_back();
      freed += --refs[static_cast<std::size_t>(p)] == 0;
    }
    ASSERT_EQ(arena.unmap_row(slot, MapOrigin::critical), freed);
  }
  void map_tail(int slot, std::size_t tensor, PageId page) {
    ASSERT_TRUE(arena.map_tail(slot, static_cast<int>(tensor), page, MapOrigin::critical));
    column(slot, tensor).push_back(page);
    ++refs[static_cast<std::size_t>(page)];
  }
  void unmap_tail(int slot, std::size_t tensor) {
    const PageId p = column(slot, tensor).back();
    column(slot, tensor).pop_back();
    ASSERT_EQ(arena.unmap_tail(slot, static_cast<int>(tensor), MapOrigin::critical),
              --refs[static_cast<std::size_t>(p)] == 0);
  }
  /// Every column, every page's mappings, the pool's count and the row bounds agree.
  void expect_same_books() {
    std::int64_t mapped = 0;
    for (int s = 0; s < arena.num_slots(); ++s)
      for (std::size_t t = 0; t < T; ++t) {
        const PageColumn got = arena.pages(s, static_cast<int>(t));
        ASSERT_EQ(got.size(), column(s, t).size()) << "slot " << s << " tensor " << t;
        for (std::size_t r = 0; r < got.size(); ++r) ASSERT_EQ(got[r], column(s, t)[r]) << "slot " << s << " row " << r;
      }
    for (std::size_t p = 0; p < refs.size(); ++p) {
      ASSERT_EQ(arena.mappings(static_cast<PageId>(p)), refs[p]) << "page " << p;
      mapped += refs[p] > 0;
    }
    ASSERT_EQ(arena.pool().num_used(), mapped);
    for (int s = 0; s < arena.num_slots(); ++s) expect_row_bounds_match(arena, s);
  }
};

/// One step of the walk below: a row (3 in 8) or a page (1 in 8) mapped or unmapped where the
/// arena allows it. A page mapped goes to the slot's shortest tensor most of the time (so partial
/// rows fill up again and row operations keep finding whole rows) and is shared with the next slot
/// half of the time. Returns 'R' for a row mapped, 'U' for a row unmapped, 0 otherwise.
char random_operation(ArenaModel& m, std::mt19937& rng) {
  SlotArena& a = m.arena;
  const int slot = static_cast<int>(rng() % static_cast<unsigned>(a.num_slots()));
  const unsigned op = rng() % 8;
  if (op < 3) return a.whole_rows(slot) && a.top_rows(slot) < a.rows_per_slot() && m.map_row(slot) ? 'R' : 0;
  if (op < 6) {
    if (!a.whole_rows(slot) || a.top_rows(slot) == 0) return 0;
    m.unmap_row(slot);
    return 'U';
  }
  std::size_t tensor = rng() % m.T;
  if (op == 6 && rng() % 4 != 0)
    for (std::size_t t = 0; t < m.T; ++t)
      if (m.column(slot, t).size() < m.column(slot, tensor).size()) tensor = t;
  std::vector<PageId>& column = m.column(slot, tensor);
  if (op == 7) {
    if (!column.empty()) m.unmap_tail(slot, tensor);
    return 0;
  }
  if (static_cast<std::int64_t>(column.size()) >= a.rows_per_slot()) return 0;
  const std::vector<PageId>& theirs = m.column((slot + 1) % a.num_slots(), tensor);
  const PageId page =
      rng() % 2 == 0 && theirs.size() > column.size() ? theirs[column.size()] : a.pool().allocate_page();
  if (page != kNoPage) m.map_tail(slot, tensor, page);
  return 0;
}

/// The arena's row-major grid against the plain model after every step of a seeded random walk
/// that mixes page operations (fresh and shared pages) with row operations, over 1, 2, 3 and 7
/// tensors; then an uncommitted transaction holding a row and a page leaves the books as they were.
TEST(SlotArena, RowAndPageOperationsKeepTheSameBooksAsAPlainModel) {
  for (const int tensors : {1, 2, 3, 7}) {
    SlotArena arena(nullptr, walk_shape(tensors, 5), PageFreeOrder::lifo);
    ArenaModel model(arena);
    std::mt19937 rng(20261128u + static_cast<unsigned>(tensors));
    int rows_mapped = 0, rows_unmapped = 0;
    for (int step = 0; step < 3000; ++step) {
      const char op = random_operation(model, rng);
      rows_mapped += op == 'R';
      rows_unmapped += op == 'U';
      model.expect_same_books();
      ASSERT_FALSE(::testing::Test::HasFailure()) << tensors << " tensors, step " << step;
    }
    EXPECT_GT(rows_mapped, 20) << tensors << " tensors";
    EXPECT_GT(rows_unmapped, 20) << tensors << " tensors";
    const int slot = 0;  // emptied, so that a row and a page fit
    for (std::size_t t = 0; t < model.T; ++t)
      while (!model.column(slot, t).empty()) model.unmap_tail(slot, t);
    ASSERT_GT(arena.pool().num_free(), tensors);
    {
      MapTransaction txn(arena);
      std::vector<PageId> row(static_cast<std::size_t>(tensors));
      ASSERT_TRUE(arena.pool().allocate_pages(row));
      arena.map_row(slot, row, MapOrigin::critical);
      txn.record_row(slot);
      ASSERT_TRUE(arena.map_tail(slot, 0, arena.pool().allocate_page(), MapOrigin::critical));
      txn.record(slot, 0);
    }
    model.expect_same_books();
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
