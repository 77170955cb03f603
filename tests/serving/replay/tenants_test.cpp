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

/// A burst of requests starting at `offset_s`.
std::vector<Request> burst(double offset_s, std::uint64_t seed, std::int64_t n = 40) {
  SyntheticWorkload w;
  w.num_requests = n;
  w.rate = 20;
  w.burstiness = 2;
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
