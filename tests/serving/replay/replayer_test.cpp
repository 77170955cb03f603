#include <gtest/gtest.h>

#include <cmath>

#include "alloc/contiguous/contiguous_backend.hpp"
#include "alloc/core/error.hpp"
#include "serving/replay/backend_factory.hpp"
#include "alloc/memory/memory_resource.hpp"
#include "serving/replay/replayer.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

ContiguousBackend contiguous(ReservationPolicy policy, std::int64_t capacity_tokens, std::int64_t max_seq_len) {
  ContiguousConfig c;
  c.model = testing::tiny_model();
  c.capacity_bytes = static_cast<std::size_t>(capacity_tokens) * c.model.kv_bytes_per_token();
  c.max_seq_len = max_seq_len;
  c.policy = policy;
  return ContiguousBackend(c);
}

TEST(Replayer, OneRequestByHand) {
  // P = 4 prompt tokens, O = 3 output tokens, oracle reservation of P + O - 1 = 6 tokens.
  ContiguousBackend b = contiguous(ReservationPolicy::oracle, 100, 64);
  ReplayConfig cfg;
  const ReplayResult r = replay(b, {{0, 0.0, 4, 3}}, cfg);
  ASSERT_EQ(r.steps.size(), 3u);  // prefill, then O - 1 = 2 decode steps
  const ModelGeometry m = testing::tiny_model();
  // One sequence in every step.
  const auto work = [](std::int64_t prefill, std::int64_t decode, std::int64_t kv_read, std::int64_t pairs) {
    return StepWork{.prefill_tokens = prefill,
                    .decode_tokens = decode,
                    .kv_tokens_read = kv_read,
                    .attention_pairs = pairs,
                    .sequences = 1};
  };
  const double d1 = step_seconds(m, cfg.device, work(4, 0, 4, 10));
  const double d2 = step_seconds(m, cfg.device, work(0, 1, 5, 5));
  const double d3 = step_seconds(m, cfg.device, work(0, 1, 6, 6));
  EXPECT_DOUBLE_EQ(r.steps[0].duration_s, d1);
  EXPECT_DOUBLE_EQ(r.steps[1].duration_s, d2);
  EXPECT_DOUBLE_EQ(r.steps[2].duration_s, d3);
  // Token states 4, 5, 6 of 100 tokens; reserved 2, 1, 0.
  EXPECT_DOUBLE_EQ(r.steps[0].fractions.token_states, 0.04);
  EXPECT_DOUBLE_EQ(r.steps[0].fractions.reserved, 0.02);
  EXPECT_DOUBLE_EQ(r.steps[2].fractions.token_states, 0.06);
  EXPECT_DOUBLE_EQ(r.steps[2].fractions.reserved, 0.0);
  const ReplaySummary& s = r.summary;
  EXPECT_EQ(s.completed, 1);
  EXPECT_EQ(s.generated_tokens, 3);
  EXPECT_DOUBLE_EQ(s.makespan_s, d1 + d2 + d3);
  EXPECT_DOUBLE_EQ(s.mean_ttft_s, d1);
  EXPECT_DOUBLE_EQ(s.mean_tpot_s, (d2 + d3) / 2);
  EXPECT_DOUBLE_EQ(s.mean_e2e_s, d1 + d2 + d3);
  EXPECT_NEAR(s.mean_fractions.token_states, (0.04 * d1 + 0.05 * d2 + 0.06 * d3) / (d1 + d2 + d3), 1e-15);
  EXPECT_EQ(b.num_sequences(), 0u);
}

