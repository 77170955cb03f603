// The elastic backend's storage (elastic/elastic_pages.hpp) under a paged backend, on host memory
// through the POSIX VM driver: page groups mapped when their first block is needed and unmapped
// when they empty (beyond the reserve), the reserve refilled off the critical path, page-aware
// allocation against the page-blind baseline, a budget two backends share, and driver faults at
// every call leaving nothing mapped.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "alloc/core/error.hpp"
#include "alloc/memory/memory_resource.hpp"
#include "elastic/elastic_pages.hpp"
#include "paged/paged_backend.hpp"
#include "tests/paged/prefix_cache_access.hpp"
#include "tests/support/gated_vm_driver.hpp"
#include "tests/support/tiny_model.hpp"
#include "vmm/posix_vm_driver.hpp"

namespace kvlab {
namespace {

// Tiny model: one block of 16 tokens of one layer's K or V is 2 KiB, so a 4 KiB page holds two and
// a page group (one page of each of the 4 planes) holds 2 blocks, 32 tokens.
constexpr std::size_t kPage = 4096;

struct Elastic {
  std::shared_ptr<PosixVmDriver> driver;
  std::shared_ptr<ElasticPages> pages;
  std::unique_ptr<PagedBackend> backend;
};

/// An elastic backend over `groups` page groups of host memory; `adjust` sets what a test needs
/// (block size, reserve, prefix cache, ...); the paged config takes the storage's block size.
Elastic make_with(std::size_t groups, const std::function<void(ElasticConfig&, PagedConfig&)>& adjust) {
  Elastic e;
  const std::size_t capacity = groups * 4 * kPage;
  e.driver = std::make_shared<PosixVmDriver>(capacity);
  ElasticConfig c;
  c.model = testing::tiny_model();
  c.page_bytes = kPage;
  c.capacity_bytes = capacity;
  c.driver = e.driver;
  PagedConfig p;
  p.model = c.model;
  p.capacity_bytes = capacity;
  p.max_seq_len = 128;
  p.memory = &host_memory_resource();
  adjust(c, p);
  p.block_size = c.block_size;
  e.pages = std::make_shared<ElasticPages>(c);
  p.storage = e.pages;
  e.backend = std::make_unique<PagedBackend>(std::move(p));
  return e;
}

Elastic make(std::size_t groups, std::int32_t reserve, ElasticAllocation allocation = ElasticAllocation::fullest,
             std::shared_ptr<PhysicalBudget> budget = nullptr, ElasticLayout layout = ElasticLayout::per_layer,
             std::int32_t block_size = 16) {
  return make_with(groups, [&](ElasticConfig& c, PagedConfig&) {
    c.block_size = block_size;
    c.reserve_groups = reserve;
    c.allocation = allocation;
    c.layout = layout;
    c.budget = budget;
  });
}

double counter(const KvBackend& b, const std::string& name) {
  for (const auto& [n, v] : b.counters())
    if (n == name) return v;
  ADD_FAILURE() << "no counter " << name;
  return -1;
}

TEST(ElasticPages, MapsGroupsOnDemandAndUnmapsThemWhenTheyEmpty) {
  Elastic e = make(10, 0);
  EXPECT_EQ(e.driver->usage().mappings, 0u) << "nothing is mapped before a block is needed";
  EXPECT_EQ(e.backend->name(), "elastic-16-4k-reserve0");
  e.backend->admit(1, {40, 40}, 40);  // 3 blocks: 2 groups of 4 pages
  EXPECT_EQ(e.driver->usage().mappings, 8u);
  EXPECT_EQ(e.pages->held_bytes(), 2 * 4 * kPage);
  e.backend->grow(1, 8);  // 48 tokens: still 3 blocks
  EXPECT_EQ(e.driver->usage().mappings, 8u);
  e.backend->grow(1, 1);  // a 4th block: group 1's second block, no new mapping
  EXPECT_EQ(e.driver->usage().mappings, 8u);
  e.backend->admit(2, {10, 10}, 10);  // a 5th block: a third group
  EXPECT_EQ(e.driver->usage().mappings, 12u);
  EXPECT_EQ(counter(*e.backend, "critical_maps"), 12);
  e.backend->release(1);
  EXPECT_EQ(e.driver->usage().mappings, 4u) << "the groups sequence 1 emptied stay mapped";
  e.backend->release(2);
  EXPECT_TRUE(e.driver->usage().mappings == 0u && e.driver->usage().handles == 0u);
  EXPECT_EQ(counter(*e.backend, "unmaps"), 12);
  EXPECT_EQ(e.pages->budget().held(), 0u);
}

TEST(ElasticPages, TheReserveIsRefilledOffTheCriticalPath) {
  Elastic e = make(10, 2);
  e.backend->begin_step();  // fills the reserve: two groups, not on the critical path
  EXPECT_EQ(e.driver->usage().mappings, 8u);
  EXPECT_EQ(counter(*e.backend, "reserve_maps"), 8);
  EXPECT_EQ(counter(*e.backend, "critical_maps"), 0);
  e.backend->admit(1, {60, 60}, 60);  // 4 blocks: the two reserve groups
  EXPECT_EQ(counter(*e.backend, "critical_maps"), 0) << "the reserve should have served it";
  e.backend->admit(2, {20, 20}, 20);  // the reserve is dry: mapped on the critical path
  EXPECT_EQ(counter(*e.backend, "critical_maps"), 4);
  EXPECT_EQ(e.backend->step_costs().maps, 4) << "charged to the step that needed them";
  e.backend->begin_step();  // two more empty groups for the reserve
  EXPECT_EQ(e.driver->usage().mappings, 20u);
  e.backend->release(1);
  e.backend->release(2);
  EXPECT_EQ(e.driver->usage().mappings, 8u) << "three groups emptied: two stay as the reserve";
}

// kvcached's MIN_RESERVED_PAGES / MAX_RESERVED_PAGES: the reserve is refilled to N, and groups that
// empty stay mapped while at most M are wholly free.
TEST(ElasticPages, EmptiedGroupsStayMappedUpToTheRetainedCount) {
  ElasticConfig c;  // retain below the reserve is refused
  c.model = testing::tiny_model();
  c.page_bytes = kPage;
  c.capacity_bytes = 10 * 4 * kPage;
  c.reserve_groups = 2;
  c.retain_groups = 1;
  EXPECT_NE(elastic_config_problem(c).find("at least the reserve (2)"), std::string::npos);
  Elastic e = make_with(10, [](ElasticConfig& ec, PagedConfig& pc) {
    ec.retain_groups = 3;
    pc.max_seq_len = 1024;
  });
  PagedBackend& b = *e.backend;
  const std::shared_ptr<ElasticPages>& pages = e.pages;
  EXPECT_EQ(b.name(), "elastic-16-4k-retain3");
  b.admit(1, {160, 160}, 160);  // 10 blocks: 5 groups
  b.release(1);
  EXPECT_EQ(pages->held_bytes(), 3 * 4 * kPage) << "three of the five empty groups stay mapped";
  b.begin_step();
  EXPECT_EQ(pages->held_bytes(), 3 * 4 * kPage) << "the reserve (1) is full: nothing more is mapped";
  b.admit(2, {64, 64}, 64);  // 4 blocks: the two of the three retained groups
  b.begin_step();            // one empty group left: the reserve needs no refill
  EXPECT_EQ(pages->held_bytes(), 3 * 4 * kPage);
  EXPECT_EQ(counter(b, "critical_maps"), 20) << "only sequence 1's five groups were mapped on the critical path";
  b.release(2);
  EXPECT_EQ(pages->held_bytes(), 3 * 4 * kPage);
}

/// Sequences with prompt token ids (blocks of 4 tokens, 8 to a page group) come and go, every one
/// cached in a radix cache capped at 40 blocks; then all leave. Returns (groups held, cached blocks,
/// blocks moved) at the end; `compact`: PagedConfig::compact_cache.
struct IdleCache {
  std::size_t groups = 0;
  std::int64_t cached = 0, moved = 0;
};
IdleCache idle_cache(bool compact) {
  Elastic e = make_with(32, [&](ElasticConfig& ec, PagedConfig& pc) {
    ec.block_size = 4;
    ec.reserve_groups = 0;
    pc.max_seq_len = 1024;
    pc.prefix_cache = PrefixCacheMode::radix;
    pc.max_cached_blocks = 40;
    pc.compact_cache = compact;
  });
  PagedBackend& b = *e.backend;
  const std::shared_ptr<ElasticPages>& pages = e.pages;
  std::mt19937 rng(5);
  std::vector<SeqId> live;
  std::vector<std::vector<std::int32_t>> ids;
  for (SeqId id = 0; id < 300; ++id) {
    if (!live.empty() && rng() % 3 != 0) {  // one leaves
      const std::size_t i = rng() % live.size();
      b.release(live[i]);
      live[i] = live.back();
      live.pop_back();
    }
    const auto n = static_cast<std::int32_t>(4 + rng() % 24);
    ids.emplace_back(static_cast<std::size_t>(n));
    for (std::int32_t k = 0; k < n; ++k) ids.back()[static_cast<std::size_t>(k)] = id * 1000 + k;  // no sharing
    SequenceSpec spec{.prompt_tokens = n, .final_tokens = n};
    spec.prompt_token_ids = ids.back();
    if (!b.can_admit(spec, n)) continue;
    b.admit(id, spec, n);
    live.push_back(id);
  }
  for (const SeqId id : live) b.release(id);
  testing::radix_cache(b)->check_invariants();
  b.begin_step();  // the moves of the last releases are charged to the step after them
  return {pages->held_bytes() / (4 * kPage), b.prefix_cache().evictable_blocks(),
          static_cast<std::int64_t>(counter(b, "compaction_moves"))};
}

TEST(ElasticPages, CompactionPacksAnIdleCacheOntoFewGroups) {
  const IdleCache plain = idle_cache(false), packed = idle_cache(true);
  RecordProperty("groups_without_compaction", static_cast<int>(plain.groups));
  RecordProperty("groups_with_compaction", static_cast<int>(packed.groups));
  RecordProperty("blocks_moved", static_cast<int>(packed.moved));
  // The cap is 40; a page-aware trim may evict up to a quarter group (2 blocks) past it.
  EXPECT_TRUE(plain.cached >= 38 && plain.cached <= 40) << plain.cached;
  EXPECT_TRUE(packed.cached >= 38 && packed.cached <= 40) << packed.cached;
  EXPECT_EQ(plain.moved, 0);
  EXPECT_GT(packed.moved, 0);
  // 38-40 blocks need 5 groups of 8; the greedy leaves at most one group partly filled.
  EXPECT_LE(packed.groups, static_cast<std::size_t>((packed.cached + 7) / 8 + 1));
  EXPECT_LT(packed.groups, plain.groups);
}

struct Churn {
  double held = 0, floor = 0;                 // page groups held and needed by the live blocks, averaged over steps
  std::size_t idle_held = 0, idle_floor = 0;  // the same once only the long-lived sequences remain
};

/// Short sequences come and go around a few long-lived ones (blocks of 4 tokens: 8 to a group),
/// then every short one leaves, as a tenant going idle with a few requests still running.
Churn churn(ElasticAllocation allocation) {
  Elastic e = make(64, 0, allocation, nullptr, ElasticLayout::per_layer, 4);
  std::mt19937 rng(11);
  std::vector<SeqId> live, long_lived;
  SeqId next = 0;
  Churn c;
  const int steps = 4000;
  for (int step = 0; step < steps; ++step) {
    for (std::size_t i = 0; i < live.size();) {  // each short sequence leaves with probability 1/20
      if (rng() % 20 != 0) {
        ++i;
        continue;
      }
      e.backend->release(live[i]);
      live[i] = live.back();
      live.pop_back();
    }
    const std::int64_t tokens = 1 + static_cast<std::int64_t>(rng() % 40);
    if (e.backend->can_admit({tokens, tokens}, tokens)) {
      e.backend->admit(next, {tokens, tokens}, tokens);
      (rng() % 8 == 0 && long_lived.size() < 12 ? long_lived : live).push_back(next);
      ++next;
    }
    c.held += static_cast<double>(e.pages->held_bytes() / (4 * kPage)) / steps;
    c.floor += static_cast<double>((e.backend->pool().num_used() + 7) / 8) / steps;
  }
  for (const SeqId id : live) e.backend->release(id);
  c.idle_held = e.pages->held_bytes() / (4 * kPage);
  c.idle_floor = static_cast<std::size_t>((e.backend->pool().num_used() + 7) / 8);
  return c;
}

TEST(ElasticPages, PageAwareAllocationHoldsFewerPagesThanPageBlind) {
  const Churn aware = churn(ElasticAllocation::fullest);
  const Churn blind = churn(ElasticAllocation::first_free);
  // Seed 11 measured 24.46 groups held (page-aware) against 26.10 (page-blind) over a floor of
  // 22.44; once idle 15 and 13 against a floor of 9: allocation alone does not decide where the
  // long-lived blocks end up (docs/elastic.md).
  RecordProperty("page_aware_mean_groups_x100", static_cast<int>(aware.held * 100));
  RecordProperty("page_blind_mean_groups_x100", static_cast<int>(blind.held * 100));
  RecordProperty("page_aware_idle_groups", static_cast<int>(aware.idle_held));
  RecordProperty("page_blind_idle_groups", static_cast<int>(blind.idle_held));
  EXPECT_DOUBLE_EQ(aware.floor, blind.floor) << "the same sequences should live under both";
  EXPECT_LT(aware.held, blind.held) << "page-aware allocation should leave more groups wholly free";
  EXPECT_LT(aware.held, 1.15 * aware.floor);
  EXPECT_GE(aware.idle_held, aware.idle_floor);
}

TEST(ElasticPages, TwoBackendsShareOneBudget) {
  auto budget = std::make_shared<PhysicalBudget>(3 * 4 * kPage);  // three groups between the two
  Elastic a = make(10, 0, ElasticAllocation::fullest, budget);
  Elastic b = make(10, 0, ElasticAllocation::fullest, budget);
  a.backend->admit(1, {64, 64}, 64);  // 4 blocks: 2 groups
  EXPECT_EQ(budget->held(), 2 * 4 * kPage);
  EXPECT_TRUE(b.backend->can_admit({32, 32}, 32));
  EXPECT_FALSE(b.backend->can_admit({33, 33}, 33)) << "only one group is left in the budget";
  EXPECT_THROW(b.backend->admit(2, {33, 33}, 33), OutOfMemory);
  EXPECT_EQ(b.backend->num_sequences(), 0u);
  EXPECT_EQ(budget->held(), 2 * 4 * kPage) << "a refused admission takes nothing";
  a.backend->release(1);
  b.backend->admit(2, {64, 64}, 64);
  EXPECT_EQ(budget->held(), 2 * 4 * kPage);
  EXPECT_FALSE(a.backend->can_admit({64, 64}, 64));
}

TEST(ElasticPages, ADriverFaultAtAnyCallLeavesNothingBehind) {
  // With -overlap the reserve's maps run on the mapper's thread: a fault there too (the hook runs
  // under the driver's mutex, so its count is shared safely).
  for (const bool overlap : {false, true}) {
    for (const VmFault kind : {VmFault::error, VmFault::out_of_memory}) {
      for (int n = 1; n <= 60; ++n) {
        Elastic e = make_with(8, [overlap](ElasticConfig& c, PagedConfig&) {
          c.reserve_groups = 1;
          c.overlap = overlap;
        });
        int calls = 0;
        e.driver->set_fault_hook([&calls, n, kind](VmCall) { return ++calls == n ? kind : VmFault::none; });
        int admitted = 0;
        for (SeqId id = 0; id < 6; ++id) {
          try {
            e.backend->begin_step();
            e.backend->admit(id, {30, 40}, 30);
            ++admitted;
            e.backend->grow(id, 10);
            e.backend->prefetch(std::vector<SeqId>{id});
          } catch (const Error&) {
          }
          if (id % 2 == 1 && e.backend->contains(id - 1)) {
            try {
              e.backend->release(id - 1);
            } catch (const Error&) {
            }
          }
        }
        EXPECT_LE(e.backend->num_sequences(), static_cast<std::size_t>(admitted));
        e.driver->set_fault_hook({});
        e.backend.reset();
        e.pages.reset();
        EXPECT_TRUE(e.driver->usage().empty())
            << "fault at call " << n << (overlap ? " with -overlap" : "") << " left mappings or handles";
      }
    }
  }
}

// kvcached's page-preallocation thread: with -overlap the reserve is chosen after a step's kernels
// are queued (prefetch) and mapped on the backend's own thread; the next begin_step() waits for it,
// and that wait is the only mapping on the critical path.
TEST(ElasticPages, OverlapMapsTheReserveOnItsThreadAndTheNextStepWaitsForIt) {
  constexpr std::size_t kGroups = 10;
  auto driver = std::make_shared<testing::GatedDriver>(kGroups * 4 * kPage);
  ElasticConfig c;
  c.model = testing::tiny_model();
  c.page_bytes = kPage;
  c.capacity_bytes = kGroups * 4 * kPage;
  c.driver = driver;
  c.reserve_groups = 2;
  c.overlap = true;
  PagedConfig p;
  p.model = c.model;
  p.capacity_bytes = c.capacity_bytes;
  p.max_seq_len = 128;
  p.memory = &host_memory_resource();
  p.block_size = c.block_size;
  auto pages = std::make_shared<ElasticPages>(c);
  p.storage = pages;
  auto b = std::make_unique<PagedBackend>(std::move(p));
  EXPECT_EQ(b->name(), "elastic-16-4k-reserve2-overlap");
  b->begin_step();
  EXPECT_EQ(driver->usage().mappings, 0u) << "without -overlap begin_step() would have filled the reserve";
  driver->shut_ = true;
  b->prefetch(std::vector<SeqId>{});
  while (!driver->waiting_) std::this_thread::yield();  // the mapper is inside its first map
  EXPECT_EQ(b->held_bytes(), 2 * 4 * kPage) << "the reserve's groups are held from the moment they are chosen";
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    driver->shut_ = false;
  });
  b->begin_step();  // waits for the mapper
  opener.join();
  EXPECT_EQ(driver->usage().mappings, 8u);
  EXPECT_EQ(counter(*b, "reserve_maps"), 8);
  EXPECT_EQ(counter(*b, "critical_maps"), 0);
  EXPECT_GE(counter(*b, "overlap_wait_s"), 0.02) << "most of the 60 ms the gate stayed shut";
  EXPECT_GE(b->step_costs().mapping_s, counter(*b, "overlap_wait_s") - 1e-12) << "the wait is critical mapping";
  b->admit(1, {60, 60}, 60);  // 4 blocks: the reserve's two groups
  EXPECT_EQ(counter(*b, "critical_maps"), 0) << "the reserve should have served it";
  b->admit(2, {20, 20}, 20);  // the reserve is dry: mapped on the critical path
  EXPECT_EQ(counter(*b, "critical_maps"), 4);
  b->prefetch(std::vector<SeqId>{1, 2});  // two more; destroyed before any wait: nothing hangs or leaks
  b.reset();
  pages.reset();
  EXPECT_TRUE(driver->usage().empty());
}

