// Serving metrics (serving/replay/serving_metrics.hpp): the distribution numbers as numpy computes
// them, goodput objectives, and the replayer's TTFT/TPOT/ITL/E2EL on runs worked out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "alloc/contiguous/contiguous_backend.hpp"
#include "alloc/core/error.hpp"
#include "serving/replay/replayer.hpp"
#include "serving/replay/serving_metrics.hpp"
#include "serving/traces/workload.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

TEST(LatencyStats, AreNumpysMeanMedianStdAndLinearPercentiles) {
  // numpy: mean 2.5, median 2.5, std (ddof 0) sqrt(1.25), percentile 90 -> 3.7, 99 -> 3.97.
  const LatencyStats s = latency_stats({4.0, 1.0, 3.0, 2.0});
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.mean_ms, 2500);
  EXPECT_DOUBLE_EQ(s.median_ms, 2500);
  EXPECT_NEAR(s.std_ms, 1e3 * std::sqrt(1.25), 1e-9);
  EXPECT_NEAR(s.p90_ms, 3700, 1e-9);
  EXPECT_NEAR(s.p99_ms, 3970, 1e-9);
  const LatencyStats one = latency_stats({0.25});
  EXPECT_DOUBLE_EQ(one.p99_ms, 250);
  EXPECT_DOUBLE_EQ(one.std_ms, 0);
  EXPECT_EQ(latency_stats({}).count, 0);
}

TEST(LatencyStats, ReportTheAskedPercentilesInOrder) {
  // numpy.percentile([1, 2, 3, 4], [50, 95, 99.9]) = 2.5, 3.85, 3.997 (seconds).
  const LatencyStats s = latency_stats({4.0, 1.0, 3.0, 2.0}, parse_percentiles("50,95,99.9"));
  ASSERT_EQ(s.percentiles_ms.size(), 3u);
  EXPECT_DOUBLE_EQ(s.percentiles_ms[0].first, 50);
  EXPECT_NEAR(s.percentiles_ms[0].second, 2500, 1e-9);
  EXPECT_NEAR(s.percentiles_ms[1].second, 3850, 1e-9);
  EXPECT_DOUBLE_EQ(s.percentiles_ms[2].first, 99.9);
  EXPECT_NEAR(s.percentiles_ms[2].second, 3997, 1e-9);
  EXPECT_NEAR(s.p99_ms, 3970, 1e-9);  // the console's p99 stays whatever was asked
  const LatencyStats none = latency_stats({}, {90, 99});
  ASSERT_EQ(none.percentiles_ms.size(), 2u);  // the columns exist, zero, without samples
  EXPECT_DOUBLE_EQ(none.percentiles_ms[1].second, 0);
  EXPECT_EQ(percentile_name(99), "p99");
  EXPECT_EQ(percentile_name(99.9), "p99_9");
  EXPECT_EQ(parse_percentiles("90,99"), kDefaultPercentiles);
  for (const char* bad : {"", "abc", "0", "101", "99,90", "90,90", "90,", "nan", "1,2,3,4,5,6,7,8,9,10,11", "50x"})
    EXPECT_THROW((void)parse_percentiles(bad), InvalidArgument) << bad;
}

FloatRuns runs_of(const std::vector<float>& f) {
  FloatRuns r;
  for (const float x : f) r.push_back(x);
  return r;
}

TEST(LatencyStats, OfRunsAreThoseOfTheValuesAsDoublesToTheBit) {
  // Above and below the radix sort's threshold (in runs): seeded lognormal gaps with duplicates, in
  // an order whose sums would differ if the runs' order were not the doubles' one, with zeros of
  // both signs and the largest float.
  std::mt19937 rng(11);
  std::lognormal_distribution<float> gap(-4.0f, 1.5f);
  // n < 0: the same in runs of equal gaps (one per sequence of a step, as the replayer records them).
  for (const int n : {0, 1, 7, 4095, 4096, 60001, -60001, -500000}) {
    std::vector<float> f;
    for (int i = 0; i < std::abs(n); ++i) f.push_back(i % 5 == 4 ? f[static_cast<std::size_t>(i / 2)] : gap(rng));
    if (std::abs(n) > 7)
      for (const float x : {0.0f, -0.0f, 0.0f, std::numeric_limits<float>::max()}) f[rng() % f.size()] = x;
    if (n < 0) {
      std::vector<float> runs;
      for (std::size_t i = 0; runs.size() < f.size(); ++i)
        runs.insert(runs.end(), std::min<std::size_t>(1 + rng() % 60, f.size() - runs.size()), f[i]);
      f = runs;
    }
    const FloatRuns r = runs_of(f);
    EXPECT_EQ(r.size(), std::abs(n));
    if (n < -60000) {
      EXPECT_LT(r.runs() * 10, f.size()) << "the runs were not kept as runs";
    }
    const std::vector<double> percentiles = {10, 50, 90, 99, 99.9};
    const LatencyStats want = latency_stats(std::vector<double>(f.begin(), f.end()), percentiles);
    const LatencyStats got = latency_stats_of_runs(r, percentiles);
    EXPECT_EQ(got.count, std::abs(n));
    EXPECT_EQ(std::bit_cast<std::uint64_t>(got.mean_ms), std::bit_cast<std::uint64_t>(want.mean_ms)) << n;
    EXPECT_EQ(std::bit_cast<std::uint64_t>(got.std_ms), std::bit_cast<std::uint64_t>(want.std_ms)) << n;
    EXPECT_EQ(std::bit_cast<std::uint64_t>(got.median_ms), std::bit_cast<std::uint64_t>(want.median_ms)) << n;
    EXPECT_EQ(std::bit_cast<std::uint64_t>(got.p90_ms), std::bit_cast<std::uint64_t>(want.p90_ms)) << n;
    EXPECT_EQ(std::bit_cast<std::uint64_t>(got.p99_ms), std::bit_cast<std::uint64_t>(want.p99_ms)) << n;
    ASSERT_EQ(got.percentiles_ms.size(), want.percentiles_ms.size());
    for (std::size_t i = 0; i < got.percentiles_ms.size(); ++i)
      EXPECT_EQ(std::bit_cast<std::uint64_t>(got.percentiles_ms[i].second),
                std::bit_cast<std::uint64_t>(want.percentiles_ms[i].second))
          << n << " p" << got.percentiles_ms[i].first;
  }
  const LatencyStats s = latency_stats_of_runs(runs_of({4.0f, 1.0f, 1.0f, 3.0f, 2.0f}));
  EXPECT_DOUBLE_EQ(s.mean_ms, 2200);
  EXPECT_DOUBLE_EQ(s.median_ms, 2000);
  EXPECT_NEAR(s.p90_ms, 3600, 1e-9);
}