// The --max-memory-gib estimate bounds what a replay keeps: at least as many steps as the replay
// records (here one sequence at a time, the worst case, and a batch), every generated token once,
// and no steps at all when none are kept.
TEST(Replayer, KeptMemoryEstimateBoundsTheRecords) {
  const std::vector<Request> one_at_a_time = {{0, 0.0, 20, 5}, {1, 100.0, 7, 9}, {2, 200.0, 33, 1}};
  const std::vector<Request> together = {{0, 0.0, 20, 5}, {1, 0.0, 7, 9}, {2, 0.0, 33, 1}};
  for (const auto* w : {&one_at_a_time, &together}) {
    ContiguousBackend b = contiguous(ReservationPolicy::oracle, 1000, 64);
    ReplayConfig cfg;
    cfg.max_batched_tokens = 16;
    cfg.chunked_prefill = true;
    const ReplayResult r = replay(b, *w, cfg);
    const KeptMemoryEstimate e = estimate_kept_memory(*w, cfg);
    EXPECT_EQ(e.requests, 3);
    EXPECT_EQ(e.generated_tokens, 5 + 9 + 1);
    EXPECT_GE(e.steps, static_cast<std::int64_t>(r.steps.size()));
    EXPECT_GE(e.bytes, r.steps.size() * sizeof(StepRecord) + r.requests.size() * sizeof(RequestRecord));
  }
  ReplayConfig no_steps;
  no_steps.keep_steps = false;
  EXPECT_EQ(estimate_kept_memory(one_at_a_time, no_steps).steps, 0);
  ReplayConfig sampled;
  sampled.samples_per_request = 4;
  EXPECT_EQ(estimate_kept_memory(one_at_a_time, sampled).generated_tokens, 4 * (5 + 9 + 1));
}

TEST(Replayer, SeparatePrefillStepsNeverMixPromptsAndDecodes) {
  // Request 1 arrives while request 0 decodes. Mixed: its prompt joins request 0's decode step.
  // Separate (vLLM v0): that step runs only the prompt; request 0 sits it out, still in the batch.
  const std::vector<Request> w = {{0, 0.0, 4, 6}, {1, 1e-9, 8, 3}};
  int mixed_steps[2] = {0, 0};
  for (const PrefillSteps mode : {PrefillSteps::mixed, PrefillSteps::separate}) {
    ContiguousBackend b = contiguous(ReservationPolicy::oracle, 100, 64);
    ReplayConfig cfg;
    cfg.prefill_steps = mode;
    const ReplayResult r = replay(b, w, cfg);
    EXPECT_EQ(r.summary.completed, 2);
    EXPECT_EQ(r.summary.generated_tokens, 9);
    const int m = mode == PrefillSteps::separate;
    for (const StepRecord& st : r.steps) mixed_steps[m] += st.prefill_tokens > 0 && st.decode_tokens > 0;
    if (mode == PrefillSteps::separate) {
      ASSERT_GE(r.steps.size(), 2u);
      EXPECT_EQ(r.steps[1].prefill_tokens, 8);  // request 1's prompt step
      EXPECT_EQ(r.steps[1].decode_tokens, 0);
      EXPECT_EQ(r.steps[1].running, 2);  // request 0 paused, not gone
      // One more step than mixed: request 0 lost a step to the prompt.
      EXPECT_EQ(r.summary.steps, 7);
    } else {
      EXPECT_EQ(r.summary.steps, 6);
    }
  }
  EXPECT_GT(mixed_steps[0], 0);
  EXPECT_EQ(mixed_steps[1], 0);
}

TEST(Replayer, SeparatePrefillStepsRefuseChunkedPrefill) {
  ContiguousBackend b = contiguous(ReservationPolicy::oracle, 100, 64);
  ReplayConfig cfg;
  cfg.prefill_steps = PrefillSteps::separate;
  cfg.chunked_prefill = true;
  EXPECT_THROW((void)replay(b, {{0, 0.0, 4, 3}}, cfg), std::exception);
}

