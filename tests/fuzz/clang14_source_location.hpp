#pragma once
// Force-included into the fuzz build (tests/fuzz/CMakeLists.txt) when the compiler is clang < 15.
// libstdc++'s <source_location> is empty under clang 14, which lacks __builtin_source_location, so
// kernels/simt/emulator.hpp does not compile there. This stands in for std::source_location with
// the builtins clang 14 has; like the real one, current() used as a default argument reports the
// caller's file, line and column. Fuzz builds only: never part of a normal build.
#include <version>
#if defined(__clang__) && __clang_major__ < 15 && !defined(__cpp_lib_source_location)
#include <cstdint>
namespace std {
struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(),
                                           const char* function = __builtin_FUNCTION(),
                                           std::uint_least32_t line = __builtin_LINE(),
                                           std::uint_least32_t column = __builtin_COLUMN()) noexcept {
    source_location l;
    l.file_ = file;
    l.function_ = function;
    l.line_ = line;
    l.column_ = column;
    return l;
  }
  constexpr source_location() noexcept = default;
  [[nodiscard]] constexpr std::uint_least32_t line() const noexcept { return line_; }
  [[nodiscard]] constexpr std::uint_least32_t column() const noexcept { return column_; }
  [[nodiscard]] constexpr const char* file_name() const noexcept { return file_; }
  [[nodiscard]] constexpr const char* function_name() const noexcept { return function_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  std::uint_least32_t line_ = 0;
  std::uint_least32_t column_ = 0;
};
}  // namespace std
#endif