// A map the mapper's thread cannot make returns its group (and budget) when the caller collects it:
// the allocation that needs it maps on the critical path instead, and nothing leaks.
TEST(ElasticPages, AGroupTheMapperCouldNotMapIsClosedAgainAndMappedWhenNeeded) {
  Elastic e = make_with(6, [](ElasticConfig& c, PagedConfig&) {
    c.reserve_groups = 1;
    c.overlap = true;
  });
  e.driver->set_fault_hook([](VmCall call) { return call == VmCall::create ? VmFault::out_of_memory : VmFault::none; });
  e.backend->prefetch(std::vector<SeqId>{});
  e.backend->begin_step();
  EXPECT_EQ(e.backend->held_bytes(), 0u) << "the group the thread failed to map is given back";
  EXPECT_EQ(counter(*e.backend, "reserve_maps"), 0);
  e.driver->set_fault_hook([](VmCall call) { return call == VmCall::map ? VmFault::error : VmFault::none; });
  e.backend->prefetch(std::vector<SeqId>{});
  EXPECT_THROW(e.backend->begin_step(), Error) << "a driver error on the thread reaches the caller";
  EXPECT_EQ(e.backend->held_bytes(), 0u);
  e.driver->set_fault_hook({});
  e.backend->admit(1, {20, 20}, 20);
  EXPECT_EQ(counter(*e.backend, "critical_maps"), 4);
  e.backend->release(1);
  e.backend.reset();
  e.pages.reset();
  EXPECT_TRUE(e.driver->usage().empty());
}

