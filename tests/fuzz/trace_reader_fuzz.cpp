// libFuzzer target: feeds the input bytes to kvlab::parse_trace as every format and as auto.
// A malformed trace must throw kvlab::TraceError (one line, naming the source) or
// kvlab::InvalidArgument; anything else escaping, a crash, a hang or a leak is a finding.
// What parses must satisfy the documented guarantees (docs/traces.md): requests sorted by
// arrival, token counts in 1..kMaxTraceTokens, ids are the file's data rows, prefix hashes and
// token ids sized as the format says, and write_kvlab_trace + parse_trace round-trip exactly.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "alloc/core/error.hpp"
#include "serving/traces/trace_reader.hpp"

namespace {

using namespace kvlab;

const std::string kSource = "fuzz.trace";

[[noreturn]] void fail(TraceFormat f, const std::string& what) {
  std::fprintf(stderr, "trace_reader_fuzz [format %s]: %s\n", std::string(to_string(f)).c_str(), what.c_str());
  std::fflush(stderr);
  std::abort();
}

void check_trace(const Trace& t, TraceFormat asked, const TraceOptions& o) {
  const TraceInfo& info = t.info;
  if (info.source != kSource) fail(asked, "info.source differs");
  if (asked != TraceFormat::auto_detect && info.format != asked) fail(asked, "read as another format");
  if (info.format == TraceFormat::auto_detect) fail(asked, "info.format is auto");
  if (info.requests != static_cast<std::int64_t>(t.requests.size())) fail(asked, "info.requests != requests.size()");
  if (info.rows < info.requests || info.rows < 1) fail(asked, "info.rows inconsistent");
  if (o.max_requests > 0 && info.requests > o.max_requests) fail(asked, "more requests than max_requests");
  std::vector<bool> seen(static_cast<std::size_t>(info.rows), false);
  double prev = -1;
  for (const Request& r : t.requests) {
    if (!(r.arrival_s >= 0) || !std::isfinite(r.arrival_s)) fail(asked, "arrival not finite and >= 0");
    if (r.arrival_s < prev) fail(asked, "requests not sorted by arrival");
    prev = r.arrival_s;
    if (r.prompt_tokens < 1 || r.prompt_tokens > kMaxTraceTokens) fail(asked, "prompt tokens out of range");
    if (r.output_tokens < 1 || r.output_tokens > kMaxTraceTokens) fail(asked, "output tokens out of range");
    if (r.id < 0 || r.id >= info.rows || seen[static_cast<std::size_t>(r.id)])
      fail(asked, "request ids not distinct rows");
    seen[static_cast<std::size_t>(r.id)] = true;
    if (!r.prefix_hashes.empty()) {
      if (r.prefix_hash_block < 1) fail(asked, "prefix hashes without a block size");
      const std::int64_t want = (r.prompt_tokens + r.prefix_hash_block - 1) / r.prefix_hash_block;
      if (static_cast<std::int64_t>(r.prefix_hashes.size()) != want)
        fail(asked, "prefix hash count != ceil(prompt / block)");
    }
    if (!r.prompt_token_ids.empty() && static_cast<std::int64_t>(r.prompt_token_ids.size()) != r.prompt_tokens) {
      fail(asked, "prompt token id count != prompt tokens");
    }
    for (std::int32_t id : r.prompt_token_ids) {
      if (id < 0) fail(asked, "negative token id");
    }
  }
  if (!t.requests.empty() && info.duration_s != t.requests.back().arrival_s - t.requests.front().arrival_s) {
    fail(asked, "duration differs from last - first arrival");
  }
  const std::string d = info.describe();
  if (d.find('\n') != std::string::npos) fail(asked, "describe() is more than one line");
}

/// write_kvlab_trace + parse_trace gives the same requests (arrival bit for bit).
void check_round_trip(const Trace& t, TraceFormat asked) {
  std::int32_t block = 0;
  for (const Request& r : t.requests) {
    if (r.prefix_hashes.empty()) continue;
    if (block != 0 && block != r.prefix_hash_block) return;  // write_kvlab_trace needs one block size
    block = r.prefix_hash_block;
  }
  std::ostringstream out;
  write_kvlab_trace(out, t.requests);
  TraceOptions o;
  o.format = TraceFormat::kvlab;
  Trace back;
  try {
    back = parse_trace(out.str(), "round-trip", o);
  } catch (const std::exception& e) {
    fail(asked, std::string("the kvlab trace written from a parsed trace does not read back: ") + e.what());
  }
  if (back.requests.size() != t.requests.size()) fail(asked, "round trip changed the number of requests");
  for (std::size_t i = 0; i < t.requests.size(); ++i) {
    const Request& a = t.requests[i];
    const Request& b = back.requests[i];
    if (a.arrival_s != b.arrival_s || a.prompt_tokens != b.prompt_tokens || a.output_tokens != b.output_tokens ||
        a.prefix_hashes != b.prefix_hashes ||
        (!a.prefix_hashes.empty() && a.prefix_hash_block != b.prefix_hash_block)) {
      fail(asked, "round trip through the kvlab format changed request " + std::to_string(i));
    }
  }
}

void one(std::string_view text, TraceFormat format, const TraceOptions& base) {
  TraceOptions o = base;
  o.format = format;
  try {
    const Trace t = parse_trace(text, kSource, o);
    check_trace(t, format, o);
    check_round_trip(t, format);
  } catch (const TraceError& e) {
    const std::string w = e.what();
    if (w.empty() || w.find('\n') != std::string::npos || w.find('\r') != std::string::npos) {
      fail(format, "TraceError message is not one line: " + w);
    }
    if (w.rfind(kSource, 0) != 0) fail(format, "TraceError does not start with the source: " + w);
    if (e.file() != kSource) fail(format, "TraceError::file() differs from the source");
  } catch (const InvalidArgument&) {
    // bad options (not generated here except through detection); fine
  } catch (const std::exception& e) {
    fail(format, std::string("unexpected exception: ") + e.what());
  } catch (...) {
    fail(format, "non-std exception");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  TraceOptions o;
  for (TraceFormat f : {TraceFormat::auto_detect, TraceFormat::azure, TraceFormat::vidur, TraceFormat::mooncake,
                        TraceFormat::llmservingsim, TraceFormat::kvlab}) {
    one(text, f, o);
  }
  // The options paths once more on auto: a limit, a scale and Poisson arrivals.
  o.max_requests = 2;
  o.time_scale = 0.5;
  o.start_offset_s = 1.0;
  one(text, TraceFormat::auto_detect, o);
  o.poisson_rate = 3.0;
  o.seed = size;
  one(text, TraceFormat::auto_detect, o);
  try {
    (void)detect_trace_format(text, kSource);
  } catch (const TraceError&) {
  } catch (const std::exception& e) {
    fail(TraceFormat::auto_detect, std::string("detect_trace_format: unexpected exception: ") + e.what());
  }
  return 0;
}
