// Randomised replays on tiny KV capacities (a few blocks), where every scheduler path fires:
// partial claims of forked samples at block boundaries, swap and recompute preemption, swapped
// groups that no longer fit unshared, beams, chunked prefill and prefix hits. Each replay must end
// with every request completed (with exactly its tokens), or rejected/failed with a reason, every
// KV byte verified, and the backend empty. (Started from a reviewer's reproducer of a partial-claim
// bug that corrupted KV and of a livelock between two forked requests.)
#include <gtest/gtest.h>

#include <random>

#include "alloc/memory/memory_resource.hpp"
#include "serving/replay/backend_factory.hpp"
#include "serving/replay/replayer.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

TEST(ReplayerStress, TinyCapacitiesLoseAndCorruptNothing) {
  const char* names[] = {"paged-16",      "paged-8",        "contiguous-oracle",
                         "paged-16-hash", "paged-16-radix", "vmm-4k-prefix"};
  int rejected_runs = 0, preempting_runs = 0;
  for (int seed = 0; seed < 360; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(static_cast<unsigned>(seed));
    BackendOptions o;
    o.model = testing::tiny_model();
    o.capacity_bytes = static_cast<std::size_t>(32 + (rng() % 6) * 16) * o.model.kv_bytes_per_token();
    o.max_seq_len = 64;
    o.memory = &host_memory_resource();
    const std::string name = names[seed % 6];
    auto b = make_backend(name, o);
    ReplayConfig c;
    c.samples_per_request = 1 + static_cast<int>(rng() % 3);
    c.preemption = rng() % 2 ? PreemptionMode::swap : PreemptionMode::recompute;
    c.chunked_prefill = rng() % 2;
    c.max_batched_tokens = 8 + rng() % 64;
    c.beam_reselect_probability = rng() % 3 == 0 ? 0.3 : 0;
    c.verify_kv = true;
    std::vector<Request> w;
    double t = 0;
    for (int i = 0; i < 6; ++i) {
      Request r{i, t, 1 + static_cast<std::int64_t>(rng() % 30), 1 + static_cast<std::int64_t>(rng() % 20)};
      if (seed % 2) {  // a shared 16-token head for the prefix caches
        r.prompt_token_ids.resize(static_cast<std::size_t>(r.prompt_tokens));
        for (std::int64_t k = 0; k < r.prompt_tokens; ++k)
          r.prompt_token_ids[k] = k < 16 ? static_cast<std::int32_t>(k) : static_cast<std::int32_t>(rng() % 100000);
      }
      w.push_back(r);
      t += static_cast<double>(rng() % 3) * 0.001;
    }
    ReplayResult r;
    ASSERT_NO_THROW(r = replay(*b, w, c)) << name;
    EXPECT_EQ(r.summary.kv_mismatches, 0) << name;
    EXPECT_EQ(b->num_sequences(), 0u) << name;
    std::int64_t accounted = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      const RequestRecord& q = r.requests[i];
      switch (q.status) {
        case RequestRecord::Status::completed:
          EXPECT_EQ(q.generated_tokens, w[i].output_tokens * c.samples_per_request) << name << " request " << i;
          EXPECT_GE(q.finish_s, q.first_token_s);
          ++accounted;
          break;
        case RequestRecord::Status::truncated_completed:
          EXPECT_GE(q.finish_s, 0.0);
          ++accounted;
          break;
        case RequestRecord::Status::rejected:
        case RequestRecord::Status::failed:
          EXPECT_FALSE(q.reason.empty()) << name << " request " << i;
          ++accounted;
          break;
      }
    }
    EXPECT_EQ(accounted, 6);
    rejected_runs += r.summary.rejected > 0;
    preempting_runs += r.summary.preemptions > 0;
  }
  // The capacities are small enough that both paths are really exercised.
  EXPECT_GT(preempting_runs, 50);
  EXPECT_GT(rejected_runs, 20);
}

}  // namespace
}  // namespace kvlab
