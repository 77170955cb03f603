#include "experiments/trace_reader.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <compare>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <ostream>
#include <random>
#include <span>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

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

// ---------------------------------------------------------------------------------------------
// JSON lines. nlohmann-json's SAX parser walks each line (no DOM); JsonLine, its handler, keeps
// the top-level fields a format names, reads integer arrays straight into vectors, skips the rest
// and turns every problem into a TraceError naming the file, the line and the key whose value was
// being read. Syntax errors carry nlohmann-json's wording after "malformed JSON at column N: ".

/// A top-level key of a JSON-lines format.
struct JsonField {
  enum Kind {
    tokens,   ///< a token count (parse_tokens)
    time,     ///< a time >= 0 in `unit` (parse_time)
    int64s,   ///< an array of 64-bit integers
    int32s,   ///< an array of integers in [0, INT32_MAX] (token ids)
    counted,  ///< an array whose elements are only counted
  };
  Kind kind;
  std::string_view name;
  bool required;
  const char* unit = nullptr;
};

constexpr std::size_t kMaxJsonFields = 5;
constexpr int kMaxJsonDepth = 256;  ///< containers nested inside one top-level value

/// One line's values, by index in the format's field list.
struct JsonValues {
  std::array<bool, kMaxJsonFields> seen{};
  std::array<std::int64_t, kMaxJsonFields> integer{};  ///< tokens; a counted array's length
  std::array<double, kMaxJsonFields> time{};
  std::vector<std::int64_t> int64s;  ///< the int64s field's elements (a format has at most one)
  std::vector<std::int32_t> int32s;  ///< the int32s field's elements (a format has at most one)
};

/// The parser reads a line through this iterator, which publishes how far it has read: the one
/// thing nlohmann-json's SAX events do not tell, needed for columns and a number's own text.
struct TrackedChars {
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char* p;
  const char** read_to;
  const char& operator*() const { return *p; }
  TrackedChars& operator++() {
    *read_to = ++p;
    return *this;
  }
  TrackedChars operator++(int) {
    TrackedChars old = *this;
    ++*this;
    return old;
  }
  bool operator==(const TrackedChars& o) const { return p == o.p; }
};

/// Thrown by the fast, untracked pass at a problem: the line is parsed again, tracked, for the
/// exact message.
struct JsonRetryTracked {};

bool json_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool number_char(char c) { return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; }

std::string printable(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return fmt::format("'{}'", c);
  return fmt::format("0x{:02x}", u);
}

/// nlohmann-json's message without its "[json.exception.parse_error.101] parse error at line 1,
/// column 8: " prefix (the caller names file, line and column).
std::string json_problem(const std::string& what) {
  std::string_view s = what;
  if (s.starts_with("[json.exception.")) {
    const std::size_t end = s.find("] ");
    if (end != std::string_view::npos) s.remove_prefix(end + 2);
  }
  if (s.starts_with("parse error")) {
    const std::size_t colon = s.find(": ");
    if (colon != std::string_view::npos) s.remove_prefix(colon + 2);
  }
  return std::string(s);
}

class JsonLine {
 public:
  /// `read_to` is null for the fast, untracked pass: problems then throw JsonRetryTracked.
  JsonLine(std::string_view line, const At& at, std::span<const JsonField> fields, JsonValues& out,
           const char* const* read_to)
      : line_(line), at_(at), fields_(fields), out_(out), read_to_(read_to) {}

  bool null() { return other_scalar('n', 4); }
  bool boolean(bool b) { return other_scalar(b ? 't' : 'f', b ? 4 : 5); }
  bool number_integer(std::int64_t v) {
    if (ints_ && v >= lo_) return push(v);
    // A negative zero reaches number_integer only as "-0"; JSON integers have one spelling.
    return number(false, [v] { return v == 0 ? std::string("-0") : fmt::format("{}", v); });
  }
  bool number_unsigned(std::uint64_t v) {
    if (ints_ && v <= static_cast<std::uint64_t>(hi_)) return push(static_cast<std::int64_t>(v));
    return number(false, [v] { return fmt::format("{}", v); });
  }
  bool number_float(double /*value*/, const std::string& text) {
    return number(true, [&text] { return text; });
  }
  bool string(std::string& /*value*/) { return other_scalar('"', 0); }
  bool binary(nlohmann::json::binary_t& /*value*/) { return true; }  // not in text JSON
  bool start_object(std::size_t /*size*/) { return open('{'); }
  bool start_array(std::size_t /*size*/) { return open('['); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& name);
  bool parse_error(std::size_t position, const std::string& token, const nlohmann::json::exception& e);

