// summary.json: the layout people diff, every key in its place, and the backend's named counters.
#include <gtest/gtest.h>

#include <regex>

#include <nlohmann/json.hpp>

#include "serving/replay/backend_factory.hpp"
#include "serving/replay/replayer.hpp"
#include "serving/report/summary_json.hpp"
#include "serving/traces/workload.hpp"
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
  const auto j = nlohmann::json::parse(
      summary_json(RunInfo{"kvlab test", "tiny", "synthetic", "modelled", "none", "host", {}}, r.summary));
  EXPECT_EQ(j.at("counters").at("cow_copies").get<double>(), cow);
  EXPECT_EQ(j.at("backend"), "paged-b7");
  EXPECT_EQ(j.at("device"), "host");
  EXPECT_EQ(j.at("completed").get<std::int64_t>(), r.summary.completed);
}

TEST(SummaryJson, BackendsWithoutCountersWriteAnEmptyObject) {
  const ReplayResult r = forked_replay("contiguous-oracle");
  EXPECT_TRUE(r.summary.backend_counters.empty());
  const std::string text =
      summary_json(RunInfo{"kvlab test", "tiny", "synthetic", "modelled", "none", "host", {}}, r.summary);
  EXPECT_NE(text.find("\n  \"counters\": {},\n  \"provenance\": "), std::string::npos) << text;
}

TEST(SummaryJson, RecordsHowTheRunWasMade) {
  const ReplayResult r = forked_replay("contiguous-oracle");
  RunInfo info{"kvlab test", "tiny", "synthetic", "modelled", "none", "host", {}};
  info.provenance = current_provenance({{"backend", "contiguous-oracle"}, {"rate", "2"}});
  const auto j = nlohmann::json::parse(summary_json(info, r.summary));
  const auto& p = j.at("provenance");
  EXPECT_EQ(p.at("kvlab_version").get<std::string>(), KVLAB_VERSION);
  EXPECT_EQ(p.at("git_revision").get<std::string>(), git_revision());
  EXPECT_TRUE(std::string(git_revision()) == "unknown" ||
              std::regex_match(std::string(git_revision()), std::regex("[0-9a-f]{12}(-dirty)?")))
      << git_revision();
  EXPECT_TRUE(std::regex_match(p.at("date_utc").get<std::string>(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
  EXPECT_FALSE(p.at("host").get<std::string>().empty());
  EXPECT_EQ(p.at("options").at("rate").get<std::string>(), "2");
  EXPECT_EQ(p.at("options").size(), 2u);
}

}  // namespace
}  // namespace kvlab