TEST(Goodput, ParsesVllmsSyntaxAndRefusesTheRest) {
  const ServingSlo slo = parse_goodput("ttft:500,e2el:3000");
  EXPECT_DOUBLE_EQ(slo.ttft_ms, 500);
  EXPECT_TRUE(std::isinf(slo.tpot_ms));
  EXPECT_DOUBLE_EQ(slo.e2el_ms, 3000);
  EXPECT_TRUE(slo.met(0.5, 10.0, 3.0));  // on the bounds; no TPOT objective
  EXPECT_FALSE(slo.met(0.501, 0.01, 1.0));
  EXPECT_FALSE(slo.met(0.1, 0.01, 3.001));
  EXPECT_TRUE(parse_goodput("tpot:20").met(1.0, -1, 9.0));  // a one-token request has no TPOT to miss
  for (const char* bad : {"", "ttft", "ttft:", "ttft:0", "ttft:-3", "ttft:abc", "ttft:5ms", "tpot:1,tpot:2", "itl:5",
                          "ttft:nan", "ttft:inf"})
    EXPECT_THROW((void)parse_goodput(bad), InvalidArgument) << bad;
  EXPECT_FALSE(ServingSlo{}.any());
}

ContiguousBackend oracle(std::int64_t capacity_tokens) {
  ContiguousConfig c;
  c.model = testing::tiny_model();
  c.capacity_bytes = static_cast<std::size_t>(capacity_tokens) * c.model.kv_bytes_per_token();
  c.max_seq_len = 64;
  c.policy = ReservationPolicy::oracle;
  return ContiguousBackend(c);
}

TEST(ServingMetrics, OneRequestByHand) {
  // 4 prompt + 3 output tokens: a prefill step d1 (first token), then decode steps d2, d3.
  ContiguousBackend b = oracle(100);
  ReplayConfig cfg;
  const ReplayResult r = replay(b, {{0, 0.0, 4, 3}}, cfg);
  ASSERT_EQ(r.steps.size(), 3u);
  const double d1 = r.steps[0].duration_s, d2 = r.steps[1].duration_s, d3 = r.steps[2].duration_s;
  const ReplaySummary& s = r.summary;
  EXPECT_NEAR(s.ttft.mean_ms, 1e3 * d1, 1e-9);
  EXPECT_NEAR(s.e2el.mean_ms, 1e3 * (d1 + d2 + d3), 1e-9);
  EXPECT_NEAR(s.tpot.mean_ms, 1e3 * (d2 + d3) / 2, 1e-9);
  EXPECT_EQ(s.itl.count, 2);  // the gaps between its 3 tokens
  EXPECT_NEAR(s.itl.mean_ms, 1e3 * (d2 + d3) / 2, 1e-6);
  EXPECT_NEAR(s.itl.p99_ms, 1e3 * (std::min(d2, d3) + 0.99 * std::abs(d3 - d2)), 1e-6);
  EXPECT_EQ(s.goodput_requests_per_s, -1);  // no objectives given
}

TEST(ServingMetrics, ItlCountsEveryGapAndGoodputCountsWhoMeetsTheObjectives) {
  SyntheticWorkload w;
  w.num_requests = 40;
  w.rate = 20;
  w.prompt = LengthDistribution::parse("uniform:4:20", "prompt");
  w.output = LengthDistribution::parse("uniform:1:30", "output");
  const auto workload = generate(w);
  ContiguousBackend b = oracle(4000);  // room for all: no preemption
  ReplayConfig cfg;
  cfg.goodput = parse_goodput("ttft:1000000");  // everybody meets it
  const ReplaySummary all = replay(b, workload, cfg).summary;
  ASSERT_EQ(all.preemptions, 0);
  ASSERT_EQ(all.completed, 40);
  EXPECT_EQ(all.itl.count, all.generated_tokens - all.completed);
  EXPECT_EQ(all.ttft.count, 40);
  EXPECT_DOUBLE_EQ(all.slo_attainment_frac, 1.0);
  EXPECT_NEAR(all.goodput_requests_per_s, 40 / all.makespan_s, 1e-9);
  // An objective between the fastest and slowest TTFT: exactly those at or under it count.
  cfg.goodput = ServingSlo{};
  cfg.goodput.ttft_ms = all.ttft.median_ms;
  ContiguousBackend b2 = oracle(4000);
  const ReplayResult r = replay(b2, workload, cfg);
  std::int64_t under = 0;
  for (const RequestRecord& rec : r.requests) under += 1e3 * rec.ttft() <= all.ttft.median_ms;
  EXPECT_GT(under, 0);
  EXPECT_LT(under, 40);
  EXPECT_DOUBLE_EQ(r.summary.slo_attainment_frac, static_cast<double>(under) / 40);
}

}  // namespace
}  // namespace kvlab