// A map that fails (set access refused) whose rollback fails too (the unmap refused): the page
// left mapped must be cleaned up before the group is mapped again, not mapped over and forgotten
// (the emulated device's driver faults found this: a second map over the same range, then a leak).
TEST(ElasticPages, ARollbackTheDriverRefusedIsFinishedBeforeTheGroupIsMappedAgain) {
  Elastic e = make(8, 0);
  int set_access = 0, unmap = 0;
  e.driver->set_fault_hook([&](VmCall call) {
    if (call == VmCall::set_access && ++set_access == 1) return VmFault::error;
    if (call == VmCall::unmap && ++unmap == 1) return VmFault::error;
    return VmFault::none;
  });
  EXPECT_THROW(e.backend->admit(1, {20, 20}, 20), Error);
  EXPECT_EQ(e.backend->num_sequences(), 0u);
  EXPECT_EQ(e.driver->usage().mappings, 1u) << "the refused unmap should have left one page mapped";
  e.backend->admit(1, {20, 20}, 20);  // the same group again: its leftover goes first
  EXPECT_EQ(e.driver->usage().mappings, 4u);
  e.backend->release(1);
  e.driver->set_fault_hook({});
  e.backend.reset();
  e.pages.reset();
  EXPECT_TRUE(e.driver->usage().empty());
}

