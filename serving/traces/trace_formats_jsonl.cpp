// The JSON-lines trace formats, Mooncake (with prefix hash ids) and LLMServingSim (with prompt
// token ids): each names its keys in a JsonField table for read_json_line (json_line_reader.hpp)
// and checks what the keys say together (array lengths, time order) into Parsed
// (trace_formats.hpp).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "serving/traces/json_line_reader.hpp"
#include "serving/traces/trace_formats.hpp"
#include "serving/traces/trace_text.hpp"

namespace kvlab::trace_detail {

namespace {

constexpr JsonField kMooncakeFields[] = {
    {JsonField::time, "timestamp", true, "milliseconds"},
    {JsonField::tokens, "input_length", true},
    {JsonField::tokens, "output_length", true},
    {JsonField::int64s, "hash_ids", true},
};

constexpr JsonField kServingSimFields[] = {
    {JsonField::tokens, "input_toks", true},
    {JsonField::tokens, "output_toks", true},
    {JsonField::time, "arrival_time_ns", true, "nanoseconds"},
    {JsonField::int32s, "input_tok_ids", false},
    {JsonField::counted, "output_tok_ids", false},
};

}  // namespace

Parsed read_mooncake(std::string_view text, const std::string& source, const TraceOptions& /*options*/) {
  Lines lines(text, source, false);
  Parsed p;
  p.has_timestamps = true;
  p.has_prefix_hashes = true;
  std::string_view line;
  std::int64_t no = 0;
  double prev_ms = 0;
  std::int64_t prev_line = 0;
  JsonValues v;
  while (lines.next(line, no)) {
    const At at{source, no};
    read_json_line(line, at, kMooncakeFields, v);
    Row r;
    const double ms = v.time[0];
    r.request.prompt_tokens = v.integer[1];
    r.request.output_tokens = v.integer[2];
    r.request.prefix_hashes = v.int64s;  // a copy of the exact size; v keeps its capacity for the next line
    const std::int64_t want = ceil_div(r.request.prompt_tokens, kMooncakeHashBlock);
    if (static_cast<std::int64_t>(r.request.prefix_hashes.size()) != want) {
      at.fail("hash_ids", fmt::format("has {} entries, expected ceil(input_length / {}) = {}",
                                      r.request.prefix_hashes.size(), kMooncakeHashBlock, want));
    }
    if (!p.rows.empty() && ms < prev_ms) {
      at.fail("timestamp", fmt::format("{} ms is earlier than {} ms on line {} (Mooncake traces are in time order)",
                                       shortest(ms), shortest(prev_ms), prev_line));
    }
    prev_ms = ms;
    prev_line = no;
    r.request.prefix_hash_block = kMooncakeHashBlock;
    r.t = ms * 1e-3;
    p.rows.push_back(std::move(r));
  }
  if (p.rows.empty()) throw TraceError(source, 1, "", "empty file (expected one JSON object per line)");
  return p;
}

Parsed read_llmservingsim(std::string_view text, const std::string& source, const TraceOptions& options) {
  Lines lines(text, source, false);
  Parsed p;
  p.has_timestamps = true;
  std::string_view line;
  std::int64_t no = 0;
  JsonValues v;
  while (lines.next(line, no)) {
    const At at{source, no};
    read_json_line(line, at, kServingSimFields, v);
    Row r;
    r.request.prompt_tokens = v.integer[0];
    r.request.output_tokens = v.integer[1];
    if (v.seen[3]) {
      if (static_cast<std::int64_t>(v.int32s.size()) != r.request.prompt_tokens) {
        at.fail("input_tok_ids",
                fmt::format("has {} entries, expected input_toks = {}", v.int32s.size(), r.request.prompt_tokens));
      }
      if (options.keep_token_ids) {
        r.request.prompt_token_ids = v.int32s;
        p.has_token_ids = true;
      }
    }
    if (v.seen[4] && v.integer[4] != r.request.output_tokens) {
      at.fail("output_tok_ids",
              fmt::format("has {} entries, expected output_toks = {}", v.integer[4], r.request.output_tokens));
    }
    r.t = v.time[2] * 1e-9;
    p.rows.push_back(std::move(r));
  }
  if (p.rows.empty()) throw TraceError(source, 1, "", "empty file (expected one JSON object per line)");
  return p;
}

}  // namespace kvlab::trace_detail
