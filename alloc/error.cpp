#include "alloc/error.hpp"

#include <cstring>

namespace kvlab::detail {

std::string located(const char* file, int line, const std::string& msg) {
  // Keep paths short and stable: strip everything up to the project's top-level folders.
  std::string path(file);
  for (const char* root : {"/alloc/", "/paged/", "/vmm/", "/kernels/", "/experiments/", "/tests/"}) {
    if (auto pos = path.rfind(root); pos != std::string::npos) {
      path = path.substr(pos + 1);
      break;
    }
  }
  return "kvlab error at " + path + ":" + std::to_string(line) + ": " + msg;
}

}  // namespace kvlab::detail