TEST(ElasticPages, InterleavedPagesHoldWholeBlocksOfEveryLayer) {
  // A 16-token block of all 4 planes is 8 KiB: a group is two 4 KiB pages holding one block.
  const Elastic two = make(10, 0, ElasticAllocation::fullest, nullptr, ElasticLayout::interleaved);
  EXPECT_EQ(two.pages->region_blocks(), 1);
  EXPECT_EQ(two.pages->group_bytes(), 2 * kPage);
  ElasticConfig c;
  c.model = testing::tiny_model();
  c.block_size = 8;  // 1 KiB a plane, 4 KiB all planes: one block a page
  c.page_bytes = kPage;
  c.capacity_bytes = 10 * kPage;
  c.layout = ElasticLayout::interleaved;
  const ElasticPages pages(c);
  EXPECT_EQ(pages.group_bytes(), kPage);
  EXPECT_EQ(pages.num_blocks(), 10);
  EXPECT_EQ(pages.region_blocks(), 1);
  EXPECT_EQ(pages.layout().plane_stride, 1024u) << "planes of a block lie next to each other";
  EXPECT_EQ(pages.layout().block_stride, kPage);
  c.layout = ElasticLayout::per_layer;
  c.block_size = 3;  // 384 bytes a plane: 3 pages of 4 KiB hold 32 of them
  c.capacity_bytes = 10 * 12 * kPage;
  const ElasticPages odd(c);
  EXPECT_EQ(odd.region_blocks(), 32);
  EXPECT_EQ(odd.group_bytes(), 12 * kPage);
  EXPECT_EQ(odd.layout().plane_stride, 30 * kPage);
  c.block_size = 1;
  c.model.head_dim = 1;  // 4 bytes a plane ... fine: divides
  EXPECT_EQ(elastic_config_problem(c), "");
  c.model = testing::tiny_model();
  c.page_bytes = std::size_t{1} << 30;  // 1 GiB pages, 384-byte blocks: 3 pages of 1 GiB, more than fit
  EXPECT_NE(elastic_config_problem(c).find("page groups"), std::string::npos);
}

