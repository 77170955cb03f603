#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "alloc/core/error.hpp"
#include "serving/clock/cost_model.hpp"
#include "serving/traces/workload.hpp"

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
  for (const char* bad :
       {"", "fixed", "fixed:0", "fixed:abc", "uniform:9:3", "uniform:1", "zipf:1:2", "lognormal:1:-1", "fixed:1e999"}) {
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

/// A device whose every constant is a round number, so each part of a step can be worked out by hand.
DeviceModel round_device() {
  DeviceModel d;
  d.name = "round";
  d.memory_bandwidth = 1e12;
  d.peak_flops = 1e14;
  d.linear_bandwidth_efficiency = 0.5;
  d.linear_flops_efficiency = 0.25;
  d.linear_layer_overhead_s = 1e-5;
  d.attention_bandwidth_efficiency = 0.8;
  d.attention_flops_efficiency = 0.5;
  d.paged_attention_factor.points = {{1, 4.0}, {16, 1.25}, {256, 1.0}};
  d.step_overhead_s = 1e-3;
  d.sequence_overhead_s = 1e-5;
  d.block_table_entry_s = 1e-7;
  d.map_s.points = {{4096, 2e-6}, {65536, 8e-6}};
  d.unmap_s.points = {{4096, 1e-6}, {65536, 4e-6}};
  d.host_bandwidth = 2e10;
  d.host_transfer_latency_s = 1e-5;
  d.device_copy_latency_s = 5e-6;
  return d;
}

TEST(CostModel, EachPartOfADecodeStepFollowsItsFormula) {
  const ModelGeometry m = model_preset("llama-2-7b");
  const DeviceModel d = round_device();
  StepWork w;
  w.decode_tokens = 3;
  w.sequences = 3;
  w.kv_tokens_read = 1000;
  w.attention_pairs = 1000;
  const StepTime t = step_time(m, d, w);
  const double weights = static_cast<double>(m.weight_bytes());
  EXPECT_DOUBLE_EQ(t.linear, std::max(weights / 0.5e12, 2.0 * m.num_parameters * 3 / 0.25e14) + m.num_layers * 1e-5);
  EXPECT_DOUBLE_EQ(t.attention, 1003.0 * m.kv_bytes_per_token() / 0.8e12);  // decode: bandwidth-bound
  EXPECT_DOUBLE_EQ(t.cpu, 1e-3 + 3 * 1e-5);
  EXPECT_EQ(t.mapping, 0.0);
  EXPECT_EQ(t.transfer, 0.0);
  EXPECT_EQ(t.copy, 0.0);
  EXPECT_DOUBLE_EQ(step_seconds(m, d, w), t.linear + t.attention + t.cpu);
  EXPECT_EQ(step_seconds(m, d, StepWork{}), 0.0);
  // The attention call's floor is paid once per layer, on top of the roof, and only by a step
  // that runs attention at all.
  DeviceModel floored = d;
  floored.attention_layer_overhead_s = 2e-5;
  EXPECT_DOUBLE_EQ(step_time(m, floored, w).attention, 1003.0 * m.kv_bytes_per_token() / 0.8e12 + m.num_layers * 2e-5);
  EXPECT_DOUBLE_EQ(step_time(m, floored, w).linear, t.linear);
  EXPECT_EQ(step_seconds(m, floored, StepWork{}), 0.0);
}

TEST(CostModel, ThePagedViewCostsItsFactorAndItsBlockTables) {
  const ModelGeometry m = model_preset("llama-2-7b");
  const DeviceModel d = round_device();
  StepWork w;
  w.decode_tokens = 2;
  w.sequences = 2;
  w.kv_tokens_read = 500;
  w.attention_pairs = 500;
  const StepTime contiguous = step_time(m, d, w);
  w.view.layout = KvLayout::paged;
  w.view.block_tokens = 16;
  w.block_table_entries = 32;
  const StepTime paged16 = step_time(m, d, w);
  EXPECT_DOUBLE_EQ(paged16.attention, contiguous.attention * 1.25);
  EXPECT_DOUBLE_EQ(paged16.cpu, contiguous.cpu + 32 * 1e-7);
  w.view.block_tokens = 4;  // halfway between 1 and 16 in log2: halfway between 4.0 and 1.25
  EXPECT_DOUBLE_EQ(step_time(m, d, w).attention, contiguous.attention * 2.625);
  w.view.block_tokens = 1024;  // past the last point: clamped
  EXPECT_DOUBLE_EQ(step_time(m, d, w).attention, contiguous.attention);
}

TEST(CostModel, MappingTransfersAndCopiesArePricedPerOperation) {
  const ModelGeometry m = model_preset("llama-2-7b");
  const DeviceModel d = round_device();
  StepWork w;  // no tokens: a step that only moved memory costs just that
  w.ops.maps = 10;
  w.ops.unmaps = 4;
  w.view.page_bytes = 16384;  // log2 halfway between 4 KiB and 64 KiB
  w.ops.host_transfers = 64;
  w.ops.host_transfer_bytes = 2e6;
  w.ops.device_copies = 3;
  w.ops.device_copy_bytes = 1e6;
  const StepTime t = step_time(m, d, w);
  EXPECT_DOUBLE_EQ(t.mapping, 10 * 5e-6 + 4 * 2.5e-6);
  EXPECT_DOUBLE_EQ(t.transfer, 64 * 1e-5 + 2e6 / 2e10);
  EXPECT_DOUBLE_EQ(t.copy, 3 * 5e-6 + 2 * 1e6 / 1e12);
  EXPECT_EQ(t.linear + t.attention + t.cpu, 0.0);
  // Many small transfers of the same bytes cost more than few large ones.
  StepWork few = w;
  few.ops.host_transfers = 2;
  EXPECT_LT(step_time(m, d, few).transfer, t.transfer);
}

TEST(CostModel, TensorParallelGpusShareTheWorkAndPayTwoAllReducesPerLayer) {
  const ModelGeometry m = model_preset("opt-66b");
  const DeviceModel one = round_device();
  DeviceModel four = one;
  four.tensor_parallel = 4;
  four.interconnect_bandwidth = 2e11;
  four.allreduce_latency_s = 1e-5;
  StepWork w;
  w.decode_tokens = 5;
  w.prefill_tokens = 100;
  w.sequences = 6;
  w.kv_tokens_read = 4000;
  w.attention_pairs = 4000 + 100 * 101 / 2;
  w.ops.host_transfers = 8;
  w.ops.host_transfer_bytes = 4e6;
  w.ops.device_copies = 2;
  w.ops.device_copy_bytes = 8e5;
  const StepTime t1 = step_time(m, one, w), t4 = step_time(m, four, w);
  const double tokens = 105, layers = m.num_layers;
  const double hidden_bytes = tokens * 72 * 128 * 2;  // OPT-66B: 9216 hidden, fp16
  const double allreduce = 2 * layers * (1e-5 + 2.0 * 3 / 4 * hidden_bytes / 2e11);
  EXPECT_DOUBLE_EQ(t4.linear, std::max(static_cast<double>(m.weight_bytes()) / 4 / 0.5e12,
                                       2.0 * m.num_parameters * tokens / 4 / 0.25e14) +
                                  layers * 1e-5 + allreduce);
  EXPECT_DOUBLE_EQ(t4.attention, std::max(4105.0 * m.kv_bytes_per_token() / 4 / 0.8e12,
                                          4.0 * layers * 72 * 128 * w.attention_pairs / 4 / (1e14 * 0.5)));
  EXPECT_DOUBLE_EQ(t4.cpu, t1.cpu);  // one scheduler drives every GPU
  EXPECT_DOUBLE_EQ(t4.transfer, 8 * 1e-5 + 4e6 / 4 / 2e10);
  EXPECT_DOUBLE_EQ(t4.copy, 2 * 5e-6 + 2 * 8e5 / 4 / 1e12);
  EXPECT_LT(t4.total(), t1.total());
  // One GPU pays no all-reduce, whatever the interconnect.
  DeviceModel alone = four;
  alone.tensor_parallel = 1;
  EXPECT_DOUBLE_EQ(step_time(m, alone, w).linear, t1.linear);
}

TEST(CostModel, StepTimesAddPartByPart) {
  StepTime sum{.linear = 1, .attention = 2, .cpu = 3, .mapping = 4, .transfer = 5, .copy = 6};
  sum += StepTime{.linear = 10, .attention = 20, .cpu = 30, .mapping = 40, .transfer = 50, .copy = 60};
  EXPECT_EQ(sum.linear, 11);
  EXPECT_EQ(sum.attention, 22);
  EXPECT_EQ(sum.cpu, 33);
  EXPECT_EQ(sum.mapping, 44);
  EXPECT_EQ(sum.transfer, 55);
  EXPECT_EQ(sum.copy, 66);
  EXPECT_EQ(sum.total(), 231);
}

TEST(CostModel, EveryPresetParsesAndNamesASourceForEveryKey) {
  for (const std::string& name : device_model_names()) {
    const DeviceModel d = device_model_preset(name);
    EXPECT_EQ(d.name, name);
    EXPECT_GT(d.memory_bandwidth, 0);
    EXPECT_FALSE(d.paged_attention_factor.empty());
    for (const auto& [key, source] : d.sources) {
      EXPECT_FALSE(source.empty()) << name << ": " << key;
      EXPECT_EQ(source.find("PENDING"), std::string::npos) << name << ": " << key << " has no source yet";
    }
  }
  for (const char* required : {"a100-40gb", "a100-80gb", "h100-sxm", "host"})
    EXPECT_NO_THROW((void)device_model_preset(required)) << required;
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
