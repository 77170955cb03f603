#pragma once
// Side-by-side benchmarks measure several things in rounds, one after the other, and report the
// median round: this host's speed drifts by tens of percent within seconds (other tenants), and a
// ratio taken within one round cancels the drift that separate benchmarks would each see apart.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace kvlab::bench {

/// Each round's values under their counter names; reported as the median round and the spread
/// (`<name>_median`, `_min`, `_max`).
struct RoundSeries {
  std::map<std::string, std::vector<double>> series;
  void add(const std::string& name, double x) { series[name].push_back(x); }
  void report(benchmark::State& state) const {
    for (const auto& [name, values] : series) {
      std::vector<double> x = values;
      std::sort(x.begin(), x.end());
      state.counters[name + "_median"] = x[x.size() / 2];
      state.counters[name + "_min"] = x.front();
      state.counters[name + "_max"] = x.back();
    }
  }
};

}  // namespace kvlab::bench
