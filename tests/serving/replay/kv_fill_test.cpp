// Execute mode on the host writes the KV a step computes before the step's kernels read it
// (serving/replay/kv_fill.hpp): no kernel may read a never-written row (Linux's zero page).
#include "serving/replay/kv_fill.hpp"

#include <gtest/gtest.h>

#include <string>

#include "alloc/core/error.hpp"
#include "alloc/memory/huge_pages.hpp"
#include "kernels/dispatch.hpp"
#include "serving/replay/backend_factory.hpp"
#include "serving/replay/replayer.hpp"
#include "serving/traces/workload.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

BackendOptions options() {
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = std::size_t{4} << 20;
  o.max_seq_len = 128;
  o.memory = &huge_page_host_memory_resource();
  return o;
}

/// The value KvFill writes at element i (head-major: head * head_dim + d) of token t's row.
float filled(std::int64_t i, std::int64_t t) { return static_cast<float>((i + t) % 15 - 7) * 0.125f; }

TEST(KvFill, EveryRowAKernelReadsWasWrittenBeforeIt) {
  for (const std::string name : {"paged-7", "contiguous-max", "vmm-4k", "elastic-16-4k"}) {
    SCOPED_TRACE(name);
    auto b = make_backend(name, options());
    SyntheticWorkload w;
    w.num_requests = 7;
    w.rate = 0;
    w.prompt = LengthDistribution::parse("uniform:4:40", "p");
    w.output = LengthDistribution::parse("fixed:12", "o");
    w.seed = 5;
    ReplayConfig rc;
    rc.execute = true;
    rc.execute_layers = 1;
    std::int64_t rows = 0, wrong = 0, kernels = 0;
    rc.attention = [&](const AttentionParams& p, const KvView& view) {
      ++kernels;
      const ModelGeometry& m = b->model();
      visit_kv_view(view, [&](auto typed, auto) {
        for (int s = 0; s < p.batch; ++s)
          for (std::int64_t t = 0; t < p.seq_lens[s]; ++t)
            for (int h = 0; h < m.num_kv_heads; ++h)
              for (int d = 0; d < m.head_dim; ++d) {
                const float want = filled(static_cast<std::int64_t>(h) * m.head_dim + d, t);
                wrong += to_float(typed.k(s, t, h)[d]) != want || to_float(typed.v(s, t, h)[d]) != want;
              }
        for (int s = 0; s < p.batch; ++s) rows += p.seq_lens[s];
      });
    };
    const ReplayResult r = replay(*b, generate(w), rc);
    EXPECT_EQ(r.summary.completed, 7);
    EXPECT_GE(kernels, 12);
    EXPECT_GT(rows, 7 * 12);
    EXPECT_EQ(wrong, 0) << "elements a kernel read that the step had not written (or wrote wrong)";
  }
}

TEST(KvFill, WritesTheLayersAskedForAndRefusesAnEmptyRange) {
  auto b = make_backend("paged-7", options());
  b->admit(1, {10, 20}, 10);
  KvFill fill(*b, 5);  // more layers than the model's 2: both
  const ComputedTokens tokens[] = {{1, 0, 10}};
  fill.write(tokens);
  EXPECT_EQ(fill.rows_written(), 10 * 2 * 2);  // tokens x (K, V) x layers
  const SeqId one = 1;
  b->prepare_batch({&one, 1});
  for (int layer = 0; layer < 2; ++layer) {
    visit_kv_view(b->layer_view(layer), [&](auto typed, auto) {
      EXPECT_EQ(to_float(typed.k(0, 9, 1)[3]), filled(32 + 3, 9));
      EXPECT_EQ(to_float(typed.v(0, 0, 0)[0]), filled(0, 0));
    });
  }
  EXPECT_THROW(KvFill(*b, 0), InvalidArgument);
}

}  // namespace
}  // namespace kvlab
