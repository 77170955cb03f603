#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "alloc/core/error.hpp"
#include "alloc/memory/huge_pages.hpp"
#include "alloc/memory/limiting_adaptor.hpp"
#include "alloc/memory/memory_resource.hpp"
#include "alloc/memory/statistics_adaptor.hpp"

namespace kvlab {
namespace {

// Both host resources (the plain one and the one whose large blocks go on huge pages,
// alloc/memory/huge_pages.hpp) keep the alignment asked for.
TEST(HostMemoryResource, AllocatesAlignedWritableMemory) {
  for (MemoryResource* mr : {static_cast<MemoryResource*>(&host_memory_resource()),
                             static_cast<MemoryResource*>(&huge_page_host_memory_resource())}) {
    SCOPED_TRACE(mr->name());
    for (std::size_t align : {16u, 256u, 4096u}) {
      void* p = mr->allocate(1000, align);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u);
      std::memset(p, 0xab, 1000);
      mr->deallocate(p, 1000, align);
    }
    EXPECT_EQ(mr->allocate(0), nullptr);
    EXPECT_EQ(mr->device(), Device::host);
  }
}

TEST(HostMemoryResource, RejectsBadAlignment) {
  EXPECT_THROW((void)host_memory_resource().allocate(64, 48), InvalidArgument);
}

TEST(HostMemoryResource, ImpossibleSizeIsOutOfMemory) {
  EXPECT_THROW((void)host_memory_resource().allocate(std::size_t{1} << 62), OutOfMemory);
}

TEST(StatisticsAdaptor, TracksCurrentPeakAndTotals) {
  StatisticsAdaptor stats(host_memory_resource());
  void* a = stats.allocate(100);
  void* b = stats.allocate(300);
  auto s = stats.statistics();
  EXPECT_EQ(s.current_bytes, 400u);
  EXPECT_EQ(s.peak_bytes, 400u);
  EXPECT_EQ(s.current_count, 2u);
  stats.deallocate(a, 100);
  void* c = stats.allocate(50);
  s = stats.statistics();
  EXPECT_EQ(s.current_bytes, 350u);
  EXPECT_EQ(s.peak_bytes, 400u);
  EXPECT_EQ(s.total_bytes, 450u);
  EXPECT_EQ(s.total_count, 3u);
  EXPECT_EQ(s.peak_count, 2u);
  stats.deallocate(b, 300);
  stats.deallocate(c, 50);
  EXPECT_EQ(stats.statistics().current_bytes, 0u);
}

TEST(LimitingAdaptor, RefusesBeyondLimitWithoutSideEffects) {
  StatisticsAdaptor stats(host_memory_resource());
  LimitingAdaptor limit(stats, 1000);
  void* a = limit.allocate(600);
  EXPECT_THROW((void)limit.allocate(500), OutOfMemory);
  EXPECT_EQ(limit.allocated(), 600u);
  EXPECT_EQ(stats.statistics().current_count, 1u);  // nothing reached upstream
  void* b = limit.allocate(400);                    // exactly up to the limit is fine
  EXPECT_EQ(limit.allocated(), 1000u);
  limit.deallocate(a, 600);
  limit.deallocate(b, 400);
  EXPECT_EQ(limit.allocated(), 0u);
}

TEST(LimitingAdaptor, UpstreamFailureReleasesTheClaim) {
  LimitingAdaptor limit(host_memory_resource(), std::size_t{1} << 63);
  EXPECT_THROW((void)limit.allocate(std::size_t{1} << 62), OutOfMemory);
  EXPECT_EQ(limit.allocated(), 0u);
}

TEST(LimitingAdaptor, ConcurrentCallersNeverOvershoot) {
  LimitingAdaptor limit(host_memory_resource(), 64 * 100);
  std::vector<std::thread> threads;
  std::vector<std::vector<void*>> got(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        try {
          got[t].push_back(limit.allocate(64));
        } catch (const OutOfMemory&) {
        }
      }
    });
  for (auto& th : threads) th.join();
  std::size_t n = 0;
  for (auto& g : got) n += g.size();
  EXPECT_EQ(n, 100u);
  for (auto& g : got)
    for (void* p : g) limit.deallocate(p, 64);
  EXPECT_EQ(limit.allocated(), 0u);
}

TEST(Errors, CarryFileAndLine) {
  try {
    KVLAB_THROW(OutOfMemory, "boom");
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tests/alloc/memory/memory_resource_test.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("boom"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvlab
