#include "alloc/error.hpp"

#include <string_view>

namespace kvlab::detail {

std::string located(const char* file, int line, const std::string& msg) {
  // Keep paths short and stable: relative to the source tree (alloc/arena.cpp, tests/...).
  std::string path(file);
  const std::string_view root = KVLAB_SOURCE_DIR;
  if (path.starts_with(root)) path.erase(0, root.size());
  return "kvlab error at " + path + ":" + std::to_string(line) + ": " + msg;
}

}  // namespace kvlab::detail
