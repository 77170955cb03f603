// The figure kit's numbers that READMEs print next to the papers': the relative error, the
// lognormal workloads built from a paper's mean lengths, and the clock-sources line.
#include "experiments/figures/figure_kit.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace kvlab::fig {
namespace {

TEST(RelativeError, IsOursMinusPaperOverPaper) {
  EXPECT_DOUBLE_EQ(relative_error(11.0, 10.0), 0.1);
  EXPECT_DOUBLE_EQ(relative_error(9.0, 10.0), -0.1);
  EXPECT_DOUBLE_EQ(relative_error(7.0, 7.0), 0.0);
  // The paper's number is the denominator, not ours: 15 against 30 is -50 %, not -100 %.
  EXPECT_DOUBLE_EQ(relative_error(15.0, 30.0), -0.5);
  EXPECT_DOUBLE_EQ(relative_error(60.0, 30.0), 1.0);
  EXPECT_TRUE(std::isnan(relative_error(1.0, 0.0)));
}

TEST(RelativeError, PrintsASignedPercentWithOneDecimal) {
  EXPECT_EQ(relative_error_pct(6.86, 7.00), "-2.0");
  EXPECT_EQ(relative_error_pct(11.91, 9.81), "+21.4");
  EXPECT_EQ(relative_error_pct(15.90, 30.42), "-47.7");
  EXPECT_EQ(relative_error_pct(24.75, 132.44), "-81.3");
  EXPECT_EQ(relative_error_pct(7.0, 7.0), "+0.0");
  EXPECT_EQ(relative_error_pct(3.0, 0.0), "n/a");
}

TEST(LognormalRequests, HaveTheStatedMeansWithinTheContextAndArriveAtTheRate) {
  const LognormalLengths l{161.31, 337.99, 2048};
  const auto w = lognormal_requests(l, 2.0, 20000, 7);
  ASSERT_EQ(w.size(), 20000u);
  for (std::size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(w[i].id, static_cast<std::int64_t>(i));
    EXPECT_GE(w[i].prompt_tokens, 1);
    EXPECT_GE(w[i].output_tokens, 1);
    EXPECT_LE(w[i].prompt_tokens + w[i].output_tokens, 2048);
    if (i > 0) {
      EXPECT_GE(w[i].arrival_s, w[i - 1].arrival_s);
    }
  }
  const auto [p, o] = mean_lengths(w);
  EXPECT_NEAR(p, 161.31, 0.03 * 161.31);  // sampling error and the clamp, well under 3 %
  EXPECT_NEAR(o, 337.99, 0.03 * 337.99);
  EXPECT_NEAR(static_cast<double>(w.size()) / w.back().arrival_s, 2.0, 0.1);  // arrivals drawn after the filter
}

TEST(LognormalRequests, DropRequestsLongerThanTheContextBeforeArrivals) {
  const LognormalLengths l{600, 600, 1024};  // many draws exceed 1024 together
  const auto w = lognormal_requests(l, 5.0, 500, 3);
  ASSERT_EQ(w.size(), 500u);
  for (const Request& r : w) EXPECT_LE(r.prompt_tokens + r.output_tokens, 1024);
  EXPECT_NEAR(static_cast<double>(w.size()) / w.back().arrival_s, 5.0, 0.75);
}

TEST(LognormalRequests, VllmShareGptLengthsFitOpt) {
  const auto w = sharegpt_vllm_lengths(2.0, 300);
  ASSERT_EQ(w.size(), 300u);
  for (const Request& r : w) EXPECT_LE(r.prompt_tokens + r.output_tokens, opt13b_12gb().model.max_context);
}

TEST(ClockSources, ReadTheNumbersFromTheDeviceModel) {
  DeviceModel d = a100_40gb().device;
  const std::string a100 = clock_sources(d);
  EXPECT_NE(a100.find("memory_bandwidth 1.555 TB/s"), std::string::npos) << a100;
  EXPECT_NE(a100.find("peak_flops 312 TFLOP/s"), std::string::npos) << a100;
  EXPECT_NE(a100.find("host_bandwidth 25 GB/s"), std::string::npos) << a100;
  EXPECT_NE(a100.find("A100 datasheet"), std::string::npos) << a100;
  EXPECT_NE(a100.find("Vidur"), std::string::npos) << a100;  // the linear constants' source, from the file
  d.name = "made-up";
  d.origin.clear();
  d.memory_bandwidth = 2e12;
  d.sources.clear();
  const std::string other = clock_sources(d);
  EXPECT_NE(other.find("memory_bandwidth 2 TB/s"), std::string::npos) << other;
  EXPECT_NE(other.find("sources: source not recorded"), std::string::npos) << other;
  EXPECT_EQ(other.find("A100"), std::string::npos) << other;
}

// Memory mode keeps nothing it does not write: a figure that tabulates only the summary keeps no
// step records (a long figure kept hundreds of MB of them), and the summary does not change.
TEST(FigureRun, KeepsStepRecordsOnlyWhenAsked) {
  FigureContext ctx;
  ctx.progress = false;
  const auto w = lognormal_requests(LognormalLengths{40, 30, 256}, 50.0, 23, 3);
  const ReplayResult dropped = run(ctx, "paged-16", opt13b_12gb(), w, a100_40gb());
  const ReplayResult kept = run(ctx, "paged-16", opt13b_12gb(), w, a100_40gb(), StepRecords::keep);
  EXPECT_TRUE(dropped.steps.empty());
  ASSERT_FALSE(kept.steps.empty());
  EXPECT_EQ(static_cast<std::int64_t>(kept.steps.size()), kept.summary.steps);
  EXPECT_EQ(dropped.summary.steps, kept.summary.steps);
  EXPECT_EQ(dropped.summary.generated_tokens, kept.summary.generated_tokens);
  EXPECT_DOUBLE_EQ(dropped.summary.mean_normalized_latency_s, kept.summary.mean_normalized_latency_s);
}

}  // namespace
}  // namespace kvlab::fig
