#pragma once
// Text helpers shared by the CSV and the JSON-lines trace readers: iterating a file's lines, the
// At locator that turns a problem into a TraceError ("FILE:LINE: field 'X': problem"), and
// parsing token counts and times. Internal to the trace reader (serving/traces/trace_reader.hpp is
// the public API); kept apart so both syntaxes word their errors identically.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvlab::trace_detail {

/// `s` without leading and trailing spaces and tabs (a '\r' inside a field is kept and reported;
/// Lines already dropped the one a CRLF line ends with): serving/support/text.hpp's trim.
std::string_view trim(std::string_view s);

/// The shortest text that reads back as `v`.
std::string shortest(double v);

/// `s` in single quotes for a message, cut after 80 characters.
std::string quoted(std::string_view s);

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
  bool next(std::string_view& line, std::int64_t& number);

 private:
  std::string_view text_;
  const std::string& source_;
  bool comments_;
  std::size_t pos_ = 0;
  std::int64_t line_ = 0;
};

/// A CSV line's fields (support/csv.hpp: RFC 4180 quoting, spaces around a field dropped); an
/// unterminated quote is a TraceError at `source`:`line_no`.
std::vector<std::string> split_csv(std::string_view line, const std::string& source, std::int64_t line_no);

/// Where a value came from, for messages.
struct At {
  const std::string& source;
  std::int64_t line;
  /// Throws TraceError(source, line, field, problem).
  [[noreturn]] void fail(const std::string& field, const std::string& problem) const;
};

/// A token count: an integer, or a number with no fractional part ("7564.0"), within
/// [1, kMaxTraceTokens].
std::int64_t parse_tokens(std::string_view text, const At& at, const std::string& field);

/// A finite number >= 0 (a time); `unit` names it in messages.
double parse_time(std::string_view text, const At& at, const std::string& field, const char* unit);

}  // namespace kvlab::trace_detail
