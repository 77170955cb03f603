#include "experiments/json_lines.hpp"

#include <charconv>
#include <cstring>
#include <limits>

namespace kvlab::json {

namespace {
constexpr std::size_t kMaxDepth = 256;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string printable(char c) {
  if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f) return std::string("'") + c + "'";
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
  return buf;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}
}  // namespace

ObjectReader::ObjectReader(std::string_view line) : s_(line) {
  skip_ws();
  if (pos_ >= s_.size()) fail("expected a JSON object, found an empty line");
  if (s_[pos_] != '{') fail("expected a JSON object starting with '{', found " + printable(s_[pos_]));
  ++pos_;
}

void ObjectReader::fail(const std::string& message) const { fail_at(pos_, message); }

void ObjectReader::fail_at(std::size_t pos, const std::string& message) const {
  throw SyntaxError(pos + 1, message);
}

void ObjectReader::skip_ws() {
  while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
}

char ObjectReader::peek_char() {
  skip_ws();
  if (pos_ >= s_.size()) fail("truncated JSON: the line ends before the object is closed");
  return s_[pos_];
}

void ObjectReader::expect(char c, const char* what) {
  const char got = peek_char();
  if (got != c) fail(std::string("expected ") + what + ", found " + printable(got));
  ++pos_;
}

namespace {
// Reads a string starting at s[pos] == '"'; appends the decoded text to *out when out != nullptr.
// Returns the position after the closing quote or throws via `fail`.
template <class Fail>
std::size_t read_string(std::string_view s, std::size_t pos, std::string* out, Fail&& fail) {
  const std::size_t open = pos;
  ++pos;  // opening quote
  for (;;) {
    // Fast scan for the plain run.
    std::size_t run = pos;
    while (run < s.size() && s[run] != '"' && s[run] != '\\' && static_cast<unsigned char>(s[run]) >= 0x20) ++run;
    if (out) out->append(s.data() + pos, run - pos);
    pos = run;
    if (pos >= s.size()) fail(open, "truncated JSON: unterminated string");
    const char c = s[pos];
    if (c == '"') return pos + 1;
    if (c != '\\') fail(pos, "control character " + printable(c) + " inside a string");
    if (pos + 1 >= s.size()) fail(open, "truncated JSON: unterminated string");
    const char e = s[pos + 1];
    pos += 2;
    char plain = 0;
    switch (e) {
      case '"': plain = '"'; break;
      case '\\': plain = '\\'; break;
      case '/': plain = '/'; break;
      case 'b': plain = '\b'; break;
      case 'f': plain = '\f'; break;
      case 'n': plain = '\n'; break;
      case 'r': plain = '\r'; break;
      case 't': plain = '\t'; break;
      case 'u': {
        const auto hex4 = [&](std::size_t at) -> std::uint32_t {
          if (at + 4 > s.size()) fail(at, "truncated JSON: incomplete \\u escape");
          std::uint32_t v = 0;
          const auto [p, ec] = std::from_chars(s.data() + at, s.data() + at + 4, v, 16);
          if (ec != std::errc() || p != s.data() + at + 4) fail(at, "invalid \\u escape (need 4 hex digits)");
          return v;
        };
        std::uint32_t cp = hex4(pos);
        pos += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (pos + 6 > s.size() || s[pos] != '\\' || s[pos + 1] != 'u') fail(pos, "unpaired UTF-16 surrogate in \\u escape");
          const std::uint32_t lo = hex4(pos + 2);
          if (lo < 0xDC00 || lo > 0xDFFF) fail(pos, "unpaired UTF-16 surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          pos += 6;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          fail(pos - 4, "unpaired UTF-16 surrogate in \\u escape");
        }
        if (out) append_utf8(*out, cp);
        continue;
      }
      default: fail(pos - 2, "invalid escape '\\" + std::string(1, e) + "' in a string");
    }
    if (out) out->push_back(plain);
  }
}
}  // namespace

