// vAttention's overlap: a background thread maps the pages the next step needs while the current
// step computes. These tests are the TSan target for the mapper (build with -fsanitize=thread).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "alloc/core/error.hpp"
#include "kernels/attention.hpp"
#include "tests/support/gated_vm_driver.hpp"
#include "tests/vmm/vmm_test_support.hpp"
#include "vmm/posix_vm_driver.hpp"

namespace kvlab {
namespace {

using testing::kKiB;

VmmConfig overlapped(std::shared_ptr<VmDriver> driver, std::size_t capacity, int max_batch = 8) {
  VmmConfig c = testing::tiny_vmm(4 * kKiB, capacity, std::move(driver), VmmLayout::per_layer, 512, max_batch);
  c.overlap = true;
  return c;
}

TEST(VmmOverlap, PrefetchedPagesTakeMapsOffTheCriticalPath) {
  auto driver = std::make_shared<PosixVmDriver>(1024 * kKiB);
  VmmBackend b(overlapped(driver, 1024 * kKiB));
  std::vector<SeqId> ids = {1, 2, 3, 4};
  for (SeqId id : ids) {
    b.admit(id, {3 * id, 400}, 3 * id);
    testing::write_tokens(b, id, id, 0, 3 * id);
  }
  const std::int64_t admission_maps = b.stats().critical_maps;
  for (int step = 0; step < 200; ++step) {
    b.prefetch(ids, 1);
    // "compute": the foreground reads and writes KV of the current lengths meanwhile
    for (SeqId id : ids) EXPECT_EQ(testing::count_mismatches(b, id, id, b.length(id)), 0) << step;
    b.begin_step();
    for (SeqId id : ids) {
      const std::int64_t len = b.length(id);
      b.grow(id, 1);
      testing::write_tokens(b, id, id, len, len + 1);
    }
  }
  const VmmStats s = b.stats();
  EXPECT_EQ(s.critical_maps, admission_maps) << "every page a step needed was mapped in the background";
  EXPECT_GT(s.background_maps, 0);
  EXPECT_GT(s.background_map_seconds, 0.0);
  EXPECT_EQ(driver->usage().mappings, static_cast<std::size_t>(s.mapped_pages));
  for (SeqId id : ids) EXPECT_EQ(testing::count_mismatches(b, id, id, b.length(id)), 0);
}

TEST(VmmOverlap, WithoutOverlapPrefetchDoesNothingAndGrowMaps) {
  VmmConfig c = overlapped(nullptr, 1024 * kKiB);
  c.overlap = false;
  VmmBackend b(c);
  b.admit(1, {1, 400}, 1);
  const SeqId one[] = {1};
  for (int step = 0; step < 100; ++step) {
    b.prefetch(one, 1);
    b.begin_step();
    b.grow(1, 1);
  }
  EXPECT_EQ(b.stats().background_maps, 0);
  EXPECT_EQ(b.stats().critical_maps, 4 * 4);  // 101 tokens: 4 pages in each of 4 tensors
}

TEST(VmmOverlap, AReleasedSlotIsSkippedByItsPendingJob) {
  auto driver = std::make_shared<PosixVmDriver>(1024 * kKiB);
  VmmBackend b(overlapped(driver, 1024 * kKiB));
  for (int round = 0; round < 50; ++round) {
    b.admit(1, {1, 400}, 1);
    const SeqId one[] = {1};
    b.prefetch(one, 300);  // many pages: the job is still running when we release
    b.release(1);
    b.begin_step();
    EXPECT_EQ(b.stats().cached_pages, 0) << "no page may land in a free slot without deferred reclamation";
    EXPECT_EQ(b.stats().mapped_pages, 0);
  }
  EXPECT_EQ(driver->usage().mappings, 0u);
}

TEST(VmmOverlap, ABackgroundDriverErrorSurfacesInWaitAndChangesNothingElse) {
  auto driver = std::make_shared<PosixVmDriver>(1024 * kKiB);
  VmmBackend b(overlapped(driver, 1024 * kKiB));
  b.admit(1, {10, 400}, 10);
  testing::write_tokens(b, 1, 1, 0, 10);
  std::atomic<int> maps{0};
  driver->set_fault_hook([&](VmCall c) { return c == VmCall::map && ++maps == 3 ? VmFault::error : VmFault::none; });
  const SeqId one[] = {1};
  b.prefetch(one, 200);
  EXPECT_THROW(b.begin_step(), Error);
  EXPECT_NO_THROW(b.begin_step()) << "reported once";
  driver->set_fault_hook({});
  EXPECT_EQ(driver->usage().mappings, static_cast<std::size_t>(b.stats().mapped_pages));
  b.grow(1, 200);  // the foreground maps what the mapper could not
  testing::write_tokens(b, 1, 1, 10, 210);
  EXPECT_EQ(testing::count_mismatches(b, 1, 1, 210), 0);
}

TEST(VmmOverlap, DestroyingWithPendingJobsDoesNotHang) {
  auto driver = std::make_shared<PosixVmDriver>(1024 * kKiB);
  {
    VmmBackend b(overlapped(driver, 1024 * kKiB));
    std::vector<SeqId> ids;
    for (SeqId id = 0; id < 8; ++id) {
      b.admit(id, {1, 500}, 1);
      ids.push_back(id);
    }
    b.prefetch(ids, 500);
  }
  EXPECT_TRUE(driver->usage().empty());
}

TEST(VmmOverlap, ACallThatWaitsForTheMappersPageCountsAsCriticalMapping) {
  auto driver = std::make_shared<testing::GatedDriver>(1024 * kKiB);
  VmmBackend b(overlapped(driver, 1024 * kKiB));
  b.admit(1, {1, 400}, 1);                            // mapped on the caller's thread, the gate open
  const double before = b.stats().lock_wait_seconds;  // the idle mapper may hold the lock a moment too
  driver->shut_ = true;
  b.prefetch(std::vector<SeqId>{1}, 300);
  while (!driver->waiting_) std::this_thread::yield();  // the mapper is inside map(), holding the lock
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    driver->shut_ = false;
  });
  const VmmStats during = b.stats();  // blocks until the mapper's page is done
  opener.join();
  // At least most of the 60 ms the gate stayed shut (less only by this thread's own start-up delay).
  EXPECT_GE(during.lock_wait_seconds - before, 0.02);
  // Before the first begin_step() the step's costs are all of them: the wait is among them.
  EXPECT_GE(b.step_costs().mapping_s, during.critical_map_seconds + during.lock_wait_seconds - 1e-12);
  b.begin_step();
  EXPECT_GE(b.stats().lock_wait_seconds, during.lock_wait_seconds);
  b.release(1);
}

