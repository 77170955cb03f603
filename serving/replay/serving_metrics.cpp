#include "serving/replay/serving_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "alloc/core/error.hpp"
#include "serving/support/sort_doubles.hpp"

namespace kvlab {

double quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

std::vector<double> parse_percentiles(const std::string& spec) {
  std::vector<double> out;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    double p = 0;
    try {
      p = std::stod(item, &used);
    } catch (const std::logic_error&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !(p > 0 && p <= 100))
      throw InvalidArgument("--percentiles: '" + item + "' is not a percentile in (0, 100] (e.g. 90,99)");
    if (!out.empty() && !(p > out.back()))
      throw InvalidArgument("--percentiles must be distinct and ascending (got '" + spec + "')");
    out.push_back(p);
  }
  if (out.empty() || spec.back() == ',') throw InvalidArgument("--percentiles: no percentile in '" + spec + "'");
  if (out.size() > 10) throw InvalidArgument("--percentiles: at most 10 (got " + std::to_string(out.size()) + ")");
  return out;
}

std::string percentile_name(double p) {
  std::ostringstream s;
  s << p;
  std::string name = "p" + s.str();
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

namespace {
/// The statistics of `seconds`, sorted ascending: its sums are taken in that order, so the same
/// values give the same bits however they arrived.
LatencyStats stats_of_sorted(const std::vector<double>& seconds, const std::vector<double>& percentiles) {
  LatencyStats s;
  for (double p : percentiles) s.percentiles_ms.emplace_back(p, 0.0);
  if (seconds.empty()) return s;
  const auto n = static_cast<double>(seconds.size());
  double sum = 0;
  for (double x : seconds) sum += x;
  const double mean = sum / n;
  double var = 0;
  for (double x : seconds) var += (x - mean) * (x - mean);
  s.count = static_cast<std::int64_t>(seconds.size());
  s.mean_ms = 1e3 * mean;
  s.std_ms = 1e3 * std::sqrt(var / n);
  s.median_ms = 1e3 * quantile(seconds, 0.5);
  s.p90_ms = 1e3 * quantile(seconds, 0.9);
  s.p99_ms = 1e3 * quantile(seconds, 0.99);
  for (auto& [p, ms] : s.percentiles_ms) ms = 1e3 * quantile(seconds, p / 100);
  return s;
}
}  // namespace

LatencyStats latency_stats(std::vector<double> seconds, const std::vector<double>& percentiles) {
  sort_doubles(seconds);  // std::sort's order, faster on large vectors
  return stats_of_sorted(seconds, percentiles);
}

LatencyStats latency_stats_from_floats(std::span<const float> seconds, const std::vector<double>& percentiles) {
  return stats_of_sorted(sorted_as_doubles(seconds), percentiles);
}

bool ServingSlo::any() const noexcept {
  return std::isfinite(ttft_ms) || std::isfinite(tpot_ms) || std::isfinite(e2el_ms);
}

bool ServingSlo::met(double ttft_s, double tpot_s, double e2el_s) const noexcept {
  return 1e3 * ttft_s <= ttft_ms && (tpot_s < 0 || 1e3 * tpot_s <= tpot_ms) && 1e3 * e2el_s <= e2el_ms;
}

ServingSlo parse_goodput(const std::string& spec) {
  ServingSlo slo;
  std::istringstream in(spec);
  std::string part;
  bool seen[3] = {false, false, false};
  while (std::getline(in, part, ',')) {
    const auto colon = part.find(':');
    const std::string key = part.substr(0, colon);
    const int which = key == "ttft" ? 0 : key == "tpot" ? 1 : key == "e2el" ? 2 : -1;
    if (colon == std::string::npos || which < 0)
      KVLAB_THROW(InvalidArgument, "--goodput: '" + part + "' is not ttft:MS, tpot:MS or e2el:MS");
    if (seen[which]) KVLAB_THROW(InvalidArgument, "--goodput: " + key + " given twice");
    seen[which] = true;
    const std::string value = part.substr(colon + 1);
    double ms = 0;
    try {
      std::size_t used = 0;
      ms = std::stod(value, &used);
      if (used != value.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      KVLAB_THROW(InvalidArgument, "--goodput: " + key + " '" + value + "' is not a number of milliseconds");
    }
    if (!(ms > 0) || !std::isfinite(ms))
      KVLAB_THROW(InvalidArgument,
                  "--goodput: " + key + " must be a positive number of milliseconds (got " + value + ")");
    (which == 0 ? slo.ttft_ms : which == 1 ? slo.tpot_ms : slo.e2el_ms) = ms;
  }
  if (!slo.any()) KVLAB_THROW(InvalidArgument, "--goodput: give at least one of ttft:MS, tpot:MS, e2el:MS");
  return slo;
}

}  // namespace kvlab
