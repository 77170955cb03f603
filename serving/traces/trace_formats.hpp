#pragma once
// What a per-format trace reader returns, and the readers themselves: rows with trace times in
// seconds, before the format-independent sorting, limits and scaling of parse_trace
// (trace_reader.cpp). Internal to the trace reader; the CSV formats are in
// trace_formats_csv.cpp, the JSON-lines ones in trace_formats_jsonl.cpp.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "serving/traces/trace_reader.hpp"
#include "serving/traces/workload.hpp"

namespace kvlab::trace_detail {

struct Row {
  Request request;
  double t = 0;  // trace time, seconds since the trace's origin
};

struct Parsed {
  std::vector<Row> rows;
  bool has_timestamps = false;
  bool has_prefix_hashes = false;
  bool has_token_ids = false;
};

/// ceil(a / b) for a, b > 0: how many prefix-hash blocks of b tokens a prompt of a tokens fills.
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Each reads a whole file's text; `source` names it in TraceErrors.
Parsed read_azure(std::string_view text, const std::string& source, const TraceOptions& options);
Parsed read_vidur(std::string_view text, const std::string& source, const TraceOptions& options);
Parsed read_kvlab(std::string_view text, const std::string& source, const TraceOptions& options);
Parsed read_mooncake(std::string_view text, const std::string& source, const TraceOptions& options);
Parsed read_llmservingsim(std::string_view text, const std::string& source, const TraceOptions& options);

}  // namespace kvlab::trace_detail
