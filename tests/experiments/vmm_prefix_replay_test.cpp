// Page-granular prefix sharing in the vmm backend, end to end: replays with shared-prefix groups
// through vmm-<page>-prefix backends with KV integrity verification on. Hits must happen (the
// replayer skips their prefill) and every byte a sequence reads must be what was written for its
// tokens, whether it came from its own prefill or from pages another sequence filled.
#include <gtest/gtest.h>

#include "serving/replay/backend_factory.hpp"
#include "serving/replay/replayer.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

/// 2 layers, 8 KV heads of 128 dims, fp16: 2 KiB a token per per-layer tensor, so a 4 KiB page
/// row holds 2 tokens and a 64 KiB row 32 (llama-3-8b's per-layer numbers).
ModelGeometry wide_model() {
  ModelGeometry m = testing::tiny_model();
  m.name = "wide";
  m.num_q_heads = 8;
  m.num_kv_heads = 8;
  m.head_dim = 128;
  m.max_context = 512;
  return m;
}

BackendOptions options(std::int64_t tokens) {
  BackendOptions o;
  o.model = wide_model();
  o.capacity_bytes = static_cast<std::size_t>(tokens) * o.model.kv_bytes_per_token();
  o.max_seq_len = 512;
  o.memory = &host_memory_resource();
  return o;
}

struct Case {
  int samples;
  double beams;
};

class VmmPrefixReplay : public ::testing::TestWithParam<std::string> {};

TEST_P(VmmPrefixReplay, SharedPrefixesHitAndKeepTheirBytes) {
  for (const Case c : {Case{1, 0.0}, Case{2, 0.3}}) {
    SyntheticWorkload w;
    w.num_requests = 16;
    w.rate = 0;  // all at once: sequences that share pages run at the same time
    w.prompt = LengthDistribution::parse("uniform:150:300", "p");
    w.output = LengthDistribution::parse("uniform:2:25", "o");
    w.prefix_groups = 2;
    w.shared_prefix_tokens = 130;
    w.seed = 5;
    auto b = make_backend(GetParam(), options(3000));
    ASSERT_TRUE(b->name().ends_with("-prefix")) << b->name();
    ReplayConfig rc;
    rc.verify_kv = true;
    rc.samples_per_request = c.samples;
    rc.beam_reselect_probability = c.beams;
    rc.chunked_prefill = true;
    rc.max_batched_tokens = 256;
    const ReplayResult r = replay(*b, generate(w), rc);
    const ReplaySummary& s = r.summary;
    EXPECT_EQ(s.completed, 16) << GetParam() << " samples " << c.samples;
    EXPECT_GT(s.prefix_hit_tokens, 0) << GetParam();
    EXPECT_GT(s.kv_tokens_checked, 1000);
    EXPECT_EQ(s.kv_mismatches, 0) << GetParam() << " samples " << c.samples;
    EXPECT_GT(s.mean_shared_savings_bytes, 0u) << GetParam();
    EXPECT_EQ(b->prefix_cache_stats().hits, s.prefix_hit_tokens);
    EXPECT_EQ(b->num_sequences(), 0u);
    if (GetParam().starts_with("vmm-")) {  // page sharing mapped shared pages (a named counter of vmm)
      double shared_maps = 0;
      for (const auto& [name, value] : b->counters()) shared_maps = name == "shared_maps" ? value : shared_maps;
      EXPECT_GT(shared_maps, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, VmmPrefixReplay,
                         ::testing::Values("vmm-4k-prefix", "vmm-64k-prefix", "vmm-64k-mega-prefix",
                                           "vmm-16k-nodefer-prefix", "vmm-16k-prefix-overlap-eager8"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(VmmPrefixReplay, HitsAgreeWithThePagedHashCacheAtTheSameGranularity) {
  // vmm-64k-prefix shares 32-token rows of this model, like paged-32-hash's 32-token blocks: with
  // memory to spare (no eviction) both hit the same prompt tokens.
  SyntheticWorkload w;
  w.num_requests = 24;
  w.rate = 40;
  w.prompt = LengthDistribution::parse("uniform:150:300", "p");
  w.output = LengthDistribution::parse("uniform:2:25", "o");
  w.prefix_groups = 3;
  w.shared_prefix_tokens = 140;
  w.seed = 9;
  ReplayConfig rc;
  rc.chunked_prefill = true;
  rc.max_batched_tokens = 4096;
  BackendOptions o = options(20000);
  o.memory = nullptr;  // accounting only
  auto vmm = make_backend("vmm-64k-prefix", o);
  auto paged = make_backend("paged-32-hash", o);
  const auto trace = generate(w);
  const ReplaySummary sv = replay(*vmm, trace, rc).summary;
  const ReplaySummary sp = replay(*paged, trace, rc).summary;
  EXPECT_GT(sv.prefix_hit_tokens, 0);
  EXPECT_EQ(sv.prefix_hit_tokens, sp.prefix_hit_tokens);
}

}  // namespace
}  // namespace kvlab
