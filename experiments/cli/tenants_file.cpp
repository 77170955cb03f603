#include "experiments/cli/tenants_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "alloc/core/error.hpp"

namespace kvlab {

namespace {
constexpr std::array<std::string_view, 15> kWorkloadKeys = {
    "model",      "trace",      "trace-format", "limit", "time-scale",    "requests",      "rate",        "burstiness",
    "prompt-len", "output-len", "seed",         "turns", "prefix-groups", "shared-prefix", "lengths-from"};
constexpr std::array<std::string_view, 5> kTenantKeys = {"offset", "share", "limit-gib", "shrink", "priority"};

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  KVLAB_THROW(InvalidArgument, where + ": " + what);
}

/// A finite number in [lo, hi], or an error naming the field.
double number(const std::string& where, std::string_view key, std::string_view text, double lo, double hi) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v) || v < lo || v > hi)
    bad(where, fmt::format("field '{}': '{}' is not a number between {:g} and {:g}", key, text, lo, hi));
  return v;
}

bool valid_name(std::string_view n) {
  return !n.empty() && n.size() <= 64 && n != "." && n != ".." && std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-';
  });
}

void tenant_field(TenantLine& t, std::string_view key, std::string_view value) {
  if (key == "offset") {
    t.offset_s = number(t.where, key, value, 0, 1e9);
  } else if (key == "share") {
    t.share = number(t.where, key, value, 0, 1);
    if (t.share == 0) bad(t.where, "field 'share': a tenant's share must be above 0");
  } else if (key == "priority") {
    const double p = number(t.where, key, value, -1000, 1000);
    if (p != std::floor(p)) bad(t.where, fmt::format("field 'priority': '{}' is not a whole number", value));
    t.priority = static_cast<int>(p);
  } else if (key == "limit-gib") {
    t.limit_gib = number(t.where, key, value, 1e-6, 1e6);
  } else {  // shrink=T:G
    const auto colon = value.find(':');
    if (colon == std::string_view::npos) bad(t.where, fmt::format("field 'shrink': '{}' is not AT_SECONDS:GIB", value));
    const double at = number(t.where, "shrink (seconds)", value.substr(0, colon), 0, 1e9);
    const double gib = number(t.where, "shrink (GiB)", value.substr(colon + 1), 0, 1e6);
    if (!t.shrinks.empty() && at < t.shrinks.back().first)
      bad(t.where, "field 'shrink': limit changes must be in time order");
    t.shrinks.emplace_back(at, gib);
  }
}

TenantLine parse_line(const std::string& where, const std::string& line) {
  std::istringstream in(line);
  TenantLine t;
  t.where = where;
  in >> t.name;
  if (!valid_name(t.name))
    bad(where, fmt::format("tenant name '{}' must be 1-64 letters, digits, '.', '_' or '-'", t.name));
  std::set<std::string, std::less<>> seen;
  for (std::string field; in >> field;) {
    const auto eq = field.find('=');
    if (eq == std::string::npos || eq == 0) bad(where, fmt::format("'{}' is not KEY=VALUE", field));
    const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    if (value.empty()) bad(where, fmt::format("field '{}': no value", key));
    if (key != "shrink" && !seen.insert(key).second) bad(where, fmt::format("field '{}' given twice", key));
    if (std::find(kTenantKeys.begin(), kTenantKeys.end(), key) != kTenantKeys.end()) {
      tenant_field(t, key, value);
    } else if (std::find(kWorkloadKeys.begin(), kWorkloadKeys.end(), key) != kWorkloadKeys.end()) {
      t.args.push_back("--" + key);
      t.args.push_back(value);
    } else {
      bad(where, fmt::format("unknown field '{}' (workload: model, trace, requests, rate, burstiness, prompt-len, "
                             "output-len, seed, ...; tenant: offset, share, limit-gib, shrink, priority)",
                             key));
    }
  }
  if (!seen.contains("model")) bad(where, "field 'model' is missing (each tenant names its model)");
  return t;
}
}  // namespace

std::vector<TenantLine> read_tenants_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) KVLAB_THROW(InvalidArgument, file.string() + ": cannot read the tenants file");
  std::vector<TenantLine> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", file.string(), n);
    TenantLine t = parse_line(where, line);
    for (const TenantLine& o : out)
      if (o.name == t.name) bad(where, fmt::format("tenant '{}' is named twice (also at {})", t.name, o.where));
    out.push_back(std::move(t));
  }
  if (out.empty()) KVLAB_THROW(InvalidArgument, file.string() + ": no tenant (one per line: NAME model=... ...)");
  return out;
}

}  // namespace kvlab