TEST(Replayer, WaitingRequestSeesExternalFragmentation) {
  // max policy: each request reserves 60 of 100 tokens, so the second waits for the first, and
  // meanwhile the 40-token hole is external fragmentation for it.
  ContiguousBackend b = contiguous(ReservationPolicy::max, 100, 60);
  const ReplayResult r = replay(b, {{0, 0.0, 10, 5}, {1, 0.0, 10, 5}}, ReplayConfig{});
  ASSERT_EQ(r.summary.completed, 2);
  ASSERT_EQ(r.steps.size(), 10u);  // strictly one after the other: 5 + 5 steps
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(r.steps[i].running, 1);
    EXPECT_EQ(r.steps[i].waiting, 1);
    EXPECT_DOUBLE_EQ(r.steps[i].fractions.external_fragmentation, 0.4);
    EXPECT_NEAR(r.steps[i].fractions.internal_fragmentation, (60 - 14) / 100.0, 1e-12);
  }
  EXPECT_DOUBLE_EQ(r.steps[5].fractions.external_fragmentation, 0.0);
  EXPECT_GT(r.requests[1].first_scheduled_s, r.requests[0].finish_s - 1e-12);
}

TEST(Replayer, LongRequestsAreRejectedOrTruncatedAndCounted) {
  ContiguousBackend b = contiguous(ReservationPolicy::oracle, 100, 32);
  std::vector<Request> w = {{0, 0.0, 10, 5}, {1, 0.1, 40, 5}, {2, 0.2, 20, 20}};
  ReplayResult r = replay(b, w, ReplayConfig{});
  EXPECT_EQ(r.summary.completed, 1);
  EXPECT_EQ(r.summary.rejected, 2);
  EXPECT_EQ(r.requests[1].status, RequestRecord::Status::rejected);
  ReplayConfig truncate;
  truncate.long_requests = LongRequestPolicy::truncate;
  r = replay(b, w, truncate);
  EXPECT_EQ(r.summary.completed + r.summary.truncated + r.summary.rejected, 3);
  EXPECT_EQ(r.summary.truncated, 2);
  EXPECT_EQ(r.requests[2].generated_tokens, 32 - 20 + 1);  // as much output as fits
}

TEST(Replayer, RequestLargerThanCapacityIsRejectedNotLost) {
  ContiguousBackend b = contiguous(ReservationPolicy::max, 50, 64);  // one reservation never fits
  const ReplayResult r = replay(b, {{0, 0.0, 4, 2}, {1, 1.0, 4, 2}}, ReplayConfig{});
  EXPECT_EQ(r.summary.rejected, 2);
  EXPECT_EQ(r.summary.out_of_memory, 2);
  EXPECT_EQ(r.summary.completed, 0);
}

TEST(Replayer, InvariantsOnASyntheticWorkloadForEveryContiguousPolicy) {
  SyntheticWorkload w;
  w.num_requests = 300;
  w.rate = 50;
  w.prompt = LengthDistribution::parse("uniform:1:60", "p");
  w.output = LengthDistribution::parse("uniform:1:60", "o");
  w.seed = 3;
  const auto workload = generate(w);
  for (const char* name : {"contiguous-max", "contiguous-pow2", "contiguous-oracle"}) {
    BackendOptions o;
    o.model = testing::tiny_model();
    o.capacity_bytes = 1000 * o.model.kv_bytes_per_token();
    o.max_seq_len = 100;
    auto b = make_backend(name, o);
    std::int64_t last_progress = 0;
    const ReplayResult r = replay(*b, workload, ReplayConfig{}, [&](auto done, auto) { last_progress = done; });
    const ReplaySummary& s = r.summary;
    EXPECT_EQ(s.completed + s.rejected + s.truncated, 300) << name;
    EXPECT_EQ(last_progress, 300);
    EXPECT_EQ(b->num_sequences(), 0u);
    EXPECT_EQ(b->breakdown().allocated(), 0u);
    for (const StepRecord& st : r.steps) ASSERT_NEAR(st.fractions.sum(), 1.0, 1e-9);
    EXPECT_NEAR(s.mean_fractions.sum(), 1.0, 1e-9);
    std::int64_t generated = 0;
    for (const RequestRecord& q : r.requests) {
      if (q.status == RequestRecord::Status::completed) {
        EXPECT_EQ(q.generated_tokens, q.output_tokens);
        EXPECT_GE(q.first_token_s, q.arrival_s);
        EXPECT_GE(q.finish_s, q.first_token_s);
      }
      generated += q.generated_tokens;
    }
    EXPECT_EQ(generated, s.generated_tokens);
  }
}

