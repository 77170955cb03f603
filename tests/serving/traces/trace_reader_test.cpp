#include "serving/traces/trace_reader.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "alloc/core/error.hpp"

namespace kvlab {
namespace {

namespace fs = std::filesystem;

/// A fresh directory per test, removed afterwards.
class TraceFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("kvlab_trace_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path write(const std::string& name, const std::string& content) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  /// Reading `content` (as file `name`) must fail with exactly "<path>:<expected>".
  void expect_error(const std::string& name, const std::string& content, const std::string& expected,
                    TraceFormat format = TraceFormat::auto_detect) {
    const fs::path p = write(name, content);
    TraceOptions o;
    o.format = format;
    try {
      (void)read_trace(p, o);
      ADD_FAILURE() << "accepted " << name << ":\n" << content;
    } catch (const TraceError& e) {
      EXPECT_EQ(std::string(e.what()), p.string() + ":" + expected);
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a TraceError: " << e.what();
    }
  }
  fs::path dir_;
};

// ------------------------------------------------------------------------------------------------
// Good input, every format.

TEST_F(TraceFiles, AzureCsvRebasesWallClockToTheFirstRow) {
  // As published: CRLF line ends, no newline after the last row.
  const auto p = write("azure.csv",
                       "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                       "2023-11-16 18:17:03.9799600,4808,10\r\n"
                       "2023-11-16 18:17:04.0319600,3180,8\r\n"
                       "2023-11-16 23:59:59.5,1,1\r\n"
                       "2023-11-17 00:00:00.0000001,7,2");
  const Trace t = read_trace(p);
  EXPECT_EQ(t.info.format, TraceFormat::azure);
  ASSERT_EQ(t.requests.size(), 4u);
  EXPECT_EQ(t.requests[0].arrival_s, 0.0);
  EXPECT_NEAR(t.requests[1].arrival_s, 0.052, 1e-12);
  EXPECT_NEAR(t.requests[2].arrival_s, 5 * 3600 + 42 * 60 + 55.52004, 1e-9);
  EXPECT_NEAR(t.requests[3].arrival_s, 5 * 3600 + 42 * 60 + 56.0200401, 1e-9);
  EXPECT_EQ(t.requests[0].prompt_tokens, 4808);
  EXPECT_EQ(t.requests[0].output_tokens, 10);
  EXPECT_EQ(t.requests[1].prompt_tokens, 3180);
  EXPECT_EQ(t.requests[3].id, 3);
  EXPECT_TRUE(t.requests[0].prefix_hashes.empty());
  EXPECT_TRUE(t.info.has_timestamps);
  EXPECT_TRUE(t.info.was_sorted);
  EXPECT_EQ(t.info.rows, 4);
  EXPECT_NEAR(t.info.mean_prompt_tokens, (4808 + 3180 + 1 + 7) / 4.0, 1e-9);
  EXPECT_NEAR(t.info.mean_output_tokens, 21 / 4.0, 1e-9);
  EXPECT_NE(t.info.describe().find("azure trace"), std::string::npos);
}

// The form is checked character by character (the message names the character); the value and the
// calendar are Howard Hinnant's date library's.
TEST_F(TraceFiles, AzureTimestampsTakeATOrASpaceAndNineFractionDigitsAndKnowTheCalendar) {
  const Trace t = read_trace(write("t.csv",
                                   "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                   "2024-02-28T23:59:59.999999999,1,1\n"
                                   "2024-02-29 00:00:01,1,1\n"
                                   "2024-03-01 00:00:01.5,1,1\n"));
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_NEAR(t.requests[1].arrival_s, 1.000000001, 1e-12);
  EXPECT_NEAR(t.requests[2].arrival_s, 86400 + 1.500000001, 1e-9);  // 2024 is a leap year
  const std::string head = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  const std::string why = " is not a YYYY-MM-DD HH:MM:SS.fffffff time (";
  expect_error("a.csv", head + "2023-02-29 00:00:00,1,1\n",
               "2: field 'TIMESTAMP': '2023-02-29 00:00:00'" + why + "no such date)");
  expect_error("b.csv", head + "2023-11-16 18:15:60,1,1\n",
               "2: field 'TIMESTAMP': '2023-11-16 18:15:60'" + why + "no such time of day)");
  expect_error("c.csv", head + "2023-11-16/18:15:00,1,1\n",
               "2: field 'TIMESTAMP': '2023-11-16/18:15:00'" + why + "' ' expected at character 11)");
  expect_error("d.csv", head + "2023-11-16 18:15:00.,1,1\n",
               "2: field 'TIMESTAMP': '2023-11-16 18:15:00.'" + why + "1 to 9 fraction digits expected)");
  expect_error("e.csv", head + "2023-11-16 18:15:00.12x,1,1\n",
               "2: field 'TIMESTAMP': '2023-11-16 18:15:00.12x'" + why + "digit expected at character 23)");
  expect_error("f.csv", head + "+023-11-16 18:15:00,1,1\n",
               "2: field 'TIMESTAMP': '+023-11-16 18:15:00'" + why + "digit expected at character 1)");
}

TEST_F(TraceFiles, VidurCsvWithArrivalsIgnoresExtraColumnsAndAcceptsIntegralFloats) {
  const auto p = write("v.csv",
                       "arrived_at,num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
                       "0.0,7564.0,192.0,7756.0,39.39\n"
                       "0.5,10,1e2,x,y\n"
                       "1.25,3,4,,\n");
  const Trace t = read_trace(p);
  EXPECT_EQ(t.info.format, TraceFormat::vidur);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.requests[0].prompt_tokens, 7564);
  EXPECT_EQ(t.requests[0].output_tokens, 192);
  EXPECT_EQ(t.requests[1].output_tokens, 100);
  EXPECT_DOUBLE_EQ(t.requests[1].arrival_s, 0.5);
  EXPECT_DOUBLE_EQ(t.requests[2].arrival_s, 1.25);
  EXPECT_DOUBLE_EQ(t.info.duration_s, 1.25);
}

TEST_F(TraceFiles, VidurLengthOnlyArrivesAtZeroOrFromAPoissonProcess) {
  const auto p = write("lengths.csv",
                       "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
                       "100,10,110,10\n200,20,220,10\n300,30,330,10\n400,40,440,10\n");
  const Trace t = read_trace(p);
  ASSERT_EQ(t.requests.size(), 4u);
  EXPECT_FALSE(t.info.has_timestamps);
  for (const Request& r : t.requests) EXPECT_EQ(r.arrival_s, 0.0);

  TraceOptions o;
  o.poisson_rate = 2;
  o.seed = 7;
  const Trace a = read_trace(p, o), b = read_trace(p, o);
  EXPECT_EQ(a.requests[0].arrival_s, 0.0);
  for (std::size_t i = 1; i < a.requests.size(); ++i) {
    EXPECT_GT(a.requests[i].arrival_s, a.requests[i - 1].arrival_s);
    EXPECT_EQ(a.requests[i].arrival_s, b.requests[i].arrival_s);
  }
  o.seed = 8;
  EXPECT_NE(read_trace(p, o).requests[3].arrival_s, a.requests[3].arrival_s);
  EXPECT_EQ(a.requests[3].prompt_tokens, 400);
}

TEST_F(TraceFiles, MooncakeJsonlKeepsPrefixHashes) {
  const auto p =
      write("m.jsonl",
            "{\"timestamp\": 0, \"input_length\": 1025, \"output_length\": 5, \"hash_ids\": [0, 1, 2]}\n"
            "{\"hash_ids\": [0, 7], \"output_length\": 9, \"input_length\": 1024, \"timestamp\": 0}\n"
            "{\"timestamp\": 1500, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [9223372036854775807]}\n");
  const Trace t = read_trace(p);
  EXPECT_EQ(t.info.format, TraceFormat::mooncake);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.requests[0].prompt_tokens, 1025);
  EXPECT_EQ(t.requests[0].prefix_hashes, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(t.requests[0].prefix_hash_block, 512);
  EXPECT_EQ(t.requests[1].prefix_hashes, (std::vector<std::int64_t>{0, 7}));
  EXPECT_EQ(t.requests[1].output_tokens, 9);
  EXPECT_DOUBLE_EQ(t.requests[2].arrival_s, 1.5);
  EXPECT_EQ(t.requests[2].prefix_hashes[0], INT64_MAX);
  EXPECT_TRUE(t.info.has_prefix_hashes);
}

TEST_F(TraceFiles, LlmServingSimJsonlKeepsTokenIdsAndSkipsUnknownValues) {
  const auto p = write("s.jsonl",
                       "{\"input_toks\": 3, \"output_toks\": 2, \"arrival_time_ns\": 46926808, "
                       "\"input_tok_ids\": [5971, 0, 2147483647], \"output_tok_ids\": [1, 2], "
                       "\"meta\": {\"a\": [1, -2.5e3, {\"b\": \"x\\\"y\\u00e9\\ud83d\\ude00\"}], \"c\": null, \"d\": "
                       "[true, false, []]}}\n"
                       "{\"arrival_time_ns\": 347938951, \"input_toks\": 2, \"output_toks\": 1}\n");
  const Trace t = read_trace(p);
  EXPECT_EQ(t.info.format, TraceFormat::llmservingsim);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_NEAR(t.requests[0].arrival_s, 0.046926808, 1e-15);
  EXPECT_EQ(t.requests[0].prompt_token_ids, (std::vector<std::int32_t>{5971, 0, 2147483647}));
  EXPECT_EQ(t.requests[0].output_tokens, 2);
  EXPECT_TRUE(t.requests[1].prompt_token_ids.empty());
  EXPECT_TRUE(t.info.has_token_ids);

  TraceOptions o;
  o.keep_token_ids = false;
  EXPECT_TRUE(read_trace(p, o).requests[0].prompt_token_ids.empty());
}

TEST_F(TraceFiles, KvlabFormatRoundTripsThroughTheWriter) {
  const auto p = write("k.csv",
                       "# kvlab trace\n"
                       "arrival_s,prompt_tokens,output_tokens,prefix_hashes_16\n"
                       "0,33,4,1 2 3\n"
                       "# a comment between rows\n"
                       "0.125,16,1,1\n"
                       "0.3,5,2,\n");
  const Trace t = read_trace(p);
  EXPECT_EQ(t.info.format, TraceFormat::kvlab);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.requests[0].prefix_hashes, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(t.requests[0].prefix_hash_block, 16);
  EXPECT_EQ(t.requests[1].prefix_hashes, (std::vector<std::int64_t>{1}));
  EXPECT_TRUE(t.requests[2].prefix_hashes.empty());
  EXPECT_DOUBLE_EQ(t.requests[2].arrival_s, 0.3);

  std::ostringstream out;
  write_kvlab_trace(out, t.requests);
  const Trace back = parse_trace(out.str(), "round-trip");
  ASSERT_EQ(back.requests.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.requests[i].arrival_s, t.requests[i].arrival_s);
    EXPECT_EQ(back.requests[i].prompt_tokens, t.requests[i].prompt_tokens);
    EXPECT_EQ(back.requests[i].output_tokens, t.requests[i].output_tokens);
    EXPECT_EQ(back.requests[i].prefix_hashes, t.requests[i].prefix_hashes);
  }