const std::string* ObjectReader::next_key() {
  if (need_value_) fail("internal: the previous key's value was not consumed");
  if (closed_) return nullptr;
  char c = peek_char();
  if (first_) {
    if (c == '}') {
      ++pos_;
      closed_ = true;
      return nullptr;
    }
  } else {
    if (c == '}') {
      ++pos_;
      closed_ = true;
      return nullptr;
    }
    if (c != ',') fail("expected ',' or '}' after a value, found " + printable(c));
    ++pos_;
    c = peek_char();
  }
  if (c != '"') fail("expected a key in double quotes, found " + printable(c));
  key_.clear();
  pos_ = read_string(s_, pos_, &key_, [this](std::size_t p, const std::string& m) { fail_at(p, m); });
  expect(':', "':' after a key");
  first_ = false;
  need_value_ = true;
  return &key_;
}

void ObjectReader::finish() {
  if (!closed_) fail("internal: finish() before the end of the object");
  skip_ws();
  if (pos_ < s_.size()) fail("unexpected text after the closing '}'");
}

ObjectReader::Kind ObjectReader::peek_kind() {
  const char c = peek_char();
  switch (c) {
    case '{': return Kind::object;
    case '[': return Kind::array;
    case '"': return Kind::string;
    case 't':
    case 'f': return Kind::boolean;
    case 'n': return Kind::null;
    default:
      if (c == '-' || is_digit(c)) return Kind::number;
      fail("expected a JSON value, found " + printable(c));
  }
}

std::string_view ObjectReader::scan_number() {
  const std::size_t start = pos_;
  std::size_t p = pos_;
  const auto bad = [&] { fail_at(start, "invalid number '" + std::string(s_.substr(start, std::min<std::size_t>(p - start + 1, 24))) + "'"); };
  if (p < s_.size() && s_[p] == '-') ++p;
  if (p >= s_.size() || !is_digit(s_[p])) bad();
  if (s_[p] == '0') {
    ++p;
  } else {
    while (p < s_.size() && is_digit(s_[p])) ++p;
  }
  if (p < s_.size() && s_[p] == '.') {
    ++p;
    if (p >= s_.size() || !is_digit(s_[p])) bad();
    while (p < s_.size() && is_digit(s_[p])) ++p;
  }
  if (p < s_.size() && (s_[p] == 'e' || s_[p] == 'E')) {
    ++p;
    if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
    if (p >= s_.size() || !is_digit(s_[p])) bad();
    while (p < s_.size() && is_digit(s_[p])) ++p;
  }
  // A number runs into a delimiter; "12abc" or "01" is not a number.
  if (p < s_.size() && !is_ws(s_[p]) && s_[p] != ',' && s_[p] != ']' && s_[p] != '}') bad();
  pos_ = p;
  return s_.substr(start, p - start);
}

std::string_view ObjectReader::number() {
  if (peek_kind() != Kind::number) fail("expected a number, found " + printable(s_[pos_]));
  need_value_ = false;
  return scan_number();
}

std::string ObjectReader::string() {
  if (peek_char() != '"') fail("expected a string, found " + printable(s_[pos_]));
  need_value_ = false;
  std::string out;
  pos_ = read_string(s_, pos_, &out, [this](std::size_t p, const std::string& m) { fail_at(p, m); });
  return out;
}

void ObjectReader::skip_string() {
  pos_ = read_string(s_, pos_, nullptr, [this](std::size_t p, const std::string& m) { fail_at(p, m); });
}

