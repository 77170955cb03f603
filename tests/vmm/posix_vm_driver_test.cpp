// The POSIX virtual-memory driver: real mappings over one memfd, checked against its own
// bookkeeping and against /proc/self/maps; the page pool over it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include "alloc/core/error.hpp"
#include "tests/vmm/vmm_test_support.hpp"
#include "vmm/page_pool.hpp"
#include "vmm/posix_vm_driver.hpp"

namespace kvlab {
namespace {

using testing::kKiB;

TEST(PosixVmDriver, ReserveMapAccessUnmapFree) {
  PosixVmDriver d(256 * kKiB);
  EXPECT_EQ(d.granularity(), 4 * kKiB);
  EXPECT_EQ(d.device(), Device::host);
  void* base = d.reserve(1024 * kKiB, 64 * kKiB);
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(base) % (64 * kKiB), 0u);
  const std::optional<PhysHandle> h = d.create(64 * kKiB);
  ASSERT_TRUE(h);
  auto* p = static_cast<unsigned char*>(base) + 128 * kKiB;
  ASSERT_TRUE(d.map(p, 64 * kKiB, *h));
  d.set_access(p, 64 * kKiB);
  std::memset(p, 0xab, 64 * kKiB);
  EXPECT_EQ(testing::maps_lines_containing("memfd:kvlab-vmm"), 1);
  EXPECT_EQ(d.usage(), (PosixVmUsage{1, 1024 * kKiB, 1, 64 * kKiB, 1, 64 * kKiB}));
  d.unmap(p, 64 * kKiB);
  EXPECT_EQ(testing::maps_lines_containing("memfd:kvlab-vmm"), 0);
  d.release(*h);
  d.free_reservation(base, 1024 * kKiB);
  EXPECT_TRUE(d.usage().empty());
  EXPECT_FALSE(testing::maps_overlap(base, 1024 * kKiB));
}

TEST(PosixVmDriver, DataLivesInTheHandleAcrossUnmapAndRemapElsewhere) {
  PosixVmDriver d(64 * kKiB);
  void* base = d.reserve(256 * kKiB, 0);
  const PhysHandle h = *d.create(16 * kKiB);
  auto* a = static_cast<unsigned char*>(base);
  auto* b = a + 128 * kKiB;
  ASSERT_TRUE(d.map(a, 16 * kKiB, h));
  d.set_access(a, 16 * kKiB);
  for (std::size_t i = 0; i < 16 * kKiB; ++i) a[i] = static_cast<unsigned char>(i * 7);
  d.unmap(a, 16 * kKiB);
  ASSERT_TRUE(d.map(b, 16 * kKiB, h));
  d.set_access(b, 16 * kKiB);
  for (std::size_t i = 0; i < 16 * kKiB; ++i) ASSERT_EQ(b[i], static_cast<unsigned char>(i * 7)) << i;
  d.unmap(b, 16 * kKiB);
  d.release(h);
  d.free_reservation(base, 256 * kKiB);
}

TEST(PosixVmDriver, PhysicalMemoryIsTheMemfdCapacity) {
  PosixVmDriver d(3 * 64 * kKiB);
  std::vector<PhysHandle> hs;
  for (int i = 0; i < 3; ++i) hs.push_back(*d.create(64 * kKiB));
  EXPECT_FALSE(d.create(4 * kKiB)) << "out of memory is a value";
  d.release(hs[1]);
  EXPECT_FALSE(d.create(128 * kKiB));
  const auto again = d.create(64 * kKiB);  // first fit reuses the hole
  ASSERT_TRUE(again);
  d.release(hs[0]);
  d.release(hs[2]);
  d.release(*again);
  EXPECT_TRUE(d.create(3 * 64 * kKiB)) << "released extents coalesce";
}

TEST(PosixVmDriver, MisuseIsRejectedBeforeAnythingChanges) {
  PosixVmDriver d(64 * kKiB);
  void* base = d.reserve(64 * kKiB, 0);
  auto* p = static_cast<unsigned char*>(base);
  const PhysHandle h = *d.create(16 * kKiB);
  EXPECT_THROW((void)d.map(p + 1, 16 * kKiB, h), InvalidArgument);          // unaligned
  EXPECT_THROW((void)d.map(p, 8 * kKiB, h), InvalidArgument);               // part of a handle
  EXPECT_THROW((void)d.map(p + 56 * kKiB, 16 * kKiB, h), InvalidArgument);  // past the reservation
  EXPECT_THROW((void)d.map(p, 16 * kKiB, h + 99), InvalidArgument);         // unknown handle
  EXPECT_THROW(d.set_access(p, 16 * kKiB), InvalidArgument);                // not mapped
  ASSERT_TRUE(d.map(p, 16 * kKiB, h));
  EXPECT_THROW((void)d.map(p + 8 * kKiB, 16 * kKiB, h), InvalidArgument);  // over a mapping
  EXPECT_THROW(d.unmap(p, 8 * kKiB), InvalidArgument);                     // part of a mapping
  EXPECT_THROW(d.free_reservation(base, 64 * kKiB), InvalidArgument);      // still mapped
  EXPECT_EQ(d.usage().mappings, 1u);
  d.unmap(p, 16 * kKiB);
  d.release(h);
  EXPECT_THROW(d.release(h), InvalidArgument);
  d.free_reservation(base, 64 * kKiB);
  EXPECT_TRUE(d.usage().empty());
}

TEST(PosixVmDriver, FaultHookFailsACallWithNothingChanged) {
  PosixVmDriver d(64 * kKiB);
  void* base = d.reserve(64 * kKiB, 0);
  const PhysHandle h = *d.create(16 * kKiB);
  d.set_fault_hook([](VmCall c) { return c == VmCall::map ? VmFault::out_of_memory : VmFault::none; });
  EXPECT_FALSE(d.map(base, 16 * kKiB, h));
  d.set_fault_hook([](VmCall c) { return c == VmCall::map ? VmFault::error : VmFault::none; });
  EXPECT_THROW((void)d.map(base, 16 * kKiB, h), Error);
  EXPECT_EQ(d.usage().mappings, 0u);
  d.set_fault_hook([](VmCall c) { return c == VmCall::create ? VmFault::out_of_memory : VmFault::none; });
  EXPECT_FALSE(d.create(16 * kKiB));
  d.set_fault_hook([](VmCall c) { return c == VmCall::reserve ? VmFault::out_of_memory : VmFault::none; });
  EXPECT_THROW((void)d.reserve(64 * kKiB, 0), OutOfMemory);
  d.set_fault_hook({});
  ASSERT_TRUE(d.map(base, 16 * kKiB, h));  // the earlier failures left the range unmapped
  d.set_fault_hook([](VmCall c) { return c == VmCall::unmap ? VmFault::error : VmFault::none; });
  EXPECT_THROW(d.unmap(base, 16 * kKiB), Error);
  EXPECT_EQ(d.usage().mappings, 1u);
  d.set_fault_hook({});
  d.unmap(base, 16 * kKiB);
  d.release(h);
  d.free_reservation(base, 64 * kKiB);
  EXPECT_EQ(d.call_count(VmCall::map), 3u);
  EXPECT_TRUE(d.usage().empty());
}

TEST(PhysicalPagePool, CreatesEveryHandleUpFrontAndReusesThem) {
  PosixVmDriver d(8 * 16 * kKiB);
  {
    PhysicalPagePool pool(&d, 16 * kKiB, 8);
    EXPECT_EQ(d.call_count(VmCall::create), 8u);
    EXPECT_EQ(pool.num_free(), 8);
    const PageId a = *pool.allocate();
    const PageId b = *pool.allocate();
    EXPECT_EQ(a, 0);
    EXPECT_EQ(b, 1);
    pool.release(a);
    EXPECT_EQ(*pool.allocate(), a) << "LIFO: the page freed last is reused first";
    EXPECT_THROW(pool.release(7), InvalidArgument);
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(pool.allocate());
    EXPECT_FALSE(pool.allocate());
    EXPECT_EQ(d.call_count(VmCall::create), 8u) << "no handle is created after construction";
  }
  EXPECT_TRUE(d.usage().empty());
}

/// Both free orders against a model of their definition (a deque: lifo hands out the page freed
/// last, lru the one freed longest ago; take() removes one page and keeps the rest in order), over
/// a seeded random walk of allocate, release, take, and running dry.
TEST(PhysicalPagePool, BothFreeOrdersHandOutPagesAsDefined) {
  for (const PageFreeOrder order : {PageFreeOrder::lifo, PageFreeOrder::lru}) {
    constexpr int kPages = 37;
    PhysicalPagePool pool(nullptr, 16 * kKiB, kPages, order);
    std::deque<PageId> free_pages;  // the next one handed out first
    for (PageId p = 0; p < kPages; ++p) free_pages.push_back(p);
    std::vector<PageId> used;
    std::mt19937 rng(order == PageFreeOrder::lifo ? 11u : 12u);
    int takes = 0, dry = 0;
    for (int step = 0; step < 5000; ++step) {
      const unsigned what = rng() % 8;
      if (what < 4) {
        const std::optional<PageId> p = pool.allocate();
        if (free_pages.empty()) {
          ASSERT_FALSE(p.has_value());
          ++dry;
          continue;
        }
        ASSERT_TRUE(p.has_value());
        ASSERT_EQ(*p, free_pages.front()) << "step " << step;
        free_pages.pop_front();
        used.push_back(*p);
      } else if (what < 7 && !used.empty()) {
        const std::size_t k = rng() % used.size();
        const PageId p = used[k];
        used.erase(used.begin() + static_cast<std::ptrdiff_t>(k));
        pool.release(p);
        if (order == PageFreeOrder::lifo)
          free_pages.push_front(p);
        else
          free_pages.push_back(p);
      } else if (!free_pages.empty()) {
        const std::size_t k = rng() % free_pages.size();
        const PageId p = free_pages[k];
        free_pages.erase(free_pages.begin() + static_cast<std::ptrdiff_t>(k));
        pool.take(p);
        used.push_back(p);
        ++takes;
      }
      ASSERT_EQ(pool.num_free(), static_cast<std::int64_t>(free_pages.size()));
      for (const PageId p : used) ASSERT_TRUE(pool.in_use(p));
    }
    EXPECT_GT(takes, 100);
    EXPECT_GT(dry, 10) << "the walk never ran the pool dry";
    EXPECT_THROW(pool.take(used.front()), InvalidArgument) << "a page in use cannot be taken";
  }
}

TEST(PhysicalPagePool, CreationIsAllOrNothing) {
  PosixVmDriver d(5 * 16 * kKiB);
  EXPECT_THROW(PhysicalPagePool(&d, 16 * kKiB, 6), OutOfMemory);
  EXPECT_TRUE(d.usage().empty());
  int n = 0;
  d.set_fault_hook([&](VmCall c) { return c == VmCall::create && ++n == 3 ? VmFault::error : VmFault::none; });
  EXPECT_THROW(PhysicalPagePool(&d, 16 * kKiB, 4), Error);
  EXPECT_TRUE(d.usage().empty());
  EXPECT_THROW(PhysicalPagePool(&d, 6 * kKiB, 1), InvalidArgument);  // not a granularity multiple
}

}  // namespace
}  // namespace kvlab
