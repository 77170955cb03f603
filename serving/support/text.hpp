#pragma once
// Small text helpers every reader of kvlab's input files shares (sweep files, device model files,
// traces), so each is written once.
#include <string_view>

namespace kvlab {

/// `s` without the leading and trailing characters of `blanks` (by default spaces, tabs and the
/// carriage return a CRLF file leaves at each line's end).
[[nodiscard]] constexpr std::string_view trim(std::string_view s, std::string_view blanks = " \t\r") noexcept {
  const auto b = s.find_first_not_of(blanks);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(blanks) - b + 1);
}

}  // namespace kvlab
