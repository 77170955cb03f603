// The CSV trace formats: Azure LLM inference (wall-clock TIMESTAMP), Vidur/Sarathi and kvlab's
// own (with optional prefix hashes). Each checks its header, then reads one row per line into
// Parsed (trace_formats.hpp); line handling and number parsing are shared (trace_text.hpp).
#include <charconv>
#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_set>
#include <sstream>
#include <utility>
#include <vector>

#include <date/date.h>

#include "serving/traces/trace_formats.hpp"
#include "serving/traces/trace_text.hpp"

namespace kvlab::trace_detail {

namespace {

/// A wall-clock instant: whole seconds since 1970-01-01 and nanoseconds within the second.
struct WallClock {
  std::int64_t seconds = 0;
  std::int64_t nanos = 0;
  friend auto operator<=>(const WallClock&, const WallClock&) = default;
  /// Seconds from `origin` to this instant.
  [[nodiscard]] double since(const WallClock& origin) const {
    return static_cast<double>(seconds - origin.seconds) + static_cast<double>(nanos - origin.nanos) * 1e-9;
  }
};

/// Why `text` is not "YYYY-MM-DD HH:MM:SS[.f...]" (1 to 9 fraction digits; 'T' may stand for the
/// space), naming the first character that does not fit; empty when it is in that form. The form is
/// checked here, character by character, because the error contract names the character; the value
/// is date::parse's (parse_wallclock).
std::string form_error(std::string_view text) {
  static constexpr std::string_view kForm = "dddd-dd-dd dd:dd:dd";
  if (text.size() < kForm.size()) return "too short";
  const auto digits = [&](std::size_t from, std::size_t to) -> std::string {
    for (std::size_t i = from; i < to; ++i)
      if (text[i] < '0' || text[i] > '9') return "digit expected at character " + std::to_string(i + 1);
    return {};
  };
  for (std::size_t i = 0; i < kForm.size(); ++i) {
    if (kForm[i] == 'd') {
      if (std::string e = digits(i, i + 1); !e.empty()) return e;
    } else if (text[i] != kForm[i] && !(i == 10 && text[i] == 'T')) {
      return std::string("'") + kForm[i] + "' expected at character " + std::to_string(i + 1);
    }
  }
  if (text.size() == kForm.size()) return {};
  if (text[19] != '.') return "'.' expected at character 20";
  if (text.size() < 21 || text.size() > 29) return "1 to 9 fraction digits expected";
  return digits(20, text.size());
}

/// "YYYY-MM-DD HH:MM:SS[.f...]" (1 to 9 fraction digits), parsed by Howard Hinnant's date library
/// (docs/dependencies.md) once its form is checked: the date into a calendar date (any four-digit
/// year: one time point in nanoseconds would overflow past 2262), the time of day into nanoseconds.
WallClock parse_wallclock(std::string_view text, const At& at, const std::string& field) {
  text = trim(text);
  const auto bad = [&](const std::string& why) {
    at.fail(field, quoted(text) + " is not a YYYY-MM-DD HH:MM:SS.fffffff time (" + why + ")");
  };
  if (std::string why = form_error(text); !why.empty()) bad(why);
  std::istringstream date_text{std::string(text.substr(0, 10))};
  date::year_month_day ymd{};
  date_text >> date::parse("%Y-%m-%d", ymd);
  if (date_text.fail()) bad("no such date");
  // date::parse reads a duration without bounding its fields (18:60:00 would be 19:00): bound them.
  const auto two = [&](std::size_t i) { return (text[i] - '0') * 10 + (text[i + 1] - '0'); };
  if (two(11) > 23 || two(14) > 59 || two(17) > 59) bad("no such time of day");
  std::istringstream time_text{std::string(text.substr(11))};
  std::chrono::nanoseconds time_of_day{};
  time_text >> date::parse("%H:%M:%S", time_of_day);
  if (time_text.fail() || time_text.peek() != std::char_traits<char>::eof()) bad("no such time of day");
  const auto whole = std::chrono::floor<std::chrono::seconds>(time_of_day);
  const std::int64_t days = date::sys_days(ymd).time_since_epoch().count();
  return WallClock{days * 86400 + whole.count(), (time_of_day - whole).count()};
}

// ---------------------------------------------------------------------------------------------

/// CSV header: column name -> index; duplicates are an error.
struct Header {
  std::vector<std::string> names;
  std::int64_t line = 0;
  std::string_view text;

