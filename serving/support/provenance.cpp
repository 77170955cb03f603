#include "serving/support/provenance.hpp"

#include <unistd.h>

#include <array>
#include <ctime>

namespace kvlab {

Provenance current_provenance(std::vector<std::pair<std::string, std::string>> options) {
  Provenance p;
  p.kvlab_version = KVLAB_VERSION;
  p.git_revision = git_revision();
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::array<char, 32> date{};
  std::strftime(date.data(), date.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  p.date_utc = date.data();
  std::array<char, 256> host{};
  p.host = gethostname(host.data(), host.size() - 1) == 0 ? host.data() : "unknown";
  p.options = std::move(options);
  return p;
}

}  // namespace kvlab
