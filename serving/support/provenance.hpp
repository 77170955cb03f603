#pragma once
// What every output records about how it was made (issue 30): kvlab's version and the source
// revision it was built from (with a dirty flag), when and on which machine it ran, and every
// option's resolved value, defaults included, so a changed default cannot make an old result
// irreproducible.
#include <string>
#include <utility>
#include <vector>

namespace kvlab {

/// The source revision this binary was built from: 12 hex digits, "-dirty" when tracked files
/// differed from it, "unknown" outside a git checkout (generated at build time).
[[nodiscard]] const char* git_revision() noexcept;

struct Provenance {
  std::string kvlab_version;  ///< the project's version (CMake's PROJECT_VERSION)
  std::string git_revision;
  std::string date_utc;  ///< ISO 8601, seconds
  std::string host;      ///< the machine's host name
  /// Where KV lived and kernels ran, as the device describes itself (a GPU's name, driver and
  /// runtime versions); "host memory" on the host.
  std::string device = "host memory";
  /// What computed attention: the kernels execute mode ran, or that none ran (the modelled clock).
  std::string kernels = "none (modelled clock)";
  /// Every option of the command and its value as given or defaulted, in the parser's order.
  std::vector<std::pair<std::string, std::string>> options;
};

/// This process's provenance now, with `options`.
[[nodiscard]] Provenance current_provenance(std::vector<std::pair<std::string, std::string>> options = {});

}  // namespace kvlab
