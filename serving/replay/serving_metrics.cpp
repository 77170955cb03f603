#include "serving/replay/serving_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "alloc/core/error.hpp"
#include "serving/support/sort_doubles.hpp"

namespace kvlab {

namespace {
/// The q-quantile of `n` ascending values, `at(i)` the i-th (numpy.percentile's linear method).
template <class At>
double quantile_of(std::size_t n, double q, const At& at) {
  const double pos = q * static_cast<double>(n - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, n - 1);
  const double a = at(lo), b = at(hi);
  return a + (b - a) * (pos - static_cast<double>(lo));
}
}  // namespace

double quantile(const std::vector<double>& sorted, double q) {
  return quantile_of(sorted.size(), q, [&](std::size_t i) { return sorted[i]; });
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
/// The statistics of `n` values in ascending order: `each(fn)` calls fn(value, count) for runs of
/// equal values (count 1 each for a plain vector), `at(i)` returns the i-th value. Sums are taken
/// value by value in that order, so the same values give the same bits however they arrived or
/// were grouped.
template <class Each, class At>
LatencyStats stats_of_ascending(std::int64_t n, const Each& each, const At& at,
                                const std::vector<double>& percentiles) {
  LatencyStats s;
  for (double p : percentiles) s.percentiles_ms.emplace_back(p, 0.0);
  if (n == 0) return s;
  double sum = 0;
  each([&](double x, std::int64_t count) {
    for (std::int64_t k = 0; k < count; ++k) sum += x;
  });
  const double mean = sum / static_cast<double>(n);
  double var = 0;
  each([&](double x, std::int64_t count) {
    for (std::int64_t k = 0; k < count; ++k) var += (x - mean) * (x - mean);
  });
  const auto q = [&](double p) { return quantile_of(static_cast<std::size_t>(n), p, at); };
  s.count = n;
  s.mean_ms = 1e3 * mean;
  s.std_ms = 1e3 * std::sqrt(var / static_cast<double>(n));
  s.median_ms = 1e3 * q(0.5);
  s.p90_ms = 1e3 * q(0.9);
  s.p99_ms = 1e3 * q(0.99);
  for (auto& [p, ms] : s.percentiles_ms) ms = 1e3 * q(p / 100);
  return s;
}
}  // namespace

LatencyStats latency_stats(std::vector<double> seconds, const std::vector<double>& percentiles) {
  sort_doubles(seconds);  // std::sort's order, faster on large vectors
  return stats_of_ascending(
      static_cast<std::int64_t>(seconds.size()),
      [&](const auto& fn) {
        for (const double x : seconds) fn(x, 1);
      },
      [&](std::size_t i) { return seconds[i]; }, percentiles);
}

LatencyStats latency_stats_of_runs(FloatRuns seconds, const std::vector<double>& percentiles) {
  seconds.sort();
  // The i-th value: the run that holds it, found by walking the runs from the last one found (the
  // quantiles are asked mostly in ascending order: a few walks over the runs in all, no memory).
  std::size_t run = 0;
  std::int64_t run_start = 0;
  const auto at = [&](std::size_t index) {
    const auto i = static_cast<std::int64_t>(index);
    if (i < run_start) run = 0, run_start = 0;
    while (run_start + seconds.run(run).count <= i) run_start += seconds.run(run++).count;
    return seconds.run(run).value;
  };
  return stats_of_ascending(
      seconds.size(), [&](const auto& fn) { seconds.for_each(fn); }, at, percentiles);
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
