#include "experiments/trace_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <compare>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "experiments/json_lines.hpp"

namespace kvlab {

namespace {
std::string error_text(const std::string& file, std::int64_t line, const std::string& field, const std::string& problem) {
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

// ---------------------------------------------------------------------------------------------
// Lines, fields and numbers.

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string shortest(double v) {
  char buf[64];
  const auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, p) : std::to_string(v);
}

bool blank(std::string_view s) { return trim(s).empty(); }

std::string quoted(std::string_view s) {
  constexpr std::size_t kMax = 80;
  if (s.size() > kMax) return "'" + std::string(s.substr(0, kMax)) + "...'";
  return "'" + std::string(s) + "'";
}

/// Iterates the physical lines of a text (LF or CRLF, last line with or without a newline) with
/// their 1-based numbers. Blank lines are only allowed at the end: next() throws at a blank line
/// that is followed by more text; `comments` additionally skips lines starting with '#'.
class Lines {
 public:
  Lines(std::string_view text, const std::string& source, bool comments)
      : text_(text), source_(source), comments_(comments) {
    if (text_.starts_with("\xEF\xBB\xBF")) text_.remove_prefix(3);  // UTF-8 byte-order mark
  }

  /// The next non-blank line; false at the end.
  bool next(std::string_view& line, std::int64_t& number) {
    std::int64_t first_blank = 0;
    while (pos_ < text_.size()) {
      std::size_t end = text_.find('\n', pos_);
      if (end == std::string_view::npos) end = text_.size();
      std::string_view l = text_.substr(pos_, end - pos_);
      pos_ = end + 1;
      ++line_;
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      if (blank(l)) {
        if (first_blank == 0) first_blank = line_;
        continue;
      }
      if (comments_ && l.front() == '#') continue;
      if (first_blank != 0) throw TraceError(source_, first_blank, "", "blank line inside the trace");
      line = l;
      number = line_;
      return true;
    }
    return false;
  }

 private:
  std::string_view text_;
  const std::string& source_;
  bool comments_;
  std::size_t pos_ = 0;
  std::int64_t line_ = 0;
};

std::vector<std::string_view> split_csv(std::string_view line) {
  std::vector<std::string_view> out;
  for (std::size_t pos = 0;;) {
    const std::size_t next = line.find(',', pos);
    out.push_back(trim(line.substr(pos, next - pos)));
    if (next == std::string_view::npos) return out;
    pos = next + 1;
  }
}

/// Where a value came from, for messages.
struct At {
  const std::string& source;
  std::int64_t line;
  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw TraceError(source, line, field, problem);
  }
};

/// A token count: an integer, or a number with no fractional part ("7564.0"), within
/// [1, kMaxTraceTokens].
std::int64_t parse_tokens(std::string_view text, const At& at, const std::string& field) {
  text = trim(text);
  if (text.empty()) at.fail(field, "empty value, expected a token count");
  const char* const b = text.data();
  const char* const e = b + text.size();
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(b, e, v);
  if (p != e || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    double d = 0;
    const auto [pd, ecd] = std::from_chars(b, e, d);
    if (pd != e || ecd != std::errc() || !std::isfinite(d)) at.fail(field, quoted(text) + " is not a number");
    if (d != std::floor(d)) at.fail(field, quoted(text) + " is not a whole number of tokens");
    if (std::fabs(d) > 1e18) {
      ec = std::errc::result_out_of_range;
    } else {
      v = static_cast<std::int64_t>(d);
      ec = std::errc();
    }
  }
  if (ec == std::errc::result_out_of_range || v < 1 || v > kMaxTraceTokens) {
    at.fail(field, quoted(text) + " is out of range (a token count must be 1.." + std::to_string(kMaxTraceTokens) + ")");
  }
  return v;
}

/// A finite number >= 0 (a time); `unit` names it in messages.
double parse_time(std::string_view text, const At& at, const std::string& field, const char* unit) {
  text = trim(text);
  if (text.empty()) at.fail(field, std::string("empty value, expected a time in ") + unit);
  double d = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
  if (p != text.data() + text.size() || ec != std::errc() || !std::isfinite(d)) {
    at.fail(field, quoted(text) + " is not a number (expected a time in " + unit + ")");
  }
  if (d < 0) at.fail(field, quoted(text) + " is negative (expected a time in " + unit + " >= 0)");
  return d;
}

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

/// "YYYY-MM-DD HH:MM:SS[.f...]" (1 to 9 fraction digits).
WallClock parse_wallclock(std::string_view text, const At& at, const std::string& field) {
  text = trim(text);
  const auto bad = [&](const std::string& why) {
    at.fail(field, quoted(text) + " is not a YYYY-MM-DD HH:MM:SS.fffffff time (" + why + ")");
  };
  const auto digits = [&](std::size_t at_pos, std::size_t n) -> int {
    int v = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const char c = text[at_pos + i];
      if (c < '0' || c > '9') bad("digit expected at character " + std::to_string(at_pos + i + 1));
      v = v * 10 + (c - '0');
    }
    return v;
  };
  if (text.size() < 19) bad("too short");
  const auto sep = [&](std::size_t i, char c) {
    if (text[i] != c) bad(std::string("'") + c + "' expected at character " + std::to_string(i + 1));
  };
  const int year = digits(0, 4);
  sep(4, '-');
  const int month = digits(5, 2);
  sep(7, '-');
  const int day = digits(8, 2);
  if (text[10] != ' ' && text[10] != 'T') bad("' ' expected at character 11");
  const int hour = digits(11, 2);
  sep(13, ':');
  const int minute = digits(14, 2);
  sep(16, ':');
  const int second = digits(17, 2);
  std::int64_t frac_ns = 0;
  if (text.size() > 19) {
    sep(19, '.');
    const std::size_t n = text.size() - 20;
    if (n < 1 || n > 9) bad("1 to 9 fraction digits expected");
    frac_ns = digits(20, n);
    for (std::size_t i = n; i < 9; ++i) frac_ns *= 10;
  }
  const std::chrono::year_month_day ymd{std::chrono::year(year), std::chrono::month(static_cast<unsigned>(month)),
                                        std::chrono::day(static_cast<unsigned>(day))};
  if (!ymd.ok()) bad("no such date");
  if (hour > 23 || minute > 59 || second > 59) bad("no such time of day");
  const std::int64_t days = std::chrono::sys_days(ymd).time_since_epoch().count();
  return WallClock{((days * 24 + hour) * 60 + minute) * 60 + second, frac_ns};
}