  [[nodiscard]] int find(std::string_view name) const {
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) return static_cast<int>(i);
    }
    return -1;
  }
  int require(std::string_view name, const std::string& source, const char* format) const {
    const int i = find(name);
    if (i < 0) {
      throw TraceError(source, line, std::string(name),
                       std::string("missing column in the ") + format + " header " + quoted(text));
    }
    return i;
  }
};

Header read_header(Lines& lines, const std::string& source) {
  Header h;
  if (!lines.next(h.text, h.line)) throw TraceError(source, 1, "", "empty file (expected a CSV header)");
  h.names = split_csv(h.text, source, h.line);
  // One hash-set pass (linear in the header; a pairwise check took minutes on a megabyte header).
  std::unordered_set<std::string_view> seen;
  seen.reserve(h.names.size());
  for (const std::string_view name : h.names) {
    if (name.empty()) throw TraceError(source, h.line, "", "empty column name in the header " + quoted(h.text));
    if (!seen.insert(name).second)
      throw TraceError(source, h.line, std::string(name), "duplicate column in the header");
  }
  return h;
}

std::vector<std::string> row_fields(std::string_view line, const Header& h, const At& at) {
  auto f = split_csv(line, at.source, at.line);
  if (f.size() != h.names.size()) {
    at.fail("", "expected " + std::to_string(h.names.size()) + " comma-separated fields like the header, found " +
                    std::to_string(f.size()));
  }
  return f;
}

void no_rows(const Parsed& p, const Header& h, const std::string& source) {
  if (p.rows.empty()) throw TraceError(source, h.line, "", "header but no data rows");
}

constexpr std::string_view kKvlabColumns[] = {"arrival_s", "prompt_tokens", "output_tokens"};
constexpr std::string_view kKvlabHashPrefix = "prefix_hashes_";

}  // namespace

Parsed read_azure(std::string_view text, const std::string& source, const TraceOptions& /*options*/) {
  Lines lines(text, source, false);
  const Header h = read_header(lines, source);
  const int c_time = h.require("TIMESTAMP", source, "Azure");
  const int c_prompt = h.require("ContextTokens", source, "Azure");
  const int c_output = h.require("GeneratedTokens", source, "Azure");
  Parsed p;
  p.has_timestamps = true;
  std::string_view line;
  std::int64_t no = 0;
  WallClock first, prev;
  std::int64_t prev_line = 0;
  std::string prev_text;  // a copy: the row's fields go with it
  while (lines.next(line, no)) {
    const At at{source, no};
    const auto f = row_fields(line, h, at);
    const WallClock now = parse_wallclock(f[static_cast<std::size_t>(c_time)], at, "TIMESTAMP");
    if (p.rows.empty()) {
      first = now;
    } else if (now < prev) {
      at.fail("TIMESTAMP", quoted(std::string_view(f[static_cast<std::size_t>(c_time)])) + " is earlier than " +
                               quoted(std::string_view(prev_text)) + " on line " + std::to_string(prev_line) +
                               " (Azure traces are in time order)");
    }
    prev = now;
    prev_line = no;
    prev_text = f[static_cast<std::size_t>(c_time)];
    Row r;
    r.request.prompt_tokens = parse_tokens(f[static_cast<std::size_t>(c_prompt)], at, "ContextTokens");
    r.request.output_tokens = parse_tokens(f[static_cast<std::size_t>(c_output)], at, "GeneratedTokens");
    r.t = now.since(first);
    p.rows.push_back(std::move(r));
  }
  no_rows(p, h, source);
  return p;
}

