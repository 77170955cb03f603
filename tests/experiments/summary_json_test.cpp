// summary.json: the layout people diff, every key in its place, and the backend's named counters.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "experiments/backend_factory.hpp"
#include "experiments/replayer.hpp"
#include "experiments/summary_json.hpp"
#include "experiments/workload.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

ReplayResult forked_replay(const std::string& backend) {
  SyntheticWorkload w;
  w.num_requests = 20;
  w.rate = 100;
  w.prompt = LengthDistribution::parse("uniform:9:60", "p");  // partial last blocks: forks copy on write
  w.output = LengthDistribution::parse("uniform:4:30", "o");
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 4000 * o.model.kv_bytes_per_token();
  o.max_seq_len = 256;
  ReplayConfig c;
  c.samples_per_request = 3;
  auto b = make_backend(backend, o);
  return replay(*b, generate(w), c);
}

TEST(SummaryJson, CarriesTheBackendsNamedCounters) {
  const ReplayResult r = forked_replay("paged-7");
  double cow = -1;
  for (const auto& [name, value] : r.summary.backend_counters) cow = name == "cow_copies" ? value : cow;
  EXPECT_GT(cow, 0);  // three samples share a partly filled last block: each write copies it
  const auto j = nlohmann::json::parse(summary_json(RunInfo{"kvlab test", "tiny", "synthetic", "modelled", "none"}, r.summary));
  EXPECT_EQ(j.at("counters").at("cow_copies").get<double>(), cow);
  EXPECT_EQ(j.at("backend"), "paged-b7");
  EXPECT_EQ(j.at("device"), "host");
  EXPECT_EQ(j.at("completed").get<std::int64_t>(), r.summary.completed);
}

TEST(SummaryJson, BackendsWithoutCountersWriteAnEmptyObject) {
  const ReplayResult r = forked_replay("contiguous-oracle");
  EXPECT_TRUE(r.summary.backend_counters.empty());
  const std::string text = summary_json(RunInfo{"kvlab test", "tiny", "synthetic", "modelled", "none"}, r.summary);
  EXPECT_NE(text.find("\n  \"counters\": {}\n}"), std::string::npos) << text;
}

}  // namespace
}  // namespace kvlab
