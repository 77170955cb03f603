// The one-line JSON reader (json_line_reader.hpp). nlohmann-json's SAX parser walks each line (no
// DOM); JsonLine, its handler, keeps the top-level fields a format names, reads integer arrays
// straight into vectors, skips the rest and turns every problem into a TraceError naming the file,
// the line and the key whose value was being read. Syntax errors carry nlohmann-json's wording
// after "malformed JSON at column N: ". A fast pass reads each line; at a problem a second pass
// tracks the read position, for columns and a number's own text.
#include "serving/traces/json_line_reader.hpp"

#include <iterator>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "serving/traces/trace_reader.hpp"

namespace kvlab::trace_detail {

namespace {

constexpr int kMaxJsonDepth = 256;  ///< containers nested inside one top-level value

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
  int depth_ = 0;          ///< open containers, the line's object included
  int index_ = -1;         ///< the field whose value is being read, or -1
  std::string key_;        ///< the top-level key whose value is being read (also unknown ones)
  bool ints_ = false;      ///< inside an int64s / int32s field's array
  bool ints_32_ = false;   ///< ... an int32s one
  bool counting_ = false;  ///< inside a counted field's array
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
    case JsonField::tokens:
      out_.integer[i] = parse_tokens(text, at_, key_);
      break;
    case JsonField::time:
      out_.time[i] = parse_time(text, at_, key_, f->unit);
      break;
    default:
      fail("expected an array of integers");
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

}  // namespace

void read_json_line(std::string_view line, const At& at, std::span<const JsonField> fields, JsonValues& out) {
  // Lines gives no blank line, but one of carriage returns (or other JSON whitespace) is not blank to it.
  const std::size_t first = line.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) {
    at.fail("", "malformed JSON at column 1: expected a JSON object starting with '{', found only whitespace");
  }
  if (line[first] != '{') {
    at.fail("", fmt::format("malformed JSON at column {}: expected a JSON object starting with '{{', found {}",
                            first + 1, printable(line[first])));
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

}  // namespace kvlab::trace_detail
