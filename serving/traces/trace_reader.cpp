// The trace reader's public API (trace_reader.hpp): TraceError, the table of formats with their
// detection rules, and what every format shares after its reader ran (sorting, limits, Poisson
// arrivals, scaling); also finding a trace file and writing kvlab's format. The readers are in
// trace_formats_csv.cpp and trace_formats_jsonl.cpp.
#include "serving/traces/trace_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "serving/traces/trace_formats.hpp"
#include "serving/traces/trace_text.hpp"

namespace kvlab {

namespace {
std::string error_text(const std::string& file, std::int64_t line, const std::string& field,
                       const std::string& problem) {
  std::string s = file;
  if (line > 0) s += ":" + std::to_string(line);
  s += ": ";
  if (!field.empty()) s += "field '" + field + "': ";
  s += problem;
  // One line, whatever the input held.
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}
}  // namespace

TraceError::TraceError(std::string file, std::int64_t line, std::string field, std::string problem)
    : InvalidArgument(error_text(file, line, field, problem)),
      file_(std::move(file)),
      line_(line),
      field_(std::move(field)),
      problem_(std::move(problem)) {}

namespace {

using trace_detail::Lines;
using trace_detail::Parsed;
using trace_detail::quoted;
using trace_detail::read_azure;
using trace_detail::read_kvlab;
using trace_detail::read_llmservingsim;
using trace_detail::read_mooncake;
using trace_detail::read_vidur;
using trace_detail::Row;
using trace_detail::split_csv;
using trace_detail::trim;

// ---------------------------------------------------------------------------------------------
// The formats: one row each. Detection tries the rows of the first line's syntax in table order;
// the first whose rule holds wins (a header with Azure's and Vidur's columns reads as Azure).

enum class Syntax { csv, json_lines };

/// What detection sees of the first line: its text (trimmed) and, for CSV, its column names.
struct FirstLine {
  std::string_view text;
  std::vector<std::string> columns;
  [[nodiscard]] bool has_column(std::string_view name) const {
    return std::find(columns.begin(), columns.end(), name) != columns.end();
  }
  [[nodiscard]] bool has_key(std::string_view key) const {
    return text.find(fmt::format("\"{}\"", key)) != std::string_view::npos;
  }
};

struct FormatRow {
  TraceFormat format;
  std::string_view name;  ///< as --trace-format takes it
  Syntax syntax;
  bool (*detects)(const FirstLine& first);
  Parsed (*read)(std::string_view text, const std::string& source, const TraceOptions& options);
};

constexpr FormatRow kFormats[] = {
    {TraceFormat::azure, "azure", Syntax::csv,
     [](const FirstLine& f) { return f.has_column("TIMESTAMP") && f.has_column("ContextTokens"); }, read_azure},
    {TraceFormat::vidur, "vidur", Syntax::csv, [](const FirstLine& f) { return f.has_column("num_prefill_tokens"); },
     read_vidur},
    {TraceFormat::mooncake, "mooncake", Syntax::json_lines,
     [](const FirstLine& f) {
       return !f.has_key("input_toks") && (f.has_key("hash_ids") || f.has_key("input_length"));
     },
     read_mooncake},
    {TraceFormat::llmservingsim, "llmservingsim", Syntax::json_lines,
     [](const FirstLine& f) { return f.has_key("input_toks"); }, read_llmservingsim},
    {TraceFormat::kvlab, "kvlab", Syntax::csv, [](const FirstLine& f) { return f.columns.front() == "arrival_s"; },
     read_kvlab},
};

const FormatRow& row_of(TraceFormat format) {
  for (const FormatRow& r : kFormats)
    if (r.format == format) return r;
  KVLAB_THROW(InvalidArgument, "trace format 'auto' has no reader: detect the format first");
}

}  // namespace

TraceFormat parse_trace_format(std::string_view name) {
  if (name == "auto") return TraceFormat::auto_detect;
  std::vector<std::string_view> names = {"auto"};
  for (const FormatRow& r : kFormats) {
    if (r.name == name) return r.format;
    names.push_back(r.name);
  }
  const std::vector<std::string_view> all_but_last(names.begin(), names.end() - 1);
  KVLAB_THROW(InvalidArgument, fmt::format("unknown trace format '{}' (expected {} or {})", name,
                                           fmt::join(all_but_last, ", "), names.back()));
}

std::string_view to_string(TraceFormat format) {
  if (format == TraceFormat::auto_detect) return "auto";
  return row_of(format).name;
}

TraceFormat detect_trace_format(std::string_view text, const std::string& source) {
  Lines lines(text, source, true);
  std::string_view first;
  std::int64_t no = 0;
  if (!lines.next(first, no)) throw TraceError(source, 1, "", "empty file");
  FirstLine line{trim(first), {}};
  const Syntax syntax = line.text.front() == '{' ? Syntax::json_lines : Syntax::csv;
  if (syntax == Syntax::csv) line.columns = split_csv(line.text, source, no);
  for (const FormatRow& r : kFormats)
    if (r.syntax == syntax && r.detects(line)) return r.format;
  if (syntax == Syntax::json_lines) {
    throw TraceError(source, no, "",
                     "cannot tell the trace format: a JSON object with neither 'input_length' (Mooncake) nor "
                     "'input_toks' (LLMServingSim); pass the format explicitly");
  }
  throw TraceError(source, no, "",
                   "cannot tell the trace format from the first line " + quoted(line.text) +
                       " (expected an Azure, Vidur or kvlab CSV header or a Mooncake or LLMServingSim JSON object); "
                       "pass the format explicitly");
}

Trace parse_trace(std::string_view text, const std::string& source, const TraceOptions& o) {
  if (!(o.time_scale > 0) || !std::isfinite(o.time_scale)) {
    KVLAB_THROW(InvalidArgument, "trace time scale must be a finite number > 0, got " + std::to_string(o.time_scale));
  }
  if (!(o.start_offset_s >= 0) || !std::isfinite(o.start_offset_s)) {
    KVLAB_THROW(InvalidArgument,
                "trace start offset must be a finite number of seconds >= 0, got " + std::to_string(o.start_offset_s));
  }
  if (!(o.poisson_rate >= 0) || !std::isfinite(o.poisson_rate)) {
    KVLAB_THROW(InvalidArgument,
                "trace arrival rate must be a finite number >= 0, got " + std::to_string(o.poisson_rate));
  }
  if (o.max_requests < 0) {
    KVLAB_THROW(InvalidArgument, "trace request limit must be >= 0, got " + std::to_string(o.max_requests));
  }
  if (o.max_sequence_tokens < 0) {
    KVLAB_THROW(InvalidArgument,
                "trace sequence length limit must be >= 0, got " + std::to_string(o.max_sequence_tokens));
  }
  if (o.max_prompt_tokens < 0) {
    KVLAB_THROW(InvalidArgument, "trace prompt length limit must be >= 0, got " + std::to_string(o.max_prompt_tokens));
  }

  const TraceFormat format = o.format == TraceFormat::auto_detect ? detect_trace_format(text, source) : o.format;
  Parsed p = row_of(format).read(text, source, o);

  Trace out;
  TraceInfo& info = out.info;
  info.source = source;
  info.format = format;
  info.rows = static_cast<std::int64_t>(p.rows.size());
  info.has_timestamps = p.has_timestamps;
  for (std::size_t i = 0; i < p.rows.size(); ++i) p.rows[i].request.id = static_cast<std::int64_t>(i);
  const auto earlier = [](const Row& a, const Row& b) { return a.t < b.t; };
  info.was_sorted = std::is_sorted(p.rows.begin(), p.rows.end(), earlier);
  if (!info.was_sorted) std::stable_sort(p.rows.begin(), p.rows.end(), earlier);
  if (o.max_sequence_tokens > 0 || o.max_prompt_tokens > 0) {
    const auto too_long = [&](const Row& r) {
      const bool sequence =
          o.max_sequence_tokens > 0 &&
          r.request.prompt_tokens + std::max<std::int64_t>(r.request.output_tokens, 1) - 1 > o.max_sequence_tokens;
      return sequence || (o.max_prompt_tokens > 0 && r.request.prompt_tokens > o.max_prompt_tokens);
    };
    const auto kept = std::stable_partition(p.rows.begin(), p.rows.end(), [&](const Row& r) { return !too_long(r); });
    info.too_long = static_cast<std::int64_t>(p.rows.end() - kept);
    p.rows.erase(kept, p.rows.end());
  }
  if (o.max_requests > 0 && static_cast<std::int64_t>(p.rows.size()) > o.max_requests) {
    p.rows.resize(static_cast<std::size_t>(o.max_requests));
  }
  if (o.poisson_rate > 0) {
    std::mt19937_64 rng(o.seed);
    std::exponential_distribution<double> gap(o.poisson_rate);
    double t = 0;
    for (std::size_t i = 0; i < p.rows.size(); ++i) {
      if (i > 0) t += gap(rng);
      p.rows[i].t = t;
    }
  }
  out.requests.reserve(p.rows.size());
  double prompt_sum = 0, output_sum = 0;
  for (Row& r : p.rows) {
    r.request.arrival_s = o.start_offset_s + o.time_scale * r.t;
    if (!std::isfinite(r.request.arrival_s)) {
      throw TraceError(source, 0, "",
                       "arrival time overflows after scaling (row " + std::to_string(r.request.id + 1) + ")");
    }
    prompt_sum += static_cast<double>(r.request.prompt_tokens);
    output_sum += static_cast<double>(r.request.output_tokens);
    info.has_prefix_hashes = info.has_prefix_hashes || !r.request.prefix_hashes.empty();
    info.has_token_ids = info.has_token_ids || !r.request.prompt_token_ids.empty();
    out.requests.push_back(std::move(r.request));
  }
  info.requests = static_cast<std::int64_t>(out.requests.size());
  if (!out.requests.empty()) {
    info.duration_s = out.requests.back().arrival_s - out.requests.front().arrival_s;
    info.mean_prompt_tokens = prompt_sum / static_cast<double>(out.requests.size());
    info.mean_output_tokens = output_sum / static_cast<double>(out.requests.size());
  }
  return out;
}

Trace read_trace(const std::filesystem::path& file, const TraceOptions& options) {
  const std::string source = file.string();
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) throw TraceError(source, 0, "", "is a directory, not a trace file");
  std::FILE* f = std::fopen(source.c_str(), "rb");
  if (!f) throw TraceError(source, 0, "", std::string("cannot open: ") + std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f);
    text.append(buf, n);
    if (n < sizeof buf) break;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw TraceError(source, 0, "", "read error");
  return parse_trace(text, source, options);
}