template <class T>
void ObjectReader::int_array_impl(std::vector<T>& out, std::int64_t lo, std::int64_t hi) {
  out.clear();
  const char open = peek_char();
  if (open != '[') fail("expected an array of integers, found " + printable(open));
  need_value_ = false;
  ++pos_;
  if (peek_char() == ']') {
    ++pos_;
    return;
  }
  const char* const base = s_.data();
  const std::size_t n = s_.size();
  for (std::size_t index = 0;; ++index) {
    skip_ws();
    const std::size_t start = pos_;
    std::size_t p = pos_;
    const bool neg = p < n && base[p] == '-';
    if (neg) ++p;
    const std::size_t digits_at = p;
    std::uint64_t v = 0;
    bool overflow = false;
    while (p < n && is_digit(base[p])) {
      const auto d = static_cast<std::uint64_t>(base[p] - '0');
      if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) overflow = true;
      v = v * 10 + d;
      ++p;
    }
    const std::string where = "array element " + std::to_string(index);
    if (p == digits_at) {
      if (p >= n) fail_at(p, "truncated JSON: the line ends inside an array");
      if (!neg && base[p] == ']' && index > 0) fail_at(p, "trailing ',' before ']'");
      fail_at(start, where + ": expected an integer, found " + printable(base[p]));
    }
    if (p < n && (base[p] == '.' || base[p] == 'e' || base[p] == 'E')) fail_at(start, where + " is not an integer");
    if (p - digits_at > 1 && base[digits_at] == '0') fail_at(start, where + ": leading zeros are not JSON");
    if (p < n && !is_ws(base[p]) && base[p] != ',' && base[p] != ']') {
      fail_at(p, where + ": unexpected character " + printable(base[p]));
    }
    const std::string_view text(base + start, p - start);
    // |v| must fit in int64 and then in [lo, hi].
    if (overflow || v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + (neg ? 1u : 0u)) {
      fail_at(start, where + " (" + std::string(text) + ") is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    const std::int64_t value = neg ? static_cast<std::int64_t>(0 - v) : static_cast<std::int64_t>(v);
    if (value < lo || value > hi) {
      fail_at(start, where + " (" + std::string(text) + ") is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    out.push_back(static_cast<T>(value));
    pos_ = p;
    skip_ws();
    if (pos_ >= n) fail("truncated JSON: the line ends inside an array");
    const char c = s_[pos_];
    ++pos_;
    if (c == ']') return;
    if (c != ',') fail_at(pos_ - 1, "expected ',' or ']' in an array, found " + printable(c));
  }
}

void ObjectReader::int_array(std::vector<std::int64_t>& out, std::int64_t lo, std::int64_t hi) {
  int_array_impl(out, lo, hi);
}
void ObjectReader::int_array(std::vector<std::int32_t>& out, std::int32_t lo, std::int32_t hi) {
  int_array_impl(out, lo, hi);
}

std::size_t ObjectReader::skip_value() {
  need_value_ = false;
  std::string stack;  // the open containers, '{' or '['
  std::size_t top_count = 0;
  const auto count_element = [&] {
    if (stack.size() == 1 && stack[0] == '[') ++top_count;
  };
  const auto object_key = [&] {
    const char k = peek_char();
    if (k != '"') fail("expected a key in double quotes, found " + printable(k));
    skip_string();
    expect(':', "':' after a key");
  };
  for (;;) {
    // Expecting one value.
    const char c = peek_char();
    if (c == '{' || c == '[') {
      if (stack.size() >= kMaxDepth) fail("JSON nested deeper than " + std::to_string(kMaxDepth) + " levels");
      ++pos_;
      stack.push_back(c);
      const char d = peek_char();
      if (d == (c == '{' ? '}' : ']')) {
        ++pos_;
        stack.pop_back();
      } else {
        if (c == '{') {
          object_key();
        } else {
          count_element();
        }
        continue;
      }
    } else if (c == '"') {
      skip_string();
    } else if (c == '-' || is_digit(c)) {
      (void)scan_number();
    } else {
      bool ok = false;
      for (const char* lit : {"true", "false", "null"}) {
        const std::size_t len = std::strlen(lit);
        if (s_.substr(pos_, len) == lit) {
          const std::size_t after = pos_ + len;
          if (after >= s_.size() || is_ws(s_[after]) || s_[after] == ',' || s_[after] == ']' || s_[after] == '}') {
            pos_ = after;
            ok = true;
          }
          break;
        }
      }
      if (!ok) fail("expected a JSON value, found " + printable(c));
    }
    // After a value: close containers and find the next value.
    for (;;) {
      if (stack.empty()) return top_count;
      const char d = peek_char();
      const char close = stack.back() == '{' ? '}' : ']';
      if (d == close) {
        ++pos_;
        stack.pop_back();
        continue;
      }
      if (d != ',') fail(std::string("expected ',' or '") + close + "', found " + printable(d));
      ++pos_;
      if (stack.back() == '{') {
        object_key();
      } else {
        const char e = peek_char();
        if (e == ']') fail("trailing ',' before ']'");
        count_element();
      }
      break;
    }
  }
}

}  // namespace kvlab::json
