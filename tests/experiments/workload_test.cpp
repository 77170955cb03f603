#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "alloc/error.hpp"
#include "experiments/cost_model.hpp"
#include "experiments/workload.hpp"

namespace kvlab {
namespace {

TEST(LengthDistribution, ParsesEveryForm) {
  std::mt19937_64 rng(1);
  EXPECT_EQ(LengthDistribution::parse("fixed:7", "x").sample(rng), 7);
  const auto u = LengthDistribution::parse("uniform:3:5", "x");
  for (int i = 0; i < 100; ++i) {
    const auto v = u.sample(rng);
    EXPECT_GE(v, 3);
    EXPECT_LE(v, 5);
  }
  const auto l = LengthDistribution::parse("lognormal:5:1:300", "x");
  for (int i = 0; i < 100; ++i) {
    const auto v = l.sample(rng);
    EXPECT_GE(v, 1);
    EXPECT_LE(v, 300);
  }
}

TEST(LengthDistribution, BadTextNamesTheInput) {
  for (const char* bad : {"", "fixed", "fixed:0", "fixed:abc", "uniform:9:3", "uniform:1", "zipf:1:2",
                          "lognormal:1:-1", "fixed:1e999"}) {
    try {
      (void)LengthDistribution::parse(bad, "--prompt-len");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("--prompt-len"), std::string::npos) << e.what();
    }
  }
}

TEST(SyntheticWorkload, IsDeterministicPerSeedAndSorted) {
  SyntheticWorkload w;
  w.num_requests = 500;
  w.rate = 3;
  w.seed = 9;
  const auto a = generate(w), b = generate(w);
  ASSERT_EQ(a.size(), 500u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].arrival_s, b[i].arrival_s);
    EXPECT_EQ(a[i].prompt_tokens, b[i].prompt_tokens);
    if (i) {
      EXPECT_GE(a[i].arrival_s, a[i - 1].arrival_s);
    }
  }
  // Poisson at 3/s: the mean gap is close to 1/3 s.
  EXPECT_NEAR(a.back().arrival_s / 499.0, 1.0 / 3.0, 0.05);
  w.seed = 10;
  EXPECT_NE(generate(w)[5].prompt_tokens + generate(w)[6].prompt_tokens, a[5].prompt_tokens + a[6].prompt_tokens);
}

TEST(CostModel, DecodeIsBandwidthBoundAndKnownDevicesParse) {
  const ModelGeometry m = model_preset("llama-2-7b");
  const DeviceModel d = device_model_preset("a100-80gb");
  StepWork w;
  w.decode_tokens = 1;
  w.kv_tokens_read = 1000;
  w.attention_pairs = 1000;
  w.sequences = 1;
  // Weights and KV at the datasheet bandwidth (both efficiencies are 1 in this preset), the
  // per-layer floor of the linear layers, and the CPU work of one step with one sequence.
  ASSERT_EQ(d.linear_bandwidth_efficiency, 1.0);
  ASSERT_EQ(d.attention_bandwidth_efficiency, 1.0);
  const double expected = (m.weight_bytes() + 1001.0 * m.kv_bytes_per_token()) / d.memory_bandwidth +
                          m.num_layers * d.linear_layer_overhead_s + d.step_overhead_s + d.sequence_overhead_s;
  EXPECT_NEAR(step_seconds(m, d, w), expected, expected * 1e-12);
  EXPECT_EQ(step_seconds(m, d, StepWork{}), 0.0);
  EXPECT_THROW((void)device_model_preset("tpu-v5"), InvalidArgument);
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

TEST(SyntheticWorkload, MultiTurnPromptsCarryTheConversation) {
  SyntheticWorkload w;
  w.num_requests = 6;
  w.turns = 3;  // two conversations: requests 0, 2, 4 and 1, 3, 5
  w.prompt = LengthDistribution::parse("fixed:10", "p");
  w.output = LengthDistribution::parse("fixed:5", "o");
  const auto r = generate(w);
  EXPECT_EQ(r[0].prompt_tokens, 10);
  EXPECT_EQ(r[2].prompt_tokens, 25);  // 10 + 5 answer + 10 new
  EXPECT_EQ(r[4].prompt_tokens, 40);
  EXPECT_EQ(static_cast<std::int64_t>(r[4].prompt_token_ids.size()), r[4].prompt_tokens);
  EXPECT_TRUE(std::equal(r[0].prompt_token_ids.begin(), r[0].prompt_token_ids.end(), r[2].prompt_token_ids.begin()));
  EXPECT_TRUE(std::equal(r[2].prompt_token_ids.begin(), r[2].prompt_token_ids.end(), r[4].prompt_token_ids.begin()));
  EXPECT_NE(r[1].prompt_token_ids[0], r[0].prompt_token_ids[0]);  // conversations do not share
  SyntheticWorkload huge;
  huge.num_requests = 1;
  huge.prefix_groups = 1;
  huge.shared_prefix_tokens = INT64_MAX;  // would overflow and ask for unbounded memory
  EXPECT_THROW((void)generate(huge), InvalidArgument);
  huge.shared_prefix_tokens = 64;
  huge.prefix_groups = kMaxPrefixGroups + 1;
  EXPECT_THROW((void)generate(huge), InvalidArgument);
  SyntheticWorkload no_turns;
  no_turns.num_requests = 2;
  no_turns.turns = 0;
  EXPECT_THROW((void)generate(no_turns), InvalidArgument);
}

}  // namespace
}  // namespace kvlab