std::string TraceInfo::describe() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s trace %s: %lld requests", std::string(to_string(format)).c_str(), source.c_str(),
                static_cast<long long>(requests));
  std::string s = buf;
  if (requests != rows) s += " (of " + std::to_string(rows) + " rows)";
  if (too_long > 0) s += ", " + std::to_string(too_long) + " over the length limits dropped";
  std::snprintf(buf, sizeof buf, " over %.1f s, mean prompt %.1f, mean output %.1f tokens", duration_s,
                mean_prompt_tokens, mean_output_tokens);
  s += buf;
  if (!has_timestamps) s += ", no timestamps in the file";
  if (has_prefix_hashes) s += ", prefix hashes";
  if (has_token_ids) s += ", prompt token ids";
  if (!was_sorted) s += ", re-sorted by arrival";
  return s;
}

std::filesystem::path default_trace_dir() {
  if (const char* env = std::getenv("KVLAB_TRACE_DIR"); env != nullptr && *env != '\0') return env;
  return (std::filesystem::path(KVLAB_SOURCE_DIR) / ".." / "shared" / "traces").lexically_normal();
}

std::filesystem::path resolve_trace(const std::string& name_or_path, const std::filesystem::path& trace_dir) {
  namespace fs = std::filesystem;
  if (name_or_path.empty()) throw TraceError("(trace)", 0, "", "empty trace name");
  const fs::path given(name_or_path);
  std::vector<fs::path> candidates;
  if (given.has_parent_path() || given.is_absolute()) {
    candidates.push_back(given);
  } else {
    candidates.push_back(trace_dir / given);
    candidates.push_back(given);
  }
  std::error_code ec;
  for (const fs::path& c : candidates) {
    if (fs::is_regular_file(c, ec)) return c;
    if (fs::is_directory(c, ec)) throw TraceError(c.string(), 0, "", "is a directory, not a trace file");
    if (fs::exists(c, ec))
      throw TraceError(c.string(), 0, "", "is not a regular file (a device, pipe or socket), not a trace file");
  }
  std::string where = candidates.front().string();
  if (candidates.size() > 1) where += " or ./" + name_or_path;
  throw TraceError(name_or_path, 0, "",
                   "trace not found (looked for " + where + "; the trace directory is $KVLAB_TRACE_DIR or " +
                       "<source>/../shared/traces); scripts/download_traces.sh [DIR] fetches the public traces");
}

void write_kvlab_trace(std::ostream& out, const std::vector<Request>& requests) {
  std::int32_t block = 0;
  for (const Request& r : requests) {
    if (r.prefix_hashes.empty()) continue;
    KVLAB_EXPECTS(r.prefix_hash_block > 0, "a request with prefix hashes needs prefix_hash_block > 0");
    KVLAB_EXPECTS(block == 0 || block == r.prefix_hash_block, "all prefix hashes must share one block size");
    block = r.prefix_hash_block;
  }
  out << "arrival_s,prompt_tokens,output_tokens";
  if (block > 0) out << ",prefix_hashes_" << block;
  out << '\n';
  char buf[64];
  for (const Request& r : requests) {
    const auto [p, ec] = std::to_chars(buf, buf + sizeof buf, r.arrival_s);
    KVLAB_ASSERT(ec == std::errc());
    out.write(buf, p - buf);
    out << ',' << r.prompt_tokens << ',' << r.output_tokens;
    if (block > 0) {
      out << ',';
      for (std::size_t i = 0; i < r.prefix_hashes.size(); ++i) {
        if (i) out << ' ';
        out << r.prefix_hashes[i];
      }
    }
    out << '\n';
  }
}

}  // namespace kvlab