TEST(VmmOverlap, ForegroundAndMapperRaceUnderMemoryPressure) {
  // No waiting: the foreground grows, admits, forks, releases and asks for the breakdown while the
  // mapper works through prefetches, with eager allocation and deferred reclamation, in a budget
  // small enough that the two keep reclaiming each other's pages.
  auto driver = std::make_shared<PosixVmDriver>(256 * kKiB);
  VmmConfig c = overlapped(driver, 256 * kKiB, 12);  // 64 pages = 16 rows of 32 tokens
  c.eager_tokens = 20;
  c.deferred_reclamation = true;
  VmmBackend b(c);
  std::mt19937_64 rng(7);
  std::vector<SeqId> live;
  std::map<SeqId, SeqId> tag;  // whose pattern a sequence's tokens carry (a fork inherits it)
  SeqId next = 0;
  for (int step = 0; step < 1500; ++step) {
    b.prefetch(live, 1 + static_cast<std::int64_t>(rng() % 40));
    const int op = static_cast<int>(rng() % 6);
    if (op == 0 || live.empty()) {
      const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 60);
      if (b.can_admit({n, n + 100}, n)) {
        b.admit(next, {n, n + 100}, n);
        testing::write_tokens(b, next, next, 0, n);
        tag[next] = next;
        live.push_back(next++);
      }
    } else if (op == 1 && live.size() > 2) {
      const std::size_t i = rng() % live.size();
      b.release(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (op == 2 && b.can_admit({1, 1}, 1)) {
      const SeqId parent = live[rng() % live.size()];
      try {
        b.fork(parent, next);
        tag[next] = tag[parent];
        live.push_back(next++);
      } catch (const OutOfMemory&) {
      }
    } else {
      const SeqId id = live[rng() % live.size()];
      const std::int64_t len = b.length(id);
      if (b.can_grow(id, 3)) {
        b.grow(id, 3);
        testing::write_tokens(b, id, tag[id], len, len + 3);
      }
    }
    testing::expect_consistent(b);
    if (step % 100 == 0) b.begin_step();
  }
  b.begin_step();
  EXPECT_EQ(driver->usage().mappings, static_cast<std::size_t>(b.stats().mapped_pages));
  for (SeqId id : live) EXPECT_EQ(testing::count_mismatches(b, id, tag[id], b.length(id)), 0) << id;
  const VmmStats s = b.stats();
  EXPECT_GT(s.background_maps, 0);
  EXPECT_GT(s.reclaimed_pages, 0);
}

}  // namespace
}  // namespace kvlab
