#pragma once
// Serving metrics as vLLM's `bench serve` defines them (docs/metrics.md): time to first token
// (TTFT), time per output token after the first (TPOT), inter-token latency (ITL: the gap between a
// request's consecutive tokens), end-to-end latency (E2EL), each summarised by its mean, median,
// standard deviation and percentiles in milliseconds; and goodput: the requests that meet every
// service-level objective given, per second (DistServe's SLO attainment as a fraction).
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "serving/support/float_runs.hpp"

namespace kvlab {

/// One latency's distribution, in milliseconds. Percentiles interpolate linearly between the two
/// nearest ranks (numpy.percentile's default, as vLLM computes them); std is the population one.
struct LatencyStats {
  std::int64_t count = 0;
  double mean_ms = 0, median_ms = 0, std_ms = 0, p90_ms = 0, p99_ms = 0;
  /// The percentiles asked for (--percentiles, vLLM's --metric-percentiles): (percentile 0-100,
  /// value in ms), in the order asked. The files write these; p90_ms and p99_ms are always there
  /// for the console table.
  std::vector<std::pair<double, double>> percentiles_ms = {};
};

/// The percentiles the files report by default.
inline const std::vector<double> kDefaultPercentiles = {90, 99};

/// "90,99" / "50,95,99.9": 1 to 10 distinct numbers in (0, 100], ascending. InvalidArgument naming
/// the value otherwise.
[[nodiscard]] std::vector<double> parse_percentiles(const std::string& spec);

/// The column suffix of a percentile: "p99", "p99_9" (no dot in a column name).
[[nodiscard]] std::string percentile_name(double p);

/// The q-quantile (0..1) of non-empty `sorted`, linear between the two nearest ranks
/// (numpy.percentile's default method).
[[nodiscard]] double quantile(const std::vector<double>& sorted, double q);

/// The distribution of `seconds` (any order; empty: all zero).
[[nodiscard]] LatencyStats latency_stats(std::vector<double> seconds,
                                         const std::vector<double>& percentiles = kDefaultPercentiles);

/// The same statistics of `seconds` kept as runs (the replayer's inter-token gaps, millions in a
/// run of a trace): to the bit those of the values converted to double, one by one.
[[nodiscard]] LatencyStats latency_stats_of_runs(FloatRuns seconds,
                                                 const std::vector<double>& percentiles = kDefaultPercentiles);

/// Service-level objectives for goodput, in milliseconds; +inf: no objective on that latency.
struct ServingSlo {
  double ttft_ms = std::numeric_limits<double>::infinity();
  double tpot_ms = std::numeric_limits<double>::infinity();
  double e2el_ms = std::numeric_limits<double>::infinity();
  [[nodiscard]] bool any() const noexcept;
  /// Whether one request with these latencies (seconds; tpot < 0: it has none) meets every objective.
  [[nodiscard]] bool met(double ttft_s, double tpot_s, double e2el_s) const noexcept;
};

/// "ttft:MS,tpot:MS,e2el:MS" (any subset, each once, MS > 0) as vLLM's --goodput takes them.
/// InvalidArgument naming the bad part otherwise.
[[nodiscard]] ServingSlo parse_goodput(const std::string& spec);

}  // namespace kvlab
