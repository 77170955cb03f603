#include "alloc/core/error.hpp"

#include <string_view>

namespace kvlab {

namespace {
std::string without_nul(const std::string& text) {
  if (text.find('\0') == std::string::npos) return text;
  std::string out;
  for (const char c : text) {
    if (c == '\0') {
      out += "\\x00";
    } else {
      out += c;
    }
  }
  return out;
}
}  // namespace

Error::Error(const std::string& what) : std::runtime_error(without_nul(what)) {}

}  // namespace kvlab

namespace kvlab::detail {

std::string located(const char* file, int line, const std::string& msg) {
  // Keep paths short and stable: relative to the source tree (alloc/arena.cpp, tests/...).
  std::string path(file);
  const std::string_view root = KVLAB_SOURCE_DIR;
  if (path.starts_with(root)) path.erase(0, root.size());
  return "kvlab error at " + path + ":" + std::to_string(line) + ": " + msg;
}

}  // namespace kvlab::detail