TEST(Replayer, RejectsBadConfiguration) {
  ContiguousBackend b = contiguous(ReservationPolicy::max, 100, 60);
  ReplayConfig c;
  c.max_running = 0;
  EXPECT_THROW((void)replay(b, {}, c), InvalidArgument);
  EXPECT_THROW((void)replay(b, {{0, 1.0, 1, 1}, {1, 0.5, 1, 1}}, ReplayConfig{}), InvalidArgument);  // unsorted
}

TEST(Replayer, AbsoluteTimestampsGiveTheSameRates) {
  // A trace with epoch-second timestamps must not report ~0 tokens/s: rates count from the first arrival.
  SyntheticWorkload w;
  w.num_requests = 30;
  w.rate = 5;
  w.prompt = LengthDistribution::parse("uniform:10:80", "p");
  w.output = LengthDistribution::parse("uniform:5:40", "o");
  std::vector<Request> relative = generate(w), absolute = relative;
  for (Request& r : absolute) r.arrival_s += 1.7e9;
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 2000 * o.model.kv_bytes_per_token();
  o.max_seq_len = 256;
  auto a = make_backend("paged-16", o), b = make_backend("paged-16", o);
  const ReplaySummary x = replay(*a, relative, ReplayConfig{}).summary;
  const ReplaySummary y = replay(*b, absolute, ReplayConfig{}).summary;
  ASSERT_GT(x.makespan_s, 0);
  EXPECT_NEAR(y.makespan_s, x.makespan_s, 1e-5 * x.makespan_s);
  EXPECT_NEAR(y.mean_ttft_s, x.mean_ttft_s, 1e-5);
  EXPECT_EQ(y.generated_tokens, x.generated_tokens);
}

TEST(Replayer, RealSixtyFourBitPrefixHashesAreWellDefined) {
  // Mooncake hash ids are arbitrary 64-bit values: their token ids are computed without signed
  // overflow (the asan preset's UBSan would stop here otherwise), and equal hashes still share.
  std::vector<Request> reqs(2);
  for (int i = 0; i < 2; ++i) {
    reqs[static_cast<std::size_t>(i)].id = i;
    reqs[static_cast<std::size_t>(i)].arrival_s = i;
    reqs[static_cast<std::size_t>(i)].prompt_tokens = 40;
    reqs[static_cast<std::size_t>(i)].output_tokens = 3;
    reqs[static_cast<std::size_t>(i)].prefix_hash_block = 16;
    reqs[static_cast<std::size_t>(i)].prefix_hashes = {INT64_MAX, INT64_MIN + 7, -12345};
  }
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 2000 * o.model.kv_bytes_per_token();
  o.max_seq_len = 256;
  auto b = make_backend("paged-16-hash", o);
  const ReplaySummary s = replay(*b, reqs, ReplayConfig{}).summary;
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.prefix_hit_tokens, 32);  // the second request finds the first one's two full blocks
}