// ---------------------------------------------------------------------------------------------
// Readers: rows with trace times in seconds, before sorting, limits and scaling.

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

/// CSV header: column name -> index; duplicates are an error.
struct Header {
  std::vector<std::string_view> names;
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
  h.names = split_csv(h.text);
  for (std::size_t i = 0; i < h.names.size(); ++i) {
    if (h.names[i].empty()) throw TraceError(source, h.line, "", "empty column name in the header " + quoted(h.text));
    for (std::size_t j = 0; j < i; ++j) {
      if (h.names[i] == h.names[j]) throw TraceError(source, h.line, std::string(h.names[i]), "duplicate column in the header");
    }
  }
  return h;
}

std::vector<std::string_view> row_fields(std::string_view line, const Header& h, const At& at) {
  auto f = split_csv(line);
  if (f.size() != h.names.size()) {
    at.fail("", "expected " + std::to_string(h.names.size()) + " comma-separated fields like the header, found " +
                    std::to_string(f.size()));
  }
  return f;
}

void no_rows(const Parsed& p, const Header& h, const std::string& source) {
  if (p.rows.empty()) throw TraceError(source, h.line, "", "header but no data rows");
}

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
  std::string_view prev_text;
  while (lines.next(line, no)) {
    const At at{source, no};
    const auto f = row_fields(line, h, at);
    const WallClock now = parse_wallclock(f[static_cast<std::size_t>(c_time)], at, "TIMESTAMP");
    if (p.rows.empty()) {
      first = now;
    } else if (now < prev) {
      at.fail("TIMESTAMP", quoted(f[static_cast<std::size_t>(c_time)]) + " is earlier than " + quoted(prev_text) +
                               " on line " + std::to_string(prev_line) + " (Azure traces are in time order)");
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

constexpr std::string_view kKvlabColumns[] = {"arrival_s", "prompt_tokens", "output_tokens"};
constexpr std::string_view kKvlabHashPrefix = "prefix_hashes_";

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

Parsed read_kvlab(std::string_view text, const std::string& source, const TraceOptions& /*options*/) {
  Lines lines(text, source, true);
  const Header h = read_header(lines, source);
  const std::string expected = "expected the kvlab header 'arrival_s,prompt_tokens,output_tokens[,prefix_hashes_<B>]', found ";
  for (std::size_t i = 0; i < 3; ++i) {
    if (i >= h.names.size() || h.names[i] != kKvlabColumns[i]) {
      throw TraceError(source, h.line, std::string(kKvlabColumns[i]), expected + quoted(h.text));
    }
  }
  std::int32_t block = 0;
  if (h.names.size() > 4) throw TraceError(source, h.line, std::string(h.names[4]), "unexpected column; " + expected + quoted(h.text));
  if (h.names.size() == 4) {
    const std::string_view name = h.names[3];
    const std::string field(name);
    if (!name.starts_with(kKvlabHashPrefix)) throw TraceError(source, h.line, field, "unexpected column; " + expected + quoted(h.text));
    const std::string_view b = name.substr(kKvlabHashPrefix.size());
    std::int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(b.data(), b.data() + b.size(), v);
    if (b.empty() || ptr != b.data() + b.size() || ec != std::errc() || v < 1 || v > kMaxTraceTokens) {
      throw TraceError(source, h.line, field, "the block size after 'prefix_hashes_' must be a whole number 1.." +
                                                  std::to_string(kMaxTraceTokens));
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
        at.fail(field, "has " + std::to_string(r.request.prefix_hashes.size()) + " entries, expected ceil(prompt_tokens / " +
                           std::to_string(block) + ") = " + std::to_string(want));
      }
      r.request.prefix_hash_block = block;
      p.has_prefix_hashes = true;
    }
    p.rows.push_back(std::move(r));
  }
  no_rows(p, h, source);
  return p;
}

/// Reads the fields of JSON-lines traces; a SyntaxError becomes a TraceError naming the key whose
/// value was being read.
template <class OnKey>
void read_json_object(std::string_view line, const At& at, OnKey&& on_key) {
  std::string current;
  try {
    json::ObjectReader obj(line);
    while (const std::string* key = obj.next_key()) {
      current = *key;
      on_key(current, obj);
      current.clear();
    }
    obj.finish();
  } catch (const json::SyntaxError& e) {
    at.fail(current, "malformed JSON at column " + std::to_string(e.column()) + ": " + e.what());
  }
}

/// A JSON number that must be a token count; non-numbers name their kind.
std::int64_t json_tokens(json::ObjectReader& obj, const At& at, const std::string& key) {
  if (obj.peek_kind() != json::ObjectReader::Kind::number) {
    at.fail(key, "expected a number, found a JSON " + std::string(obj.peek_kind() == json::ObjectReader::Kind::string ? "string" : "non-number"));
  }
  return parse_tokens(obj.number(), at, key);
}

double json_time(json::ObjectReader& obj, const At& at, const std::string& key, const char* unit) {
  if (obj.peek_kind() != json::ObjectReader::Kind::number) {
    at.fail(key, "expected a number, found a JSON " + std::string(obj.peek_kind() == json::ObjectReader::Kind::string ? "string" : "non-number"));
  }
  return parse_time(obj.number(), at, key, unit);
}

void json_array(json::ObjectReader& obj, const At& at, const std::string& key) {
  if (obj.peek_kind() != json::ObjectReader::Kind::array) at.fail(key, "expected an array of integers");
}

/// Required keys seen once each.
struct Seen {
  std::vector<std::string_view> keys;
  std::vector<bool> seen;
  explicit Seen(std::initializer_list<std::string_view> k) : keys(k), seen(k.size(), false) {}
  /// Index of `key` among the known keys, or -1; a repeat is an error.
  int mark(const std::string& key, const At& at) {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) {
        if (seen[i]) at.fail(key, "duplicate key");
        seen[i] = true;
        return static_cast<int>(i);
      }
    }
    return -1;
  }
  void require(std::size_t count, const At& at) const {
    for (std::size_t i = 0; i < count; ++i) {
      if (!seen[i]) at.fail(std::string(keys[i]), "missing");
    }
  }
};