  // Without hashes: three columns; a synthetic workload round-trips exactly.
  SyntheticWorkload w;
  w.num_requests = 50;
  w.rate = 3;
  w.seed = 4;
  const auto g = generate(w);
  std::ostringstream plain;
  write_kvlab_trace(plain, g);
  EXPECT_EQ(plain.str().substr(0, plain.str().find('\n')), "arrival_s,prompt_tokens,output_tokens");
  const Trace gb = parse_trace(plain.str(), "synthetic");
  ASSERT_EQ(gb.requests.size(), g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(gb.requests[i].arrival_s, g[i].arrival_s);
    EXPECT_EQ(gb.requests[i].prompt_tokens, g[i].prompt_tokens);
  }
}

TEST_F(TraceFiles, OptionsLimitScaleAndOffset) {
  const auto p = write("v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n1,1,1\n2,2,2\n4,3,3\n8,4,4\n");
  TraceOptions o;
  o.max_requests = 3;
  o.time_scale = 0.5;
  o.start_offset_s = 10;
  const Trace t = read_trace(p, o);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_DOUBLE_EQ(t.requests[0].arrival_s, 10.5);
  EXPECT_DOUBLE_EQ(t.requests[1].arrival_s, 11);
  EXPECT_DOUBLE_EQ(t.requests[2].arrival_s, 12);
  EXPECT_EQ(t.info.rows, 4);
  EXPECT_EQ(t.info.requests, 3);
  EXPECT_DOUBLE_EQ(t.info.duration_s, 1.5);
  EXPECT_NE(t.info.describe().find("(of 4 rows)"), std::string::npos) << t.info.describe();

  for (const double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    TraceOptions b;
    b.time_scale = bad;
    EXPECT_THROW((void)read_trace(p, b), InvalidArgument);
  }
  TraceOptions neg;
  neg.start_offset_s = -1;
  EXPECT_THROW((void)read_trace(p, neg), InvalidArgument);
  TraceOptions lim;
  lim.max_requests = -1;
  EXPECT_THROW((void)read_trace(p, lim), InvalidArgument);
}