 private:
  [[noreturn]] void fail(const std::string& problem) const { at_.fail(key_, problem); }
  [[noreturn]] void fail_at(const char* where, const std::string& problem) const {
    fail(fmt::format("malformed JSON at column {}: {}", where - line_.data() + 1, problem));
  }
  void need_tracked() const {
    if (read_to_ == nullptr) throw JsonRetryTracked{};
  }
  [[nodiscard]] const JsonField* field() const {
    return index_ >= 0 ? &fields_[static_cast<std::size_t>(index_)] : nullptr;
  }
  [[nodiscard]] std::size_t element() const { return ints_32_ ? out_.int32s.size() : out_.int64s.size(); }
  bool push(std::int64_t v) {
    if (ints_32_) {
      out_.int32s.push_back(static_cast<std::int32_t>(v));
    } else {
      out_.int64s.push_back(v);
    }
    return true;
  }
  /// A top-level value ended: no key is being read.
  void value_done() {
    if (depth_ == 1) {
      index_ = -1;
      key_.clear();
    }
  }
  template <class FastText>
  bool number(bool is_float, FastText&& fast_text);
  [[nodiscard]] const char* number_text(std::string& text) const;
  void bad_element_number(bool is_float) const;
  bool other_scalar(char first, std::size_t length);
  [[noreturn]] void not_an_integer(char first, std::size_t length) const;
  bool open(char bracket);
  bool close();

  std::string_view line_;
  const At& at_;
  std::span<const JsonField> fields_;
  JsonValues& out_;
  const char* const* read_to_;
  int depth_ = 0;            ///< open containers, the line's object included
  int index_ = -1;           ///< the field whose value is being read, or -1
  std::string key_;          ///< the top-level key whose value is being read (also unknown ones)
  bool ints_ = false;        ///< inside an int64s / int32s field's array
  bool ints_32_ = false;     ///< ... an int32s one
  bool counting_ = false;    ///< inside a counted field's array
  std::int64_t lo_ = 0, hi_ = 0;
  std::int64_t count_ = 0;
};

bool JsonLine::key(std::string& name) {
  if (depth_ != 1) return true;
  key_ = name;
  index_ = -1;
  for (std::size_t i = 0; i < fields_.size(); ++i) {
    if (fields_[i].name != name) continue;
    if (out_.seen[i]) fail("duplicate key");
    out_.seen[i] = true;
    index_ = static_cast<int>(i);
  }
  return true;
}

/// The current number's text as the line wrote it, and where it starts (tracked pass). Null when
/// the character after it cannot follow a value: the syntax error that comes next is reported.
const char* JsonLine::number_text(std::string& text) const {
  const char* const begin = line_.data();
  const char* const end = begin + line_.size();
  const char* const p = *read_to_;
  // The lexer has read one character past the number, unless the line ended there (then the
  // object is not closed).
  if (p == end && number_char(p[-1])) return nullptr;
  const char after = p[-1];
  if (!json_space(after) && after != ',' && after != ']' && after != '}') return nullptr;
  const char* start = p - 1;
  while (start > begin && number_char(start[-1])) --start;
  text.assign(start, p - 1);
  return start;
}

template <class FastText>
bool JsonLine::number(bool is_float, FastText&& fast_text) {
  if (ints_) {
    bad_element_number(is_float);
    return true;  // a syntax error follows
  }
  if (counting_ && depth_ == 2) ++count_;
  const JsonField* f = depth_ == 1 ? field() : nullptr;
  if (f == nullptr) {
    value_done();
    return true;
  }
  std::string text;
  if (read_to_ == nullptr) {
    text = fast_text();
  } else if (number_text(text) == nullptr) {
    return true;  // the syntax error that follows names this key
  }
  const auto i = static_cast<std::size_t>(index_);
  switch (f->kind) {
    case JsonField::tokens: out_.integer[i] = parse_tokens(text, at_, key_); break;
    case JsonField::time: out_.time[i] = parse_time(text, at_, key_, f->unit); break;
    default: fail("expected an array of integers");
  }
  value_done();
  return true;
}

/// Fails at an integer array's element that is a fraction or out of range, unless a syntax error
/// follows it (then that is reported).
void JsonLine::bad_element_number(bool is_float) const {
  need_tracked();
  std::string text;
  const char* const start = number_text(text);
  if (start == nullptr) return;
  const std::size_t n = element();
  if (is_float && text.find_first_of(".eE") != std::string::npos) {
    fail_at(start, fmt::format("array element {} is not an integer", n));
  }
  fail_at(start, fmt::format("array element {} ({}) is out of range [{}, {}]", n, text, lo_, hi_));
}

/// A string, true, false or null.
bool JsonLine::other_scalar(char first, std::size_t length) {
  if (ints_) not_an_integer(first, length);
  if (counting_ && depth_ == 2) ++count_;
  if (const JsonField* f = depth_ == 1 ? field() : nullptr) {
    if (f->kind == JsonField::tokens || f->kind == JsonField::time) {
      fail(fmt::format("expected a number, found a JSON {}", first == '"' ? "string" : "non-number"));
    }
    fail("expected an array of integers");
  }
  value_done();
  return true;
}

/// Fails at a value other than a number inside an integer array; `length` is a literal's (0 for
/// a string, 1 for a bracket).
void JsonLine::not_an_integer(char first, std::size_t length) const {
  need_tracked();
  const char* start = *read_to_ - length;
  if (first == '"') {  // back to the opening quote: the first one not escaped
    start = *read_to_ - 1;
    for (;;) {
      --start;
      const char* b = start;
      while (b > line_.data() && b[-1] == '\\') --b;
      if (*start == '"' && (start - b) % 2 == 0) break;
    }
  }
  fail_at(start, fmt::format("array element {}: expected an integer, found {}", element(), printable(first)));
}