Parsed read_vidur(std::string_view text, const std::string& source, const TraceOptions& /*options*/) {
  Lines lines(text, source, false);
  const Header h = read_header(lines, source);
  const int c_time = h.find("arrived_at");
  const int c_prompt = h.require("num_prefill_tokens", source, "Vidur");
  const int c_output = h.require("num_decode_tokens", source, "Vidur");
  Parsed p;
  p.has_timestamps = c_time >= 0;
  std::string_view line;
  std::int64_t no = 0;
  while (lines.next(line, no)) {
    const At at{source, no};
    const auto f = row_fields(line, h, at);
    Row r;
    if (c_time >= 0) r.t = parse_time(f[static_cast<std::size_t>(c_time)], at, "arrived_at", "seconds");
    r.request.prompt_tokens = parse_tokens(f[static_cast<std::size_t>(c_prompt)], at, "num_prefill_tokens");
    r.request.output_tokens = parse_tokens(f[static_cast<std::size_t>(c_output)], at, "num_decode_tokens");
    p.rows.push_back(std::move(r));
  }
  no_rows(p, h, source);
  return p;
}

Parsed read_kvlab(std::string_view text, const std::string& source, const TraceOptions& /*options*/) {
  Lines lines(text, source, true);
  const Header h = read_header(lines, source);
  const std::string expected =
      "expected the kvlab header 'arrival_s,prompt_tokens,output_tokens[,prefix_hashes_<B>]', found ";
  for (std::size_t i = 0; i < 3; ++i) {
    if (i >= h.names.size() || h.names[i] != kKvlabColumns[i]) {
      throw TraceError(source, h.line, std::string(kKvlabColumns[i]), expected + quoted(h.text));
    }
  }
  std::int32_t block = 0;
  if (h.names.size() > 4)
    throw TraceError(source, h.line, std::string(h.names[4]), "unexpected column; " + expected + quoted(h.text));
  if (h.names.size() == 4) {
    const std::string_view name = h.names[3];
    const std::string field(name);
    if (!name.starts_with(kKvlabHashPrefix))
      throw TraceError(source, h.line, field, "unexpected column; " + expected + quoted(h.text));
    const std::string_view b = name.substr(kKvlabHashPrefix.size());
    std::int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(b.data(), b.data() + b.size(), v);
    if (b.empty() || ptr != b.data() + b.size() || ec != std::errc() || v < 1 || v > kMaxTraceTokens) {
      throw TraceError(
          source, h.line, field,
          "the block size after 'prefix_hashes_' must be a whole number 1.." + std::to_string(kMaxTraceTokens));
    }
    block = static_cast<std::int32_t>(v);
  }
  Parsed p;
  p.has_timestamps = true;
  std::string_view line;
  std::int64_t no = 0;
  while (lines.next(line, no)) {
    const At at{source, no};
    const auto f = row_fields(line, h, at);
    Row r;
    r.t = parse_time(f[0], at, "arrival_s", "seconds");
    r.request.prompt_tokens = parse_tokens(f[1], at, "prompt_tokens");
    r.request.output_tokens = parse_tokens(f[2], at, "output_tokens");
    if (block > 0 && !f[3].empty()) {
      const std::string field(h.names[3]);
      std::string_view cell = f[3];
      std::size_t index = 0;
      while (!cell.empty()) {
        const std::size_t sp = cell.find(' ');
        const std::string_view item = cell.substr(0, sp);
        cell = sp == std::string_view::npos ? std::string_view() : cell.substr(sp + 1);
        std::int64_t v = 0;
        const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        if (item.empty() || ptr != item.data() + item.size() || ec != std::errc()) {
          at.fail(field, "entry " + std::to_string(index) + " " + quoted(item) +
                             " is not a 64-bit integer (entries are separated by single spaces)");
        }
        r.request.prefix_hashes.push_back(v);
        ++index;
      }
      const std::int64_t want = ceil_div(r.request.prompt_tokens, block);
      if (static_cast<std::int64_t>(r.request.prefix_hashes.size()) != want) {
        at.fail(field, "has " + std::to_string(r.request.prefix_hashes.size()) +
                           " entries, expected ceil(prompt_tokens / " + std::to_string(block) +
                           ") = " + std::to_string(want));
      }
      r.request.prefix_hash_block = block;
      p.has_prefix_hashes = true;
    }
    p.rows.push_back(std::move(r));
  }
  no_rows(p, h, source);
  return p;
}

}  // namespace kvlab::trace_detail