Parsed read_mooncake(std::string_view text, const std::string& source, const TraceOptions& /*options*/) {
  Lines lines(text, source, false);
  Parsed p;
  p.has_timestamps = true;
  p.has_prefix_hashes = true;
  std::string_view line;
  std::int64_t no = 0;
  double prev_ms = 0;
  std::int64_t prev_line = 0;
  while (lines.next(line, no)) {
    const At at{source, no};
    Row r;
    double ms = 0;
    Seen seen{"timestamp", "input_length", "output_length", "hash_ids"};
    read_json_object(line, at, [&](const std::string& key, json::ObjectReader& obj) {
      switch (seen.mark(key, at)) {
        case 0: ms = json_time(obj, at, key, "milliseconds"); break;
        case 1: r.request.prompt_tokens = json_tokens(obj, at, key); break;
        case 2: r.request.output_tokens = json_tokens(obj, at, key); break;
        case 3:
          json_array(obj, at, key);
          obj.int_array(r.request.prefix_hashes, std::numeric_limits<std::int64_t>::min(),
                        std::numeric_limits<std::int64_t>::max());
          break;
        default: (void)obj.skip_value(); break;
      }
    });
    seen.require(4, at);
    const std::int64_t want = ceil_div(r.request.prompt_tokens, kMooncakeHashBlock);
    if (static_cast<std::int64_t>(r.request.prefix_hashes.size()) != want) {
      at.fail("hash_ids", "has " + std::to_string(r.request.prefix_hashes.size()) + " entries, expected ceil(input_length / " +
                              std::to_string(kMooncakeHashBlock) + ") = " + std::to_string(want));
    }
    if (!p.rows.empty() && ms < prev_ms) {
      at.fail("timestamp", shortest(ms) + " ms is earlier than " + shortest(prev_ms) + " ms on line " + std::to_string(prev_line) +
                               " (Mooncake traces are in time order)");
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
  std::vector<std::int32_t> ids;
  while (lines.next(line, no)) {
    const At at{source, no};
    Row r;
    double ns = 0;
    std::int64_t output_ids = -1;
    bool has_ids = false;
    Seen seen{"input_toks", "output_toks", "arrival_time_ns", "input_tok_ids", "output_tok_ids"};
    read_json_object(line, at, [&](const std::string& key, json::ObjectReader& obj) {
      switch (seen.mark(key, at)) {
        case 0: r.request.prompt_tokens = json_tokens(obj, at, key); break;
        case 1: r.request.output_tokens = json_tokens(obj, at, key); break;
        case 2: ns = json_time(obj, at, key, "nanoseconds"); break;
        case 3:
          json_array(obj, at, key);
          obj.int_array(ids, 0, std::numeric_limits<std::int32_t>::max());
          has_ids = true;
          break;
        case 4:
          json_array(obj, at, key);
          output_ids = static_cast<std::int64_t>(obj.skip_value());
          break;
        default: (void)obj.skip_value(); break;
      }
    });
    seen.require(3, at);
    if (has_ids) {
      if (static_cast<std::int64_t>(ids.size()) != r.request.prompt_tokens) {
        at.fail("input_tok_ids", "has " + std::to_string(ids.size()) + " entries, expected input_toks = " +
                                     std::to_string(r.request.prompt_tokens));
      }
      if (options.keep_token_ids) {
        r.request.prompt_token_ids = ids;
        p.has_token_ids = true;
      }
    }
    if (output_ids >= 0 && output_ids != r.request.output_tokens) {
      at.fail("output_tok_ids", "has " + std::to_string(output_ids) + " entries, expected output_toks = " +
                                    std::to_string(r.request.output_tokens));
    }
    r.t = ns * 1e-9;
    p.rows.push_back(std::move(r));
  }
  if (p.rows.empty()) throw TraceError(source, 1, "", "empty file (expected one JSON object per line)");
  return p;
}

// ---------------------------------------------------------------------------------------------
// The formats: one row each. Detection tries the rows of the first line's syntax in table order;
// the first whose rule holds wins (a header with Azure's and Vidur's columns reads as Azure).

enum class Syntax { csv, json_lines };

/// What detection sees of the first line: its text (trimmed) and, for CSV, its column names.
struct FirstLine {
  std::string_view text;
  std::vector<std::string_view> columns;
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
     [](const FirstLine& f) { return !f.has_key("input_toks") && (f.has_key("hash_ids") || f.has_key("input_length")); },
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
  if (syntax == Syntax::csv) line.columns = split_csv(line.text);
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
    KVLAB_THROW(InvalidArgument, "trace start offset must be a finite number of seconds >= 0, got " +
                                     std::to_string(o.start_offset_s));
  }
  if (!(o.poisson_rate >= 0) || !std::isfinite(o.poisson_rate)) {
    KVLAB_THROW(InvalidArgument, "trace arrival rate must be a finite number >= 0, got " + std::to_string(o.poisson_rate));
  }
  if (o.max_requests < 0) {
    KVLAB_THROW(InvalidArgument, "trace request limit must be >= 0, got " + std::to_string(o.max_requests));
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
      throw TraceError(source, 0, "", "arrival time overflows after scaling (row " + std::to_string(r.request.id + 1) + ")");
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
  std::snprintf(buf, sizeof buf, " over %.1f s, mean prompt %.1f, mean output %.1f tokens", duration_s, mean_prompt_tokens,
                mean_output_tokens);
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
    if (fs::exists(c, ec)) throw TraceError(c.string(), 0, "", "is not a regular file (a device, pipe or socket), not a trace file");
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