bool JsonLine::open(char bracket) {
  if (depth_ > kMaxJsonDepth) {
    need_tracked();
    fail_at(*read_to_ - 1, fmt::format("JSON nested deeper than {} levels", kMaxJsonDepth));
  }
  if (ints_) not_an_integer(bracket, 1);
  if (counting_ && depth_ == 2) ++count_;
  if (const JsonField* f = depth_ == 1 ? field() : nullptr) {
    if (f->kind == JsonField::tokens || f->kind == JsonField::time) fail("expected a number, found a JSON non-number");
    if (bracket != '[') fail("expected an array of integers");
    ints_ = f->kind == JsonField::int64s || f->kind == JsonField::int32s;
    ints_32_ = f->kind == JsonField::int32s;
    lo_ = ints_32_ ? 0 : std::numeric_limits<std::int64_t>::min();
    hi_ = ints_32_ ? std::numeric_limits<std::int32_t>::max() : std::numeric_limits<std::int64_t>::max();
    counting_ = f->kind == JsonField::counted;
    count_ = 0;
  }
  ++depth_;
  return true;
}

bool JsonLine::close() {
  --depth_;
  if (depth_ == 1) {
    if (counting_) out_.integer[static_cast<std::size_t>(index_)] = count_;
    ints_ = counting_ = false;
    value_done();
  }
  return true;
}

bool JsonLine::parse_error(std::size_t position, const std::string& token, const nlohmann::json::exception& e) {
  need_tracked();
  constexpr int kNumberOverflow = 406;  // a number beyond double: the field's own problem
  if (e.id == kNumberOverflow) (void)number(true, [&token] { return token; });
  fail(fmt::format("malformed JSON at column {}: {}", position, json_problem(e.what())));
}

/// Parses one line into `out`; `tracked` also follows the read position, for messages.
void parse_json_line(std::string_view line, const At& at, std::span<const JsonField> fields, JsonValues& out,
                     bool tracked) {
  out.seen.fill(false);
  out.int64s.clear();
  out.int32s.clear();
  bool done = false;
  if (tracked) {
    const char* read_to = line.data();
    JsonLine handler(line, at, fields, out, &read_to);
    done = nlohmann::json::sax_parse(TrackedChars{line.data(), &read_to},
                                     TrackedChars{line.data() + line.size(), &read_to}, &handler);
  } else {
    JsonLine handler(line, at, fields, out, nullptr);
    done = nlohmann::json::sax_parse(line.data(), line.data() + line.size(), &handler);
  }
  if (!done) at.fail("", "malformed JSON");  // not reached: the handler throws first
}

/// Reads one JSON-lines record: a fast pass, and at a problem a tracked one for the exact message.
void read_json_line(std::string_view line, const At& at, std::span<const JsonField> fields, JsonValues& out) {
  const std::size_t first = line.find_first_not_of(" \t\r\n");  // Lines gives no blank line
  if (line[first] != '{') {
    at.fail("", fmt::format("malformed JSON at column {}: expected a JSON object starting with '{{', found {}", first + 1,
                            printable(line[first])));
  }
  try {
    parse_json_line(line, at, fields, out, false);
  } catch (const JsonRetryTracked&) {
    parse_json_line(line, at, fields, out, true);
  } catch (const TraceError&) {
    parse_json_line(line, at, fields, out, true);
  }
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].required && !out.seen[i]) at.fail(std::string(fields[i].name), "missing");
  }
}

constexpr JsonField kMooncakeFields[] = {
    {JsonField::time, "timestamp", true, "milliseconds"},
    {JsonField::tokens, "input_length", true},
    {JsonField::tokens, "output_length", true},
    {JsonField::int64s, "hash_ids", true},
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
      at.fail("hash_ids", fmt::format("has {} entries, expected ceil(input_length / {}) = {}", r.request.prefix_hashes.size(),
                                      kMooncakeHashBlock, want));
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

constexpr JsonField kServingSimFields[] = {
    {JsonField::tokens, "input_toks", true},
    {JsonField::tokens, "output_toks", true},
    {JsonField::time, "arrival_time_ns", true, "nanoseconds"},
    {JsonField::int32s, "input_tok_ids", false},
    {JsonField::counted, "output_tok_ids", false},
};

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
        at.fail("input_tok_ids", fmt::format("has {} entries, expected input_toks = {}", v.int32s.size(), r.request.prompt_tokens));
      }
      if (options.keep_token_ids) {
        r.request.prompt_token_ids = v.int32s;
        p.has_token_ids = true;
      }
    }
    if (v.seen[4] && v.integer[4] != r.request.output_tokens) {
      at.fail("output_tok_ids", fmt::format("has {} entries, expected output_toks = {}", v.integer[4], r.request.output_tokens));
    }
    r.t = v.time[2] * 1e-9;
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
