#include "serving/report/record_columns.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace kvlab {
namespace {

/// What printf's %.9g makes of `v`: the text steps.csv carried before the writer used to_chars.
std::string printf_g9(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(RecordColumns, DoublesAreWrittenAsPrintfsNineDigitsWould) {
  std::mt19937_64 rng(42);
  std::vector<StepRecord> steps;
  std::vector<double> values = {0.0,
                                -0.0,
                                1.0,
                                0.1,
                                1e-300,
                                5e-324,
                                123456789.0,
                                1234567890123.0,
                                1e300,
                                -2.5,
                                std::numeric_limits<double>::infinity(),
                                0.30000000000000004};
  std::uniform_real_distribution<double> unit(0, 1);
  std::uniform_int_distribution<int> exponent(-40, 40);
  for (int i = 0; i < 2000; ++i) values.push_back((unit(rng) - 0.5) * std::pow(10.0, exponent(rng)));
  for (double v : values) {
    StepRecord r;
    r.time_s = v;
    steps.push_back(r);
  }
  std::ostringstream out;
  write_csv_rows<StepRecord>(out, steps, step_columns());
  const std::vector<std::string> lines = split_lines(out.str());
  ASSERT_EQ(lines.size(), values.size() + 1);
  for (std::size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(lines[i + 1].substr(0, lines[i + 1].find(',')), printf_g9(values[i])) << values[i];
}

TEST(RecordColumns, HeadersAreTheSchemasColumnsEachOnce) {
  std::set<std::string> seen;
  for (const auto& c : step_columns()) EXPECT_TRUE(seen.insert(c.name).second) << c.name;
  EXPECT_EQ(seen.size(), 20U);
  seen.clear();
  for (const auto& c : request_columns()) EXPECT_TRUE(seen.insert(c.name).second) << c.name;
  EXPECT_EQ(seen.size(), 11U);
  // every column has the getter its type names, and only that one
  for (const auto& c : step_columns())
    EXPECT_EQ((c.f64 != nullptr) + (c.i64 != nullptr) + (c.text != nullptr), 1) << c.name;
  for (const auto& c : request_columns())
    EXPECT_EQ((c.f64 != nullptr) + (c.i64 != nullptr) + (c.text != nullptr), 1) << c.name;
}

TEST(RecordColumns, RequestsCarryStatusAndAQuotedReason) {
  RequestRecord done;
  done.id = 3;
  done.arrival_s = 0.5;
  done.prompt_tokens = 12;
  RequestRecord rejected = done;
  rejected.id = 4;
  rejected.status = RequestRecord::Status::rejected;
  rejected.reason = "longer than max_seq_len (4096), \"said\" so";
  RequestRecord truncated = done;
  truncated.status = RequestRecord::Status::truncated_completed;
  const std::vector<RequestRecord> rows = {done, rejected, truncated};
  std::ostringstream out;
  write_csv_rows<RequestRecord>(out, rows, request_columns());
  const std::vector<std::string> lines = split_lines(out.str());
  ASSERT_EQ(lines.size(), 4U);
  EXPECT_EQ(lines[0],
            "id,arrival_s,first_scheduled_s,first_token_s,finish_s,prompt_tokens,output_tokens,generated_tokens,"
            "preemptions,status,reason");
  EXPECT_EQ(lines[1], "3,0.5,-1,-1,-1,12,0,0,0,completed,");
  EXPECT_EQ(lines[2], "4,0.5,-1,-1,-1,12,0,0,0,rejected,\"longer than max_seq_len (4096), \"\"said\"\" so\"");
  EXPECT_EQ(lines[3], "3,0.5,-1,-1,-1,12,0,0,0,truncated,");
}

}  // namespace
}  // namespace kvlab