TEST_F(TraceFiles, UnsortedFormatsThatAllowItAreStableSortedAndReported) {
  const auto p = write("v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n2,1,1\n1,2,2\n2,3,3\n0,4,4\n");
  const Trace t = read_trace(p);
  EXPECT_FALSE(t.info.was_sorted);
  ASSERT_EQ(t.requests.size(), 4u);
  EXPECT_EQ(t.requests[0].id, 3);
  EXPECT_EQ(t.requests[1].id, 1);
  EXPECT_EQ(t.requests[2].id, 0);  // stable: row 0 before row 2 at t = 2
  EXPECT_EQ(t.requests[3].id, 2);
  EXPECT_NE(t.info.describe().find("re-sorted"), std::string::npos);
  // The limit applies in arrival order.
  TraceOptions o;
  o.max_requests = 1;
  EXPECT_EQ(read_trace(p, o).requests.at(0).prompt_tokens, 4);
}

TEST_F(TraceFiles, FormatNamesAndDetection) {
  for (auto f : {TraceFormat::auto_detect, TraceFormat::azure, TraceFormat::vidur, TraceFormat::mooncake,
                 TraceFormat::llmservingsim, TraceFormat::kvlab}) {
    EXPECT_EQ(parse_trace_format(to_string(f)), f);
  }
  try {
    (void)parse_trace_format("burstgpt");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'burstgpt' (expected auto, azure, vidur"), std::string::npos) << e.what();
  }
  EXPECT_EQ(detect_trace_format("\xEF\xBB\xBFTIMESTAMP,ContextTokens,GeneratedTokens\r\n", "x"), TraceFormat::azure);
  EXPECT_EQ(detect_trace_format("num_prefill_tokens,num_decode_tokens\n", "x"), TraceFormat::vidur);
  EXPECT_EQ(detect_trace_format("# c\narrival_s,prompt_tokens,output_tokens\n", "x"), TraceFormat::kvlab);
  EXPECT_EQ(detect_trace_format("{\"timestamp\": 0, \"input_length\": 1", "x"), TraceFormat::mooncake);
  EXPECT_EQ(detect_trace_format("{\"input_toks\": 1}", "x"), TraceFormat::llmservingsim);
}

TEST_F(TraceFiles, ResolveLooksUpPlainNamesInTheTraceDirectory) {
  const auto p = write("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1\n");
  EXPECT_EQ(resolve_trace("t.csv", dir_), dir_ / "t.csv");
  EXPECT_EQ(resolve_trace(p.string(), "/nonexistent"), p);
  try {
    (void)resolve_trace("missing.csv", dir_);
    ADD_FAILURE();
  } catch (const TraceError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("missing.csv: trace not found (looked for " + (dir_ / "missing.csv").string(), 0), 0u) << m;
    EXPECT_NE(m.find("scripts/download_traces.sh"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos);
  }
  EXPECT_THROW((void)resolve_trace((dir_ / "nope.csv").string(), dir_), TraceError);
  EXPECT_THROW((void)resolve_trace(dir_.string(), dir_), TraceError);  // a directory

  const char* old = std::getenv("KVLAB_TRACE_DIR");
  const std::string saved = old ? old : "";
  ::setenv("KVLAB_TRACE_DIR", dir_.c_str(), 1);
  EXPECT_EQ(default_trace_dir(), dir_);
  EXPECT_EQ(resolve_trace("t.csv"), dir_ / "t.csv");
  ::unsetenv("KVLAB_TRACE_DIR");
  EXPECT_EQ(default_trace_dir(), (fs::path(KVLAB_SOURCE_DIR) / ".." / "shared" / "traces").lexically_normal());
  if (old) ::setenv("KVLAB_TRACE_DIR", saved.c_str(), 1);

  try {
    (void)read_trace(dir_ / "absent.csv");
    ADD_FAILURE();
  } catch (const TraceError& e) {
    EXPECT_EQ(std::string(e.what()), (dir_ / "absent.csv").string() + ": cannot open: No such file or directory");
  }
}

// ------------------------------------------------------------------------------------------------
// Malformed input: exact one-line messages.

constexpr const char* kAzureHeader = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
constexpr const char* kAzureRow = "2023-11-16 18:17:03.9799600,4808,10\n";

TEST_F(TraceFiles, EmptyHeaderOnlyAndWrongHeaders) {
  expect_error("e.csv", "", "1: empty file");
  expect_error("e.csv", "\n\n", "1: empty file");
  expect_error("e.csv", "", "1: empty file (expected a CSV header)", TraceFormat::azure);
  expect_error("e.jsonl", "", "1: empty file (expected one JSON object per line)", TraceFormat::mooncake);
  expect_error("h.csv", kAzureHeader, "1: header but no data rows");
  expect_error("h.csv", "num_prefill_tokens,num_decode_tokens\r\n", "1: header but no data rows");
  expect_error("w.csv", "time,prompt,output\n1,2,3\n",
               "1: cannot tell the trace format from the first line 'time,prompt,output' (expected an Azure, Vidur or "
               "kvlab CSV header or a Mooncake or LLMServingSim JSON object); pass the format explicitly");
  expect_error(
      "w.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n",
      "1: field 'TIMESTAMP': missing column in the Azure header 'arrived_at,num_prefill_tokens,num_decode_tokens'",
      TraceFormat::azure);
  expect_error("w.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9,1\n",
               "1: field 'GeneratedTokens': missing column in the Azure header 'TIMESTAMP,ContextTokens'");
  expect_error(
      "w.csv", "arrived_at,num_prefill_tokens,decode\n0,1,1\n",
      "1: field 'num_decode_tokens': missing column in the Vidur header 'arrived_at,num_prefill_tokens,decode'");
  expect_error("w.csv", "num_prefill_tokens,num_decode_tokens,num_decode_tokens\n1,1,1\n",
               "1: field 'num_decode_tokens': duplicate column in the header");
  expect_error("w.csv", "arrival_s,output_tokens,prompt_tokens\n0,1,1\n",
               "1: field 'prompt_tokens': expected the kvlab header "
               "'arrival_s,prompt_tokens,output_tokens[,prefix_hashes_<B>]', "
               "found 'arrival_s,output_tokens,prompt_tokens'");
  expect_error("w.csv", "arrival_s,prompt_tokens,output_tokens,prefix_hashes_0\n0,1,1,1\n",
               "1: field 'prefix_hashes_0': the block size after 'prefix_hashes_' must be a whole number 1..10000000");
  expect_error("w.jsonl", "{\"a\": 1}\n",
               "1: cannot tell the trace format: a JSON object with neither 'input_length' (Mooncake) nor 'input_toks' "
               "(LLMServingSim); pass the format explicitly");
}

TEST_F(TraceFiles, BadCsvValuesNameFileLineAndField) {
  const std::string h = kAzureHeader, r = kAzureRow;
  expect_error("a.csv", h + r + "2023-11-16 18:17:04.0,-5,10\n",
               "3: field 'ContextTokens': '-5' is out of range (a token count must be 1..10000000)");
  expect_error("a.csv", h + r + "2023-11-16 18:17:04.0,10000001,10\n",
               "3: field 'ContextTokens': '10000001' is out of range (a token count must be 1..10000000)");
  expect_error("a.csv", h + r + "2023-11-16 18:17:04.0,5,0\n",
               "3: field 'GeneratedTokens': '0' is out of range (a token count must be 1..10000000)");
  expect_error(
      "a.csv", h + r + "2023-11-16 18:17:04.0,5,99999999999999999999999\n",
      "3: field 'GeneratedTokens': '99999999999999999999999' is out of range (a token count must be 1..10000000)");
  expect_error("a.csv", h + r + "2023-11-16 18:17:04.0,abc,10\n", "3: field 'ContextTokens': 'abc' is not a number");
  expect_error("a.csv", h + r + "2023-11-16 18:17:04.0,,10\n",
               "3: field 'ContextTokens': empty value, expected a token count");
  expect_error("a.csv", h + r + "2023-11-16 18:17:04.0,nan,10\n", "3: field 'ContextTokens': 'nan' is not a number");
  expect_error("a.csv", h + r + "2023-11-16 18:17:04.0,12.5,10\n",
               "3: field 'ContextTokens': '12.5' is not a whole number of tokens");
  expect_error("a.csv", h + r + "2023-11-16 18:17:04.0,12\n",
               "3: expected 3 comma-separated fields like the header, found 2");
  expect_error("a.csv", h + r + "2023-11-16 18:17:03.0,12,1\n",
               "3: field 'TIMESTAMP': '2023-11-16 18:17:03.0' is earlier than '2023-11-16 18:17:03.9799600' on line 2 "
               "(Azure traces are in time order)");
  expect_error(
      "a.csv", h + "2023-02-30 18:17:03.0,12,1\n",
      "2: field 'TIMESTAMP': '2023-02-30 18:17:03.0' is not a YYYY-MM-DD HH:MM:SS.fffffff time (no such date)");
  expect_error("a.csv", h + "2023-11-16 18:17:03.0123456789,12,1\n",
               "2: field 'TIMESTAMP': '2023-11-16 18:17:03.0123456789' is not a YYYY-MM-DD HH:MM:SS.fffffff time "
               "(1 to 9 fraction digits expected)");
  expect_error("a.csv", h + "1700000000,12,1\n",
               "2: field 'TIMESTAMP': '1700000000' is not a YYYY-MM-DD HH:MM:SS.fffffff time (too short)");
  expect_error(
      "a.csv", h + "2023-11-16 1a:17:03.0,12,1\n",
      "2: field 'TIMESTAMP': '2023-11-16 1a:17:03.0' is not a YYYY-MM-DD HH:MM:SS.fffffff time (digit expected "
      "at character 13)");
  expect_error("a.csv", h + r + "\n" + r, "3: blank line inside the trace");
  expect_error("v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n-0.5,1,1\n",
               "3: field 'arrived_at': '-0.5' is negative (expected a time in seconds >= 0)");
  expect_error("v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\ninf,1,1\n",
               "3: field 'arrived_at': 'inf' is not a number (expected a time in seconds)");
  expect_error("v.csv", "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n7564.0,192.5,7756.5,39.3\n",
               "2: field 'num_decode_tokens': '192.5' is not a whole number of tokens");
  expect_error(
      "k.csv", "arrival_s,prompt_tokens,output_tokens,prefix_hashes_16\n0,17,1,5 x\n",
      "2: field 'prefix_hashes_16': entry 1 'x' is not a 64-bit integer (entries are separated by single spaces)");
  expect_error("k.csv", "arrival_s,prompt_tokens,output_tokens,prefix_hashes_16\n0,17,1,5\n",
               "2: field 'prefix_hashes_16': has 1 entries, expected ceil(prompt_tokens / 16) = 2");
  // Trailing blank lines are fine.
  EXPECT_EQ(read_trace(write("ok.csv", h + r + "\n\r\n\n")).requests.size(), 1u);
}

TEST_F(TraceFiles, BadJsonLinesNameFileLineAndField) {
  const std::string good = "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]}\n";
  expect_error(
      "m.jsonl", good + "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2",
      "2: field 'hash_ids': malformed JSON at column 76: syntax error while parsing array - unexpected end of input; "
      "expected ']'");
  expect_error(
      "m.jsonl", good + "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]\n",
      "2: malformed JSON at column 77: syntax error while parsing object - unexpected end of input; expected '}'");
  expect_error(
      "m.jsonl", good + "{\"timestamp\": 0, \"input_length\": 600, \"output_len",
      "2: malformed JSON at column 50: syntax error while parsing object key - invalid string: missing closing quote; "
      "last read: '\"output_len'; expected string literal");
  expect_error("m.jsonl", good + "{\"timestamp\": 0, \"input_length\": 600, \"hash_ids\": [1, 2]}\n",
               "2: field 'output_length': missing");
  // A line of carriage returns is not blank to the line splitter (fuzz finding): one-line error.
  expect_error("m.jsonl", good + "\r\r\n" + good,
               "2: malformed JSON at column 1: expected a JSON object starting with '{', found only whitespace");
  expect_error("m.jsonl",
               good +
                   "{\"timestamp\": 0, \"input_length\": 600, \"input_length\": 6, \"output_length\": 5, \"hash_ids\": "
                   "[1, 2]}\n",
               "2: field 'input_length': duplicate key");
  expect_error("m.jsonl", good + "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1]}\n",
               "2: field 'hash_ids': has 1 entries, expected ceil(input_length / 512) = 2");
  expect_error("m.jsonl",
               good + "{\"timestamp\": 0, \"input_length\": \"600\", \"output_length\": 5, \"hash_ids\": [1, 2]}\n",
               "2: field 'input_length': expected a number, found a JSON string");
  expect_error("m.jsonl",
               good + "{\"timestamp\": 0, \"input_length\": -600, \"output_length\": 5, \"hash_ids\": [1, 2]}\n",
               "2: field 'input_length': '-600' is out of range (a token count must be 1..10000000)");
  expect_error("m.jsonl",
               good + "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2.5]}\n",
               "2: field 'hash_ids': malformed JSON at column 75: array element 1 is not an integer");
  expect_error("m.jsonl",
               good + "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2,]}\n",
               "2: field 'hash_ids': malformed JSON at column 77: syntax error while parsing value - unexpected ']'; "
               "expected '[', '{', or a literal");
  expect_error(
      "m.jsonl", good + "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]} x\n",
      "2: malformed JSON at column 79: syntax error while parsing value - invalid literal; last read: '2]} x'; "
      "expected end of input");
  expect_error("m.jsonl",
               good + "{\"timestamp\": 01, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]}\n",
               "2: field 'timestamp': malformed JSON at column 16: syntax error while parsing object - unexpected "
               "number literal; "
               "expected '}'");
  expect_error("m.jsonl", good + "[1, 2]\n",
               "2: malformed JSON at column 1: expected a JSON object starting with '{', found '['");
  expect_error("m.jsonl",
               "{\"timestamp\": 5, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]}\n" + good,
               "2: field 'timestamp': 0 ms is earlier than 5 ms on line 1 (Mooncake traces are in time order)");
  expect_error("m.jsonl", good + "\n" + good, "2: blank line inside the trace");
  std::string deep = "{\"timestamp\": 0, \"x\": ";
  for (int i = 0; i < 300; ++i) deep += "[";
  expect_error("m.jsonl", good + deep + "\n",
               "2: field 'x': malformed JSON at column 279: JSON nested deeper than 256 levels");

  const std::string sim =
      "{\"input_toks\": 3, \"output_toks\": 2, \"arrival_time_ns\": 5, \"input_tok_ids\": [1, 2]}\n";
  expect_error("s.jsonl", sim, "1: field 'input_tok_ids': has 2 entries, expected input_toks = 3");
  expect_error(
      "s.jsonl", "{\"input_toks\": 3, \"output_toks\": 2, \"arrival_time_ns\": 5, \"input_tok_ids\": [1, 2, -3]}\n",
      "1: field 'input_tok_ids': malformed JSON at column 83: array element 2 (-3) is out of range [0, 2147483647]");
  expect_error("s.jsonl",
               "{\"input_toks\": 1, \"output_toks\": 2, \"arrival_time_ns\": 5, \"output_tok_ids\": [1, 2, 3]}\n",
               "1: field 'output_tok_ids': has 3 entries, expected output_toks = 2");
  expect_error("s.jsonl", "{\"input_toks\": 1, \"output_toks\": 2, \"arrival_time_ns\": -5}\n",
               "1: field 'arrival_time_ns': '-5' is negative (expected a time in nanoseconds >= 0)");
  expect_error("s.jsonl", "{\"input_toks\": 1, \"output_toks\": 2}\n", "1: field 'arrival_time_ns': missing");
  expect_error("s.jsonl", "{\"input_toks\": 1, \"output_toks\": 2, \"arrival_time_ns\": 5, \"x\": tru}\n",
               "1: field 'x': malformed JSON at column 67: syntax error while parsing value - invalid literal; "
               "last read: '\"x\": tru}'");
  expect_error("s.jsonl", "{\"input_toks\": 1, \"output_toks\": 2, \"arrival_time_ns\": 5, \"x\": \"a\\qb\"}\n",
               "1: field 'x': malformed JSON at column 67: syntax error while parsing value - invalid string: "
               "forbidden character "
               "after backslash; last read: '\"a\\q'");
  expect_error("s.jsonl", "{\"input_toks\": 1, \"output_toks\": 2, \"arrival_time_ns\": 5,}\n",
               "1: malformed JSON at column 58: syntax error while parsing object key - unexpected '}'; expected "
               "string literal");
}

TEST_F(TraceFiles, JsonLinesSkipAnyUnknownValueAndCountOutputIdsAsTopLevelElements) {
  // output_tok_ids counts its top-level elements whatever they are; unknown keys hold any value.
  const auto p =
      write("s.jsonl",
            " {\"input_toks\": 1, \"output_toks\": 5, \"arrival_time_ns\": 0, "
            "\"output_tok_ids\": [1, [2, 3], {\"k\": [4]}, \"s\", null], \"b\": \"x\\ty\\u0041\", \"c\": [], "
            "\"d\": -0.5e-3, \"e\": {}, \"f\": [[], {\"g\": [true, false, -0]}]}\r\n");
  const Trace t = read_trace(p);
  ASSERT_EQ(t.requests.size(), 1u);
  EXPECT_EQ(t.requests[0].output_tokens, 5);
  // A negative zero is a time of 0; as a token count it is out of range, named as written.
  EXPECT_EQ(read_trace(write("z.jsonl", "{\"input_toks\": 1, \"output_toks\": 1, \"arrival_time_ns\": -0}\n"))
                .requests[0]
                .arrival_s,
            0.0);
  expect_error("z.jsonl", "{\"input_toks\": -0, \"output_toks\": 1, \"arrival_time_ns\": 0}\n",
               "1: field 'input_toks': '-0' is out of range (a token count must be 1..10000000)");
  expect_error("e.jsonl", " {} \n", "1: field 'input_toks': missing", TraceFormat::llmservingsim);
}

TEST_F(TraceFiles, JsonLinesRejectEveryMalformedValueWithOneLineNamingFileAndLine) {
  const std::string head = "{\"input_toks\": 1, \"output_toks\": 1, \"arrival_time_ns\": 0";
  for (const char* bad :
       {"", ", \"a\" 1}", ", \"a\": 1,", ", \"a\": [1 2]}", ", \"a\": \"\x01\"}", ", \"a\": 1.}", ", \"a\": -}",
        ", \"a\": \"\\ud800\"}", ", \"a\": {\"b\": 1,}}", ", \"a\": 12abc}", ", \"a\": 1e999}", "}}", "} {}"}) {
    SCOPED_TRACE(bad);
    try {
      (void)parse_trace(head + bad + "\n", "s.jsonl");
      ADD_FAILURE() << "accepted";
    } catch (const TraceError& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("s.jsonl:1: ", 0), 0u) << m;
      EXPECT_NE(m.find("malformed JSON at column "), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  // A number beyond double is the field's own problem when a field reads it.
  expect_error("s.jsonl", "{\"input_toks\": 1, \"output_toks\": 1e400, \"arrival_time_ns\": 0}\n",
               "1: field 'output_toks': '1e400' is not a number");
  expect_error("m.jsonl", "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1e400]}\n",
               "1: field 'hash_ids': malformed JSON at column 70: array element 0 is not an integer");
  expect_error("m.jsonl", "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [\"a\\\"b\"]}\n",
               "1: field 'hash_ids': malformed JSON at column 70: array element 0: expected an integer, found '\"'");
  expect_error("m.jsonl", "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [7, null]}\n",
               "1: field 'hash_ids': malformed JSON at column 73: array element 1: expected an integer, found 'n'");
  expect_error("m.jsonl", "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [[7]]}\n",
               "1: field 'hash_ids': malformed JSON at column 70: array element 0: expected an integer, found '['");
  expect_error(
      "m.jsonl",
      "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [-9223372036854775809]}\n",
      "1: field 'hash_ids': malformed JSON at column 70: array element 0 (-9223372036854775809) is out of range "
      "[-9223372036854775808, 9223372036854775807]");
}

TEST_F(TraceFiles, JsonLinesNestingIsCappedAt256LevelsWithoutRecursion) {
  const std::string head = "{\"input_toks\": 1, \"output_toks\": 1, \"arrival_time_ns\": 0, \"x\": ";
  const std::string ok = head + std::string(256, '[') + std::string(256, ']') + "}\n";
  EXPECT_EQ(parse_trace(ok, "s.jsonl").requests.size(), 1u);
  for (const std::size_t depth : {257, 100'000}) {
    const std::string deep = head + std::string(depth, '[') + "\n";
    try {
      (void)parse_trace(deep, "s.jsonl");
      ADD_FAILURE() << "accepted";
    } catch (const TraceError& e) {
      EXPECT_EQ(std::string(e.what()), "s.jsonl:1: field 'x': malformed JSON at column " +
                                           std::to_string(head.size() + 257) + ": JSON nested deeper than 256 levels");
    }
  }
}

TEST(TraceReader, MutatedInputIsReadOrRejectedWithATraceErrorNeverAnythingElse) {
  const std::string samples[] = {
      "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:17:03.9799600,4808,10\r\n2023-11-16 "
      "18:17:04.0319600,3180,8",
      "arrived_at,num_prefill_tokens,num_decode_tokens,pd_ratio\n0.0,7564.0,192,1.5\n0.5,10,100,0.1\n",
      "{\"timestamp\": 0, \"input_length\": 1025, \"output_length\": 5, \"hash_ids\": [0, 1, 2]}\n"
      "{\"timestamp\": 10, \"input_length\": 3, \"output_length\": 1, \"hash_ids\": [4], \"x\": {\"y\": [\"\\u00e9\", "
      "null]}}\n",
      "{\"input_toks\": 3, \"output_toks\": 2, \"arrival_time_ns\": 5, \"input_tok_ids\": [1, 2, 3], "
      "\"output_tok_ids\": [4, 5]}\n",
      "# c\narrival_s,prompt_tokens,output_tokens,prefix_hashes_16\n0,33,4,1 2 3\n0.125,16,1,1\n",
  };
  const char alphabet[] = "\"\\,[]{}:-.eE0159 \t\n\rxnu#";
  std::mt19937_64 rng(12345);
  int rejected = 0, accepted = 0;
  for (const std::string& good : samples) {
    ASSERT_NO_THROW((void)parse_trace(good, "good")) << good;
    for (int i = 0; i < 3000; ++i) {
      std::string text = good;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < edits && !text.empty(); ++k) {
        const std::size_t at = rng() % text.size();
        switch (rng() % 4) {
          case 0:
            text.resize(at);
            break;
          case 1:
            text.erase(at, 1);
            break;
          case 2:
            text[at] = alphabet[rng() % (sizeof alphabet - 1)];
            break;
          default:
            text.insert(at, 1, alphabet[rng() % (sizeof alphabet - 1)]);
            break;
        }
      }
      try {
        const Trace t = parse_trace(text, "fuzz");
        ++accepted;
        for (const Request& r : t.requests) {
          ASSERT_GE(r.prompt_tokens, 1);
          ASSERT_LE(r.prompt_tokens, kMaxTraceTokens);
          ASSERT_GE(r.output_tokens, 1);
          ASSERT_TRUE(std::isfinite(r.arrival_s) && r.arrival_s >= 0);
        }
      } catch (const TraceError& e) {
        ++rejected;
        ASSERT_EQ(std::string(e.what()).rfind("fuzz:", 0), 0u) << e.what();
        ASSERT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      } catch (const std::exception& e) {
        FAIL() << "not a TraceError: " << e.what() << "\ninput:\n" << text;
      }
    }
  }
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(accepted, 100);
}

// ------------------------------------------------------------------------------------------------
// The real public traces (../shared/traces; scripts/download_traces.sh fetches them).

fs::path shared_traces() { return fs::path(KVLAB_SOURCE_DIR) / ".." / "shared" / "traces"; }

TEST(RealTraces, EveryFileReadsFullyWithItsDocumentedRowCount) {
  const fs::path dir = shared_traces();
  if (!fs::is_directory(dir))
    GTEST_SKIP() << "no public traces in " << dir << " (scripts/download_traces.sh fetches them)";
  struct Expect {
    const char* file;
    TraceFormat format;
    std::int64_t rows;
  };
  const Expect files[] = {
      {"AzureLLMInferenceTrace_code.csv", TraceFormat::azure, 8819},
      {"AzureLLMInferenceTrace_conv.csv", TraceFormat::azure, 19366},
      {"splitwise_code.csv", TraceFormat::vidur, 8819},
      {"splitwise_conv.csv", TraceFormat::vidur, 19366},
      {"conversation_trace.jsonl", TraceFormat::mooncake, 12031},
      {"synthetic_trace.jsonl", TraceFormat::mooncake, 3993},
      {"arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv", TraceFormat::vidur, 28257},
      {"sharegpt_8k_filtered_stats_llama2_tokenizer.csv", TraceFormat::vidur, 30731},
      {"bwb_stats_llama2_tokenizer_filtered_v2.csv", TraceFormat::vidur, 33768},
      {"arxiv_long_offline.csv", TraceFormat::vidur, 427},
      {"arxiv_long_online.csv", TraceFormat::vidur, 10111},
      {"sync_vs_async_trace.csv", TraceFormat::vidur, 3965},
      {"arxiv_sample.csv", TraceFormat::vidur, 2895},
      {"sharegpt-llama-3.1-8b-300-sps10.jsonl", TraceFormat::llmservingsim, 300},
  };
  for (const Expect& e : files) {
    SCOPED_TRACE(e.file);
    const fs::path p = resolve_trace(e.file, dir);
    const auto t0 = std::chrono::steady_clock::now();
    const Trace t = read_trace(p);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "  " << t.info.describe() << " [" << ms << " ms]\n";
    EXPECT_EQ(t.info.format, e.format);
    EXPECT_EQ(t.info.rows, e.rows);
    ASSERT_EQ(static_cast<std::int64_t>(t.requests.size()), e.rows);
    EXPECT_TRUE(t.info.was_sorted);
    for (std::size_t i = 0; i < t.requests.size(); ++i) {
      const Request& r = t.requests[i];
      ASSERT_EQ(r.id, static_cast<std::int64_t>(i));
      ASSERT_GE(r.prompt_tokens, 1);
      ASSERT_GE(r.output_tokens, 1);
      if (i) {
        ASSERT_GE(r.arrival_s, t.requests[i - 1].arrival_s);
      }
      if (e.format == TraceFormat::mooncake) {
        ASSERT_EQ(r.prefix_hash_block, 512);
        ASSERT_EQ(static_cast<std::int64_t>(r.prefix_hashes.size()), (r.prompt_tokens + 511) / 512) << "row " << i;
      }
      if (e.format == TraceFormat::llmservingsim) {
        ASSERT_EQ(static_cast<std::int64_t>(r.prompt_token_ids.size()), r.prompt_tokens) << "row " << i;
      }
    }
    if (e.format == TraceFormat::llmservingsim) {
      EXPECT_LT(ms, 1000.0);
    }
  }
}

TEST(RealTraces, AzureAndItsVidurCopyAgreeRowByRow) {
  const fs::path dir = shared_traces();
  if (!fs::is_directory(dir))
    GTEST_SKIP() << "no public traces in " << dir << " (scripts/download_traces.sh fetches them)";
  for (const char* kind : {"code", "conv"}) {
    const Trace a = read_trace(dir / (std::string("AzureLLMInferenceTrace_") + kind + ".csv"));
    const Trace v = read_trace(dir / (std::string("splitwise_") + kind + ".csv"));
    ASSERT_EQ(a.requests.size(), v.requests.size());
    for (std::size_t i = 0; i < a.requests.size(); ++i) {
      ASSERT_EQ(a.requests[i].prompt_tokens, v.requests[i].prompt_tokens) << i;
      ASSERT_EQ(a.requests[i].output_tokens, v.requests[i].output_tokens) << i;
      ASSERT_NEAR(a.requests[i].arrival_s, v.requests[i].arrival_s, 1e-5) << i;
    }
  }
}

TEST(ResolveTrace, NonRegularFileIsNamedAsSuch) {
  // Regression (docs/bad-inputs.md TP-5): a device was reported as "trace not found".
  try {
    (void)resolve_trace("/dev/null");
    FAIL() << "no error";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.file(), "/dev/null");
    EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

// Requests that cannot fit are dropped before arrivals are drawn: the kept requests get the
// Poisson arrivals the whole rate would give them, and max_requests counts kept requests.
TEST(TraceFilter, TooLongRequestsGoBeforeArrivalsAreDrawn) {
  const std::string text =
      "# kvlab trace\narrival_s,prompt_tokens,output_tokens\n"
      "0,10,5\n"      // 14 tokens at the last step: kept
      "0,2000,100\n"  // 2099: dropped
      "0,16,1\n"      // 16: kept (exactly at the limit)
      "0,16,2\n"      // 17: dropped
      "0,3,1\n"       // 3: kept
      "0,7,9\n";      // 15: kept
  TraceOptions o;
  o.max_sequence_tokens = 16;
  o.poisson_rate = 2.0;
  o.seed = 11;
  o.max_requests = 3;
  const Trace f = parse_trace(text, "filter", o);
  EXPECT_EQ(f.info.too_long, 2);
  EXPECT_EQ(f.info.rows, 6);
  ASSERT_EQ(f.requests.size(), 3u);
  EXPECT_EQ(f.requests[0].prompt_tokens, 10);
  EXPECT_EQ(f.requests[1].prompt_tokens, 16);
  EXPECT_EQ(f.requests[2].prompt_tokens, 3);
  // The arrivals are those of the first three draws, as if the dropped rows never existed.
  TraceOptions plain;
  plain.poisson_rate = 2.0;
  plain.seed = 11;
  plain.max_requests = 3;
  const Trace g =
      parse_trace("# kvlab trace\narrival_s,prompt_tokens,output_tokens\n0,10,5\n0,16,1\n0,3,1\n", "kept", plain);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(f.requests[i].arrival_s, g.requests[i].arrival_s) << i;
  EXPECT_NE(f.info.describe().find("2 over the length limits dropped"), std::string::npos);
  o.max_sequence_tokens = -1;
  EXPECT_THROW((void)parse_trace(text, "filter", o), InvalidArgument);
}

// vLLM's benchmarks also drop prompts over a limit (1024 tokens for ShareGPT); both limits apply
// together, and a row over both counts once.
TEST(TraceFilter, LongPromptsGoBeforeArrivalsAreDrawnToo) {
  const std::string text =
      "# kvlab trace\narrival_s,prompt_tokens,output_tokens\n"
      "0,10,5\n"    // kept
      "0,12,1\n"    // prompt over 11: dropped
      "0,11,30\n"   // sequence over 32: dropped
      "0,40,40\n"   // over both: dropped once
      "0,11,22\n";  // 11 and 32, both at their limits: kept
  TraceOptions o;
  o.max_prompt_tokens = 11;
  const Trace p = parse_trace(text, "prompts", o);
  EXPECT_EQ(p.info.too_long, 2);  // the 12- and 40-token prompts
  o.max_sequence_tokens = 32;
  const Trace f = parse_trace(text, "both", o);
  EXPECT_EQ(f.info.too_long, 3);
  ASSERT_EQ(f.requests.size(), 2u);
  EXPECT_EQ(f.requests[0].prompt_tokens, 10);
  EXPECT_EQ(f.requests[1].output_tokens, 22);
  o.max_prompt_tokens = -1;
  EXPECT_THROW((void)parse_trace(text, "prompts", o), InvalidArgument);
}

}  // namespace
}  // namespace kvlab
