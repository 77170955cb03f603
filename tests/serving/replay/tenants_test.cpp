// Several tenants on one timeline (serving/replay/tenants.hpp): a static split of the KV capacity
// against an elastic pool they share, limits that drop while a tenant runs, and the interleaving
// itself (one tenant alone replays exactly as replay() does).
#include <gtest/gtest.h>

#include <algorithm>

#include "alloc/core/error.hpp"
#include "serving/replay/tenants.hpp"

namespace kvlab {
namespace {

// Llama-3-8B in memory mode on the modelled a100-80gb: a step costs what it would on the GPU, so
// requests queue as they would there.
constexpr std::size_t kTokenBytes = 131072;  // Llama-3-8B's KV bytes per token
constexpr std::size_t kGiB = std::size_t{1} << 30;

/// How a burst arrives: requests, their rate and burstiness; `system_prompts`: every prompt starts
/// with one of 4 system prompts of 512 tokens (their token ids are generated).
struct Shape {
  std::int64_t n = 40;
  double rate = 20, burstiness = 2;
  bool system_prompts = false;
};

/// A burst of requests starting at `offset_s`.
std::vector<Request> burst(double offset_s, std::uint64_t seed, Shape shape = {}) {
  SyntheticWorkload w;
  w.num_requests = shape.n;
  w.rate = shape.rate;
  w.burstiness = shape.burstiness;
  if (shape.system_prompts) {
    w.prefix_groups = 4;
    w.shared_prefix_tokens = 512;
  }
  w.prompt = LengthDistribution::parse("uniform:200:1200", "p");
  w.output = LengthDistribution::parse("uniform:50:300", "o");
  w.seed = seed;
  std::vector<Request> r = generate(w);
  for (Request& q : r) q.arrival_s += offset_s;
  return r;
}

/// Three tenants whose bursts come one after another.
std::vector<TenantSpec> staggered(double gap_s) {
  std::vector<TenantSpec> t(3);
  for (int i = 0; i < 3; ++i) {
    t[i].name = "t" + std::to_string(i);
    t[i].model = model_preset("llama-3-8b");
    t[i].requests = burst(gap_s * i, 7 + static_cast<std::uint64_t>(i));
  }
  return t;
}

BackendOptions options() {
  BackendOptions o;
  return o;
}

TEST(Tenants, ElasticPoolBeatsAStaticSplitWhenLoadsPeakApart) {
  const std::size_t capacity = 3 * kGiB;  // a third holds about 8 of a burst's 40 requests
  const std::vector<TenantSpec> tenants = staggered(20.0);
  ReplayConfig c;
  c.keep_steps = true;
  const auto fixed = replay_tenants(tenants, TenantPolicy::static_split, "paged-16", capacity, options(), c);
  const auto shared = replay_tenants(tenants, TenantPolicy::elastic, "elastic-16", capacity, options(), c);
  ASSERT_EQ(fixed.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const ReplaySummary& a = fixed[i].result.summary;
    const ReplaySummary& b = shared[i].result.summary;
    EXPECT_EQ(a.completed, 40) << fixed[i].name;
    EXPECT_EQ(b.completed, 40) << shared[i].name;
    RecordProperty("static_p99_ttft_ms_" + fixed[i].name, static_cast<int>(a.p99_ttft_s * 1e3));
    RecordProperty("elastic_p99_ttft_ms_" + fixed[i].name, static_cast<int>(b.p99_ttft_s * 1e3));
    EXPECT_LT(b.p99_ttft_s, a.p99_ttft_s) << fixed[i].name << ": the shared pool should queue less";
    EXPECT_LE(a.peak_held_bytes, capacity / 3) << "a static share is fixed";
    EXPECT_GT(b.peak_held_bytes, capacity / 3) << shared[i].name << " never used more than a third";
  }
}

TEST(Tenants, ALoweredLimitShrinksThePoolAsBlocksFree) {
  const std::size_t capacity = 3 * kGiB;
  std::vector<TenantSpec> tenants = staggered(0.0);  // all at once: they compete
  const std::size_t limit = kGiB / 4;                // 2 page groups of 128 MiB
  const double at = 2.0;
  tenants[0].limit_changes.push_back({at, limit});
  ReplayConfig c;
  c.keep_steps = true;
  const auto runs = replay_tenants(tenants, TenantPolicy::elastic, "elastic-16", capacity, options(), c);
  const std::vector<StepRecord>& steps = runs[0].result.steps;
  const std::size_t group = std::size_t{128} << 20;  // 64 pages of 2 MiB: 1024 tokens
  bool over = false, shrank = false;
  std::size_t prev = 0;
  for (const StepRecord& s : steps) {
    if (s.time_s - s.duration_s < at) {
      over = over || s.held_bytes > limit;
    } else {
      if (prev > limit) {
        EXPECT_LE(s.held_bytes, prev) << "over its limit, the tenant mapped more at " << s.time_s;
      }
      shrank = shrank || s.held_bytes <= limit + group;
    }
    prev = s.held_bytes;
  }
  EXPECT_TRUE(over) << "the tenant never held more than the later limit: the test shows nothing";
  EXPECT_TRUE(shrank) << "the tenant's pool never came down to its new limit (within a page group)";
  const ReplaySummary& sum = runs[0].result.summary;
  EXPECT_EQ(sum.completed + sum.rejected + sum.truncated, 40)
      << sum.rejected << " rejected, " << sum.truncated << " truncated, " << sum.failed << " failed";
  for (const RequestRecord& r : runs[0].result.requests)
    if (!r.reason.empty()) ADD_FAILURE() << r.reason;
}

TEST(Tenants, OneTenantAloneReplaysAsReplayDoes) {
  const std::vector<TenantSpec> tenants = {staggered(0.0)[1]};
  ReplayConfig c;
  BackendOptions o = options();
  o.model = tenants[0].model;
  o.capacity_bytes = kGiB;
  auto b = make_backend("elastic-16", o);
  const ReplayResult alone = replay(*b, tenants[0].requests, c);
  const auto runs = replay_tenants(tenants, TenantPolicy::elastic, "elastic-16", o.capacity_bytes, options(), c);
  const ReplaySummary& x = alone.summary;
  const ReplaySummary& y = runs[0].result.summary;
  EXPECT_EQ(x.steps, y.steps);
  EXPECT_EQ(x.preemptions, y.preemptions);
  EXPECT_DOUBLE_EQ(x.makespan_s, y.makespan_s);
  EXPECT_DOUBLE_EQ(x.p99_ttft_s, y.p99_ttft_s);
  EXPECT_EQ(x.mean_held_bytes, y.mean_held_bytes);
}

TEST(Tenants, AHigherPriorityTenantGoesFirstWhenBurstsOverlap) {
  const std::size_t capacity = 3 * kGiB;
  std::vector<TenantSpec> tenants = staggered(2.0);  // the bursts overlap: the tenants compete
  ReplayConfig c;
  const auto first_come = replay_tenants(tenants, TenantPolicy::elastic, "elastic-16", capacity, options(), c);
  tenants[2].priority = 1;  // the last to arrive
  const auto ranked = replay_tenants(tenants, TenantPolicy::elastic, "elastic-16", capacity, options(), c);
  RecordProperty("first_come_p99_ttft_ms_t2", static_cast<int>(first_come[2].result.summary.p99_ttft_s * 1e3));
  RecordProperty("priority_p99_ttft_ms_t2", static_cast<int>(ranked[2].result.summary.p99_ttft_s * 1e3));
  EXPECT_LT(ranked[2].result.summary.p99_ttft_s, first_come[2].result.summary.p99_ttft_s);
  EXPECT_GT(ranked[0].result.summary.p99_ttft_s, first_come[0].result.summary.p99_ttft_s)
      << "what the last tenant gains, the others pay";
  for (const TenantRun& r : ranked) EXPECT_EQ(r.result.summary.completed, 40) << r.name;
  // A static split ignores priorities: no tenant waits for another's memory.
  const auto fixed = replay_tenants(tenants, TenantPolicy::static_split, "paged-16", capacity, options(), c);
  tenants[2].priority = 0;
  const auto fixed0 = replay_tenants(tenants, TenantPolicy::static_split, "paged-16", capacity, options(), c);
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(fixed[i].result.summary.p99_ttft_s, fixed0[i].result.summary.p99_ttft_s);
}

TEST(Tenants, FairShareHoldsBackATenantAboveItsShareWhileOneBelowWaits) {
  // The first tenant's burst fills the pool; the second's comes half a second later.
  std::vector<TenantSpec> tenants(2);
  for (int i = 0; i < 2; ++i) {
    tenants[i].name = "t" + std::to_string(i);
    tenants[i].model = model_preset("llama-3-8b");
    tenants[i].requests = burst(0.5 * i, 11 + static_cast<std::uint64_t>(i), {.n = 60, .rate = 40});
  }
  const std::size_t capacity = 2 * kGiB;
  ReplayConfig c;
  const auto pool = replay_tenants(tenants, TenantPolicy::elastic, "elastic-16", capacity, options(), c);
  const auto fair = replay_tenants(tenants, TenantPolicy::fair_share, "elastic-16", capacity, options(), c);
  RecordProperty("pool_p99_ttft_ms_t1", static_cast<int>(pool[1].result.summary.p99_ttft_s * 1e3));
  RecordProperty("fair_p99_ttft_ms_t1", static_cast<int>(fair[1].result.summary.p99_ttft_s * 1e3));
  EXPECT_LT(fair[1].result.summary.p99_ttft_s, pool[1].result.summary.p99_ttft_s)
      << "the late tenant gets memory as the first one's requests end";
  EXPECT_GT(fair[0].result.summary.p99_ttft_s, pool[0].result.summary.p99_ttft_s) << "and the first one waits";
  for (const auto* runs : {&pool, &fair})
    for (const TenantRun& r : *runs) EXPECT_EQ(r.result.summary.completed, 60) << r.name;
  // Alone, a tenant's share is the whole pool's: fair share changes nothing.
  const std::vector<TenantSpec> alone = {tenants[0]};
  const auto a = replay_tenants(alone, TenantPolicy::elastic, "elastic-16", capacity, options(), c);
  const auto b = replay_tenants(alone, TenantPolicy::fair_share, "elastic-16", capacity, options(), c);
  EXPECT_EQ(a[0].result.summary.p99_ttft_s, b[0].result.summary.p99_ttft_s);
  EXPECT_EQ(a[0].result.summary.steps, b[0].result.summary.steps);
  // A backend that holds its whole capacity cannot take part.
  EXPECT_THROW((void)replay_tenants(tenants, TenantPolicy::fair_share, "paged-16", capacity, options(), c),
               InvalidArgument);
  EXPECT_EQ(parse_tenant_policy("fair-share"), TenantPolicy::fair_share);
  EXPECT_EQ(to_string(TenantPolicy::fair_share), "fair-share");
}

// kvcached's idle-memory question (its issue #359, PR #390): a tenant that went idle keeps its
// prefix cache, capped at 16,000 tokens (KVCACHED_MAX_CACHED_TOKENS). Evicting least recently used
// blocks meets the cap but leaves the kept blocks scattered over the page groups they were
// allocated on, and those stay mapped; page-aware allocation and eviction gather them.
/// Three tenants 30 s apart whose prompts start with system prompts; by default the light load.
std::vector<TenantSpec> with_system_prompts(Shape shape = {.n = 120, .rate = 6, .burstiness = 3}) {
  shape.system_prompts = true;
  std::vector<TenantSpec> t(3);
  for (int i = 0; i < 3; ++i) {
    t[i].name = "t" + std::to_string(i);
    t[i].model = model_preset("llama-3-8b");
    t[i].requests = burst(30.0 * i, 1 + static_cast<std::uint64_t>(i), shape);
  }
  return t;
}

TEST(Tenants, AnIdleTenantKeepsLittleMoreThanItsCacheWithPageAwareEviction) {
  const std::size_t capacity = 8 * kGiB;
  const std::vector<TenantSpec> tenants = with_system_prompts();
  ReplayConfig c;
  c.keep_steps = true;
  const auto aware =
      replay_tenants(tenants, TenantPolicy::elastic, "elastic-16-radix-maxcached16000", capacity, options(), c);
  const auto blind = replay_tenants(tenants, TenantPolicy::elastic, "elastic-16-firstfree-radix-maxcached16000-lru",
                                    capacity, options(), c);
  const double end = gpu_memory(aware).end_s;
  for (int i = 0; i < 2; ++i) {  // the first two go idle while the next one runs
    const IdleMemory a = idle_memory(aware[i].result, end);
    const IdleMemory b = idle_memory(blind[i].result, gpu_memory(blind).end_s);
    ASSERT_GT(a.idle_s, 10) << aware[i].name;
    // The floor is the cache: 1,000 blocks of 2 MiB at most (a few fewer when a trim emptied a
    // whole page group past the cap).
    EXPECT_LE(a.floor_bytes, 1000.0 * 2 * (1 << 20));
    EXPECT_GE(a.floor_bytes, 900.0 * 2 * (1 << 20));
    RecordProperty("page_aware_idle_held_over_floor_" + aware[i].name, std::to_string(a.held_bytes / a.floor_bytes));
    RecordProperty("page_blind_idle_held_over_floor_" + aware[i].name, std::to_string(b.held_bytes / b.floor_bytes));
    EXPECT_LE(a.held_bytes, 1.4 * a.floor_bytes) << aware[i].name << " (issue 32's goal)";
    EXPECT_EQ(aware[i].result.summary.completed, 120);
  }
  // Page-blind, the first tenant's idle cache holds about three times its floor (and so most of
  // the GPU) while the third runs: the third starves, and what cannot fit is rejected as out of
  // memory instead of waiting forever.
  const IdleMemory first = idle_memory(blind[0].result, gpu_memory(blind).end_s);
  EXPECT_GT(first.held_bytes, 2.5 * first.floor_bytes);
  EXPECT_GT(blind[2].result.summary.rejected, 0);
  EXPECT_EQ(aware[2].result.summary.rejected, 0);
  const auto starved = std::ranges::find_if(
      blind[2].result.requests, [](const RequestRecord& r) { return r.status == RequestRecord::Status::rejected; });
  ASSERT_NE(starved, blind[2].result.requests.end());
  EXPECT_EQ(starved->reason, "does not fit the KV memory the other tenants leave");
}

// Under heavier bursts (200 requests at 20/s per tenant on 24 GiB: many more sequences decode at
// once), page-aware eviction alone leaves idle tenants at 1.73x and 2.24x their floor (the radix
// tree pins prefixes; docs/elastic.md); moving cached blocks (-compact) packs them to about 1.1x.
TEST(Tenants, CompactionPacksIdleCachesUnderHeavyBursts) {
  const std::vector<TenantSpec> tenants = with_system_prompts({.n = 200, .rate = 20, .burstiness = 3});
  ReplayConfig c;
  const auto runs = replay_tenants(tenants, TenantPolicy::elastic, "elastic-16-radix-maxcached16000-compact", 24 * kGiB,
                                   options(), c);
  const double end = gpu_memory(runs).end_s;
  for (int i = 0; i < 2; ++i) {
    const IdleMemory m = idle_memory(runs[i].result, end);
    ASSERT_GT(m.idle_s, 10) << runs[i].name;
    RecordProperty("compacted_idle_held_over_floor_" + runs[i].name, std::to_string(m.held_bytes / m.floor_bytes));
    EXPECT_LE(m.held_bytes, 1.4 * m.floor_bytes) << runs[i].name << " (issue 32's goal)";
    EXPECT_EQ(runs[i].result.summary.completed, 200);
  }
}

// The same bursts without moving a block: keeping each sequence's blocks together, and moving a
// sequence whose group is full to the emptiest group (-spread), lets the cap's page-aware eviction
// empty whole groups; kvcached's fullest-first placement leaves the idle tenants above the goal
// (docs/elastic.md: 1.73x and 2.24x for this workload).
TEST(Tenants, SpreadPlacementKeepsIdleCachesWithinTheGoalUnderHeavyBursts) {
  const std::vector<TenantSpec> tenants = with_system_prompts({.n = 200, .rate = 20, .burstiness = 3});
  ReplayConfig c;
  const auto idle_ratios = [&](const char* backend) {
    const auto runs = replay_tenants(tenants, TenantPolicy::elastic, backend, 24 * kGiB, options(), c);
    const double end = gpu_memory(runs).end_s;
    std::vector<double> out;
    for (int i = 0; i < 2; ++i) {
      const IdleMemory m = idle_memory(runs[i].result, end);
      EXPECT_GT(m.idle_s, 10) << backend << " " << runs[i].name;
      EXPECT_EQ(runs[i].result.summary.completed, 200) << backend;
      RecordProperty(std::string(backend) + "_idle_held_over_floor_" + runs[i].name,
                     std::to_string(m.held_bytes / m.floor_bytes));
      out.push_back(m.held_bytes / m.floor_bytes);
    }
    return out;
  };
  const std::vector<double> spread = idle_ratios("elastic-16-spread-radix-maxcached16000");
  const std::vector<double> fullest = idle_ratios("elastic-16-radix-maxcached16000");
  (void)idle_ratios("elastic-16-local-radix-maxcached16000");  // recorded beside them
  for (std::size_t i = 0; i < spread.size(); ++i) {
    EXPECT_LE(spread[i], 1.4) << "tenant " << i << " (issue 32's goal)";
    EXPECT_LT(spread[i], fullest[i]) << "tenant " << i;
  }
  EXPECT_GT(*std::ranges::max_element(fullest), 1.4) << "the fullest-first placement met the goal here: the test "
                                                        "no longer shows what -spread adds";
}

// The GPU-wide series by hand: two tenants' step records and idle samples.
TEST(Tenants, GpuMemorySumsTheTenantsStepFunctions) {
  ReplayResult a, b;
  StepRecord s;
  s.time_s = 2, s.duration_s = 1, s.held_bytes = 100, s.floor_bytes = 50;  // [1, 2): 100 held, floor 50
  a.steps.push_back(s);
  a.idle.push_back({2, 80, 40});                                            // from 2 on: 80, floor 40
  s.time_s = 5, s.duration_s = 2, s.held_bytes = 300, s.floor_bytes = 300;  // [3, 5)
  b.steps.push_back(s);
  b.idle.push_back({5, 0, 0});
  RequestRecord q;
  q.arrival_s = 1;
  a.requests.push_back(q);
  q.arrival_s = 3;
  b.requests.push_back(q);
  a.summary.backend_counters = {{"critical_maps", 6}, {"reserve_maps", 2}, {"unmaps", 4}};
  const std::vector<TenantRun> runs = {{"a", a}, {"b", b}};
  const std::vector<MemorySample> line = memory_timeline(a);
  ASSERT_EQ(line.size(), 2u);
  EXPECT_EQ(memory_at(line, 0.5).held_bytes, 0u);
  EXPECT_EQ(memory_at(line, 1.5).held_bytes, 100u);
  EXPECT_EQ(memory_at(line, 4).floor_bytes, 40u);
  const GpuMemory g = gpu_memory(runs);
  EXPECT_DOUBLE_EQ(g.start_s, 1);
  EXPECT_DOUBLE_EQ(g.end_s, 5);
  // held: [1,2) 100, [2,3) 80, [3,5) 380 -> (100 + 80 + 760) / 4; floor: 50, 40, 340.
  EXPECT_DOUBLE_EQ(g.mean_held_bytes, 940.0 / 4);
  EXPECT_DOUBLE_EQ(g.mean_floor_bytes, 770.0 / 4);
  EXPECT_EQ(g.peak_held_bytes, 380u);
  EXPECT_EQ(g.peak_floor_bytes, 340u);
  EXPECT_DOUBLE_EQ(g.mapped_pages_per_s, 8.0 / 4);
  EXPECT_DOUBLE_EQ(g.unmapped_pages_per_s, 4.0 / 4);
  // a is idle from 2 to the end (3 s) holding 80 against a floor of 40; b from 5, which is the end.
  const IdleMemory ia = idle_memory(a, g.end_s);
  EXPECT_DOUBLE_EQ(ia.idle_s, 3);
  EXPECT_DOUBLE_EQ(ia.held_bytes, 80);
  EXPECT_DOUBLE_EQ(ia.floor_bytes, 40);
  EXPECT_DOUBLE_EQ(idle_memory(b, g.end_s).idle_s, 0);
}

TEST(Tenants, BadSetupsFailLoudly) {
  std::vector<TenantSpec> tenants = staggered(0.0);
  const std::size_t capacity = 3 * kGiB;
  EXPECT_THROW((void)replay_tenants(tenants, TenantPolicy::elastic, "paged-16", capacity, options(), {}),
               InvalidArgument);  // paged-16 cannot share memory
  tenants[0].share = 0.7;
  tenants[1].share = 0.5;
  EXPECT_THROW((void)replay_tenants(tenants, TenantPolicy::static_split, "paged-16", capacity, options(), {}),
               InvalidArgument);  // shares past 1
  tenants[1].share = 0;
  tenants[2].limit_changes.push_back({1.0, 1024});
  EXPECT_THROW((void)replay_tenants(tenants, TenantPolicy::static_split, "paged-16", capacity, options(), {}),
               InvalidArgument);  // limits need the elastic policy
  EXPECT_THROW((void)parse_tenant_policy("dynamic"), InvalidArgument);
}

}  // namespace
}  // namespace kvlab
