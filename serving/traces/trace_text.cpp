// Lines, fields, the At locator and numbers, shared by the CSV and JSON-lines trace readers
// (declarations and contracts: trace_text.hpp).
#include "serving/traces/trace_text.hpp"

#include "serving/support/csv.hpp"
#include "serving/support/text.hpp"

#include <charconv>
#include <cmath>
#include <system_error>

#include "serving/traces/trace_reader.hpp"

namespace kvlab::trace_detail {

namespace {
bool blank(std::string_view s) { return trim(s).empty(); }
}  // namespace

std::string_view trim(std::string_view s) { return kvlab::trim(s, " \t"); }

std::string shortest(double v) {
  char buf[64];
  const auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, p) : std::to_string(v);
}

std::string quoted(std::string_view s) {
  constexpr std::size_t kMax = 80;
  if (s.size() > kMax) return "'" + std::string(s.substr(0, kMax)) + "...'";
  return "'" + std::string(s) + "'";
}

bool Lines::next(std::string_view& line, std::int64_t& number) {
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

std::vector<std::string> split_csv(std::string_view line, const std::string& source, std::int64_t line_no) {
  try {
    return csv_fields(line);
  } catch (const CsvError& e) {
    throw TraceError(source, line_no, "", e.what());
  }
}

void At::fail(const std::string& field, const std::string& problem) const {
  throw TraceError(source, line, field, problem);
}

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
    at.fail(field,
            quoted(text) + " is out of range (a token count must be 1.." + std::to_string(kMaxTraceTokens) + ")");
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

}  // namespace kvlab::trace_detail