// The cap on cached tokens (elastic-B-radix-maxcachedN[-lru]): a release trims the radix cache to
// it, and the groups the trim empties are unmapped.
TEST(ElasticPages, AReleaseTrimsTheCacheToItsCapAndTheEmptiedGroupsUnmap) {
  for (const bool by_pages : {true, false}) {
    Elastic e = make_with(8, [&](ElasticConfig& ec, PagedConfig& pc) {  // 8 groups of 2 blocks
      ec.reserve_groups = 0;
      pc.max_seq_len = 1024;
      pc.prefix_cache = PrefixCacheMode::radix;
      pc.max_cached_blocks = 2;  // 32 tokens
      pc.evict_by_pages = by_pages;
    });
    PagedBackend& b = *e.backend;
    const std::shared_ptr<PosixVmDriver>& driver = e.driver;
    EXPECT_EQ(b.name(),
              by_pages ? "elastic-16-4k-reserve0-radix-maxcached32" : "elastic-16-4k-reserve0-radix-maxcached32-lru");
    std::vector<std::int32_t> ids(96);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(i);
    SequenceSpec spec{.prompt_tokens = 96, .final_tokens = 96};
    spec.prompt_token_ids = ids;
    b.admit(1, spec, 96);  // 6 blocks, 3 groups, all entered into the cache
    EXPECT_EQ(driver->usage().mappings, 12u);
    b.release(1);  // 6 cached blocks, capped at 2: 4 evicted, whichever way
    EXPECT_EQ(b.prefix_cache().evictable_blocks(), 2);
    EXPECT_EQ(b.prefix_cache().evictions(), 4);
    // The sequence's blocks filled its groups in order, so the prefix's first two blocks share a
    // group either way: one group stays mapped.
    EXPECT_EQ(driver->usage().mappings, 4u) << by_pages;
    EXPECT_EQ(b.lookup_cached_tokens(spec, 96), 32) << "the prefix's first 32 tokens stay cached";
  }
}

}  // namespace
}  // namespace kvlab
