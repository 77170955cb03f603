#pragma once
// A small, strict JSON reader for one JSON-lines record (one object per line), enough for the trace
// readers: top-level keys are walked in order and each value is either read (number, string,
// array of integers) or skipped (any value, nested ones included). No allocation beyond what the
// caller asks for; integer arrays are parsed in place, so long token-id lists stay fast.
//
// Errors are json::SyntaxError carrying the 1-based column; callers add file, line and field.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvlab::json {

/// Malformed JSON. column() is 1-based within the line; message() has no location.
class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(std::size_t column, const std::string& message)
      : std::runtime_error(message), column_(column) {}
  [[nodiscard]] std::size_t column() const { return column_; }

 private:
  std::size_t column_;
};

/// Walks one JSON object: `while (auto key = obj.next_key()) { ... consume exactly one value ... }`
/// then finish(). Keys are decoded (escapes resolved); a key is only valid until the next call.
/// Nesting deeper than 256 levels is an error (no recursion, no stack overflow).
class ObjectReader {
 public:
  explicit ObjectReader(std::string_view line);

  /// The next key, or nullptr after the closing '}'. Throws on malformed input, truncation included.
  const std::string* next_key();
  /// Checks that nothing but whitespace follows the closing '}'.
  void finish();

  enum class Kind { object, array, string, number, boolean, null };
  /// Kind of the value that follows the current key (does not consume it).
  [[nodiscard]] Kind peek_kind();

  /// A JSON number, checked against the JSON grammar; returns its text (e.g. "7564.0", "-1e3").
  std::string_view number();
  /// A JSON string, escapes resolved (\uXXXX to UTF-8, surrogate pairs included).
  std::string string();
  /// An array whose elements are all integers written without fraction or exponent, each within
  /// [lo, hi]; appended to `out` (cleared first). Throws SyntaxError naming the bad element.
  void int_array(std::vector<std::int64_t>& out, std::int64_t lo, std::int64_t hi);
  void int_array(std::vector<std::int32_t>& out, std::int32_t lo, std::int32_t hi);
  /// Skips any value; returns the number of elements when it was an array, else 0.
  std::size_t skip_value();

  /// 1-based column of the next unread character (for callers' own messages).
  [[nodiscard]] std::size_t column() const { return pos_ + 1; }

 private:
  [[noreturn]] void fail(const std::string& message) const;
  [[noreturn]] void fail_at(std::size_t pos, const std::string& message) const;
  void skip_ws();
  char peek_char();  // after whitespace; fails at end of line
  void expect(char c, const char* what);
  void skip_string();
  std::string_view scan_number();
  template <class T>
  void int_array_impl(std::vector<T>& out, std::int64_t lo, std::int64_t hi);

  std::string_view s_;
  std::size_t pos_ = 0;
  std::string key_;
  bool first_ = true;
  bool closed_ = false;
  bool need_value_ = false;
};

}  // namespace kvlab::json