TEST(Replayer, ModelledClockIsDeterministicWithABackgroundMapper) {
  // The background mapper runs between steps only, so two replays agree to the last digit.
  SyntheticWorkload w;
  w.num_requests = 60;
  w.rate = 200;
  w.prompt = LengthDistribution::parse("uniform:20:200", "p");
  w.output = LengthDistribution::parse("uniform:10:120", "o");
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 3000 * o.model.kv_bytes_per_token();
  o.max_seq_len = 512;
  std::vector<ReplayResult> runs;
  for (int i = 0; i < 3; ++i) {
    auto b = make_backend("vmm-4k-overlap-nodefer", o);
    runs.push_back(replay(*b, generate(w), ReplayConfig{}));
  }
  for (int i = 1; i < 3; ++i) {
    ASSERT_EQ(runs[i].steps.size(), runs[0].steps.size());
    for (std::size_t s = 0; s < runs[0].steps.size(); ++s) {
      EXPECT_EQ(runs[i].steps[s].fractions.reserved, runs[0].steps[s].fractions.reserved) << "step " << s;
      EXPECT_EQ(runs[i].steps[s].allocated_bytes, runs[0].steps[s].allocated_bytes) << "step " << s;
    }
    EXPECT_EQ(runs[i].summary.preemptions, runs[0].summary.preemptions);
  }
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

std::unique_ptr<KvBackend> backend(const std::string& name, std::int64_t capacity_tokens,
                                   MemoryResource* memory = nullptr) {
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = static_cast<std::size_t>(capacity_tokens) * o.model.kv_bytes_per_token();
  o.max_seq_len = 128;
  o.memory = memory;
  return make_backend(name, o);
}

void expect_all_accounted(const ReplayResult& r, std::int64_t n) {
  EXPECT_EQ(r.summary.completed + r.summary.rejected + r.summary.truncated + r.summary.failed, n);
  for (const StepRecord& s : r.steps) ASSERT_NEAR(s.fractions.sum(), 1.0, 1e-9);
}

TEST(Replayer, ChunkedPrefillSplitsAPromptAcrossSteps) {
  auto b = backend("paged-16", 1000);
  ReplayConfig c;
  c.chunked_prefill = true;
  c.max_batched_tokens = 32;
  const ReplayResult r = replay(*b, {{0, 0.0, 100, 2}}, c);
  ASSERT_EQ(r.steps.size(), 5u);  // 32 + 32 + 32 + 4 prompt tokens, then one decode
  EXPECT_EQ(r.steps[0].prefill_tokens, 32);
  EXPECT_EQ(r.steps[3].prefill_tokens, 4);
  EXPECT_EQ(r.steps[4].decode_tokens, 1);
  EXPECT_DOUBLE_EQ(r.requests[0].first_token_s, r.steps[3].time_s);
  EXPECT_DOUBLE_EQ(r.steps[0].fractions.token_states, 32.0 / (1000 / 16 * 16));
  EXPECT_EQ(r.summary.prefill_tokens_computed, 100);
}

TEST(Replayer, RecomputePreemptionLosesNoRequest) {
  // 64 tokens of KV in blocks of 16: two requests that each grow to 50 tokens cannot coexist.
  auto b = backend("paged-16", 64);
  const std::vector<Request> w = {{0, 0.0, 20, 31}, {1, 0.0, 20, 31}};
  const ReplayResult r = replay(*b, w, ReplayConfig{});
  expect_all_accounted(r, 2);
  EXPECT_EQ(r.summary.completed, 2);
  EXPECT_GE(r.summary.preemptions, 1);
  EXPECT_EQ(r.requests[1].preemptions, r.summary.preemptions);  // the latest arrival is the victim
  EXPECT_EQ(r.requests[0].generated_tokens, 31);
  EXPECT_EQ(r.requests[1].generated_tokens, 31);
  EXPECT_GT(r.summary.prefill_tokens_computed, 40);  // the victim's prompt (and output) recomputed
  EXPECT_EQ(b->num_sequences(), 0u);
}

TEST(Replayer, SwapPreemptionKeepsTheVictimsTokens) {
  auto b = backend("paged-16", 64, &host_memory_resource());
  ReplayConfig c;
  c.preemption = PreemptionMode::swap;
  const ReplayResult r = replay(*b, {{0, 0.0, 20, 31}, {1, 0.0, 20, 31}}, c);
  expect_all_accounted(r, 2);
  EXPECT_EQ(r.summary.completed, 2);
  EXPECT_GE(r.summary.swaps, 1);
  EXPECT_EQ(r.summary.prefill_tokens_computed, 40);  // nothing recomputed
  EXPECT_EQ(r.requests[1].generated_tokens, 31);
}

TEST(Replayer, ParallelSamplingSharesThePromptOnlyWhenPaged) {
  const std::vector<Request> w = {{0, 0.0, 64, 10}, {1, 0.0, 48, 10}};
  ReplayConfig c;
  c.samples_per_request = 4;
  auto paged = backend("paged-16", 2000);
  const ReplayResult p = replay(*paged, w, c);
  EXPECT_EQ(p.summary.completed, 2);
  EXPECT_EQ(p.requests[0].generated_tokens, 40);
  EXPECT_GT(p.summary.mean_shared_savings_bytes, 0u);
  auto contiguous = backend("contiguous-oracle", 2000);
  const ReplayResult q = replay(*contiguous, w, c);
  EXPECT_EQ(q.summary.completed, 2);
  EXPECT_EQ(q.requests[1].generated_tokens, 40);
  EXPECT_EQ(q.summary.mean_shared_savings_bytes, 0u);
  EXPECT_GT(q.summary.peak_allocated_bytes, p.summary.peak_allocated_bytes);
}

TEST(Replayer, ExecuteModeRunsKernelsAndMeasuresThem) {
  SyntheticWorkload w;
  w.num_requests = 12;
  w.prompt = LengthDistribution::parse("uniform:5:40", "p");
  w.output = LengthDistribution::parse("uniform:2:12", "o");
  for (const char* name : {"contiguous-pow2", "paged-7"}) {
    auto b = backend(name, 1000, &host_memory_resource());
    ReplayConfig c;
    c.execute = true;
    c.execute_layers = 1;
    const ReplayResult r = replay(*b, generate(w), c);
    expect_all_accounted(r, 12);
    EXPECT_EQ(r.summary.clock, "measured");
    EXPECT_GT(r.summary.kernel_s, 0.0);
    for (const StepRecord& s : r.steps) EXPECT_DOUBLE_EQ(s.duration_s, s.kernel_s);
  }
  auto no_storage = backend("paged-7", 1000);
  ReplayConfig c;
  c.execute = true;
  EXPECT_THROW((void)replay(*no_storage, generate(w), c), InvalidArgument);
}

TEST(Replayer, SameWorkloadSameResult) {
  SyntheticWorkload w;
  w.num_requests = 200;
  w.rate = 20;
  w.seed = 4;
  const auto workload = generate(w);
  auto a = backend("paged-16", 3000), b = backend("paged-16", 3000);
  const ReplayResult x = replay(*a, workload, ReplayConfig{}), y = replay(*b, workload, ReplayConfig{});
  EXPECT_EQ(x.summary.steps, y.summary.steps);
  EXPECT_EQ(x.summary.preemptions, y.summary.preemptions);
  EXPECT_DOUBLE_EQ(x.summary.makespan_s, y.summary.makespan_s);
  EXPECT_DOUBLE_EQ(x.summary.mean_fractions.token_states, y.summary.mean_fractions.token_states);
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

TEST(Replayer, BeamSearchSharesMoreThanParallelSampling) {
  const std::vector<Request> w = {{0, 0.0, 40, 60}, {1, 0.0, 40, 60}};
  ReplayConfig sampling;
  sampling.samples_per_request = 4;
  ReplayConfig beams = sampling;
  beams.beam_reselect_probability = 0.5;
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 4000 * o.model.kv_bytes_per_token();
  o.max_seq_len = 128;
  auto a = make_backend("paged-16", o), b = make_backend("paged-16", o);
  const ReplayResult s = replay(*a, w, sampling), r = replay(*b, w, beams);
  EXPECT_EQ(r.summary.completed, 2);
  EXPECT_EQ(r.requests[0].generated_tokens, 240);
  EXPECT_EQ(b->breakdown().allocated(), 0u);
  EXPECT_GT(r.summary.mean_shared_savings_bytes, s.summary.mean_shared_savings_bytes);
  // Beam forks on contiguous reservations copy, and still lose nothing.
  auto c = make_backend("contiguous-oracle", o);
  const ReplayResult q = replay(*c, w, beams);
  EXPECT_EQ(q.summary.completed, 2);
  EXPECT_EQ(c->num_sequences(), 0u);
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

TEST(Replayer, PrefixCachingSkipsPrefillOfSharedPrompts) {
  SyntheticWorkload w;
  w.num_requests = 60;
  w.rate = 5;
  w.prompt = LengthDistribution::parse("uniform:300:400", "p");
  w.output = LengthDistribution::parse("uniform:2:20", "o");
  w.prefix_groups = 3;
  w.shared_prefix_tokens = 256;
  const auto workload = generate(w);
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 8000 * o.model.kv_bytes_per_token();
  o.max_seq_len = 1024;
  std::int64_t hits[3] = {0, 0, 0}, computed[3] = {0, 0, 0};
  const char* names[] = {"paged-16", "paged-16-hash", "paged-16-radix"};
  for (int i = 0; i < 3; ++i) {
    auto b = make_backend(names[i], o);
    const ReplayResult r = replay(*b, workload, ReplayConfig{});
    EXPECT_EQ(r.summary.completed, 60) << names[i];
    hits[i] = r.summary.prefix_hit_tokens;
    computed[i] = r.summary.prefill_tokens_computed;
    EXPECT_EQ(b->num_sequences(), 0u);
  }
  EXPECT_EQ(hits[0], 0);
  // Every request after the first of its group hits the whole 256-token system prompt.
  EXPECT_EQ(hits[1], (60 - 3) * 256);
  EXPECT_EQ(hits[2], hits[1]);  // hash and radix agree
  EXPECT_EQ(computed[0] - computed[1], hits[1]);
}

TEST(Replayer, ChainedBlockHashesBecomeSharedTokenIds) {
  // Mooncake-style: hash ids per 512-token block; requests 0 and 1 share their first block.
  Request a{0, 0.0, 700, 3}, b{1, 0.1, 600, 3};
  a.prefix_hashes = {11, 12};
  b.prefix_hashes = {11, 13};
  a.prefix_hash_block = b.prefix_hash_block = 512;
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 4000 * o.model.kv_bytes_per_token();
  o.max_seq_len = 2048;
  auto backend = make_backend("paged-16-radix", o);
  const ReplayResult r = replay(*backend, {a, b}, ReplayConfig{});
  EXPECT_EQ(r.summary.completed, 2);
  EXPECT_EQ(r.summary.prefix_hit_tokens, 512);
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

TEST(Replayer, VmmOverlapTakesMappingOffTheCriticalPath) {
  SyntheticWorkload w;
  w.num_requests = 8;
  w.prompt = LengthDistribution::parse("uniform:20:60", "p");
  w.output = LengthDistribution::parse("fixed:40", "o");
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 2000 * o.model.kv_bytes_per_token();
  o.max_seq_len = 128;
  o.memory = &host_memory_resource();
  ReplayConfig c;
  c.verify_kv = true;
  std::int64_t decode_steps_mapping[2] = {0, 0};
  for (int overlap = 0; overlap < 2; ++overlap) {
    auto b = make_backend(overlap ? "vmm-4k-overlap" : "vmm-4k", o);  // 4 KiB = 8 tokens of a tensor
    const ReplayResult r = replay(*b, generate(w), c);
    EXPECT_EQ(r.summary.completed, 8);
    EXPECT_EQ(r.summary.kv_mismatches, 0);
    // Decode-only steps that had to map on the critical path (prefill steps map the prompt either way).
    for (const StepRecord& s : r.steps) {
      decode_steps_mapping[overlap] += s.prefill_tokens == 0 && s.mapping_s > 0;
      // The modelled clock charges the mapping it counted: it is a part of the step's time.
      EXPECT_DOUBLE_EQ(s.mapping_s, s.parts.mapping);
      EXPECT_NEAR(s.duration_s, s.parts.total(), 1e-15);
      if (s.mapping_s > 0) {
        EXPECT_GT(s.duration_s, s.parts.linear + s.parts.attention + s.parts.cpu);
      }
    }
  }
  EXPECT_GT(decode_steps_mapping[0], 3);  // sequences cross page boundaries while decoding
  EXPECT_EQ(decode_steps_mapping[1], 0);  // the background mapper had every page ready
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

// A run that writes no steps.csv keeps no per-step records, and its summary is the same.
TEST(Replayer, WithoutKeptStepsTheSummaryIsTheSame) {
  SyntheticWorkload w;
  w.num_requests = 30;
  w.rate = 20;
  w.prompt = LengthDistribution::parse("uniform:4:60", "p");
  w.output = LengthDistribution::parse("uniform:2:40", "o");
  w.seed = 9;
  ReplayConfig kept, dropped;
  dropped.keep_steps = false;
  ContiguousBackend a = contiguous(ReservationPolicy::pow2, 800, 128);
  ContiguousBackend b = contiguous(ReservationPolicy::pow2, 800, 128);
  const ReplayResult with = replay(a, generate(w), kept);
  const ReplayResult without = replay(b, generate(w), dropped);
  EXPECT_GT(with.steps.size(), 10u);
  EXPECT_TRUE(without.steps.empty());
  EXPECT_EQ(without.summary.steps, with.summary.steps);
  EXPECT_EQ(without.summary.completed, with.summary.completed);
  EXPECT_DOUBLE_EQ(without.summary.makespan_s, with.summary.makespan_s);
  EXPECT_DOUBLE_EQ(without.summary.mean_batch, with.summary.mean_batch);
  EXPECT_DOUBLE_EQ(without.summary.mean_fractions.token_states, with.summary.mean_fractions.token_states);
  EXPECT_EQ(without.requests.size(), with.requests.size());
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

// held_bytes: what the backend holds (mapped pages for vmm and elastic, the whole capacity for the
// others) against what live sequences pin, step by step.
TEST(Replayer, HeldBytesFollowTheMappedPages) {
  SyntheticWorkload w;
  w.num_requests = 60;
  w.rate = 40;
  w.prompt = LengthDistribution::parse("uniform:5:60", "p");
  w.output = LengthDistribution::parse("uniform:2:40", "o");
  w.seed = 5;
  const std::vector<Request> requests = generate(w);
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 1024 * o.model.kv_bytes_per_token();  // 512 KiB: 32 groups of 16 KiB
  o.max_seq_len = 128;
  ReplayConfig c;
  c.keep_steps = true;
  for (const std::string backend : {"paged-16", "elastic-16-4k-reserve0", "elastic-16-4k", "vmm-16k"}) {
    auto b = make_backend(backend, o);
    const ReplayResult r = replay(*b, requests, c);
    ASSERT_FALSE(r.steps.empty());
    const std::size_t capacity = b->breakdown().capacity;
    std::size_t below_capacity = 0;
    for (const StepRecord& s : r.steps) {
      EXPECT_GE(s.held_bytes, s.allocated_bytes) << backend << " holds less than its sequences pin";
      EXPECT_LE(s.held_bytes, backend.starts_with("vmm") ? o.capacity_bytes : capacity) << backend;
      below_capacity += s.held_bytes < capacity;
    }
    EXPECT_LE(r.summary.mean_held_bytes, r.summary.peak_held_bytes) << backend;
    if (backend.starts_with("paged")) {
      EXPECT_EQ(below_capacity, 0u) << "paged holds its whole pool from the start";
      EXPECT_EQ(r.summary.peak_held_bytes, capacity);
    } else {
      EXPECT_GT(below_capacity, 0u) << backend << " never gave memory back";
      EXPECT_LT(r.summary.mean_held_bytes, capacity) << backend;
    }
  }
}

}  // namespace
}  // namespace kvlab
