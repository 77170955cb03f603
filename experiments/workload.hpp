#pragma once
// Requests a replay serves, and the seeded synthetic generator. Trace readers (issue: replayer)
// produce the same Request type.
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace kvlab {

struct Request {
  std::int64_t id = 0;
  double arrival_s = 0;  ///< seconds since the start of the workload
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;  ///< tokens generated (>= 1)
};

/// A token-length distribution: "fixed:N", "uniform:LO:HI" (inclusive), or
/// "lognormal:MU:SIGMA[:MAX]" (natural-log parameters, clamped to [1, MAX]).
struct LengthDistribution {
  enum class Kind { fixed, uniform, lognormal } kind = Kind::fixed;
  double a = 1, b = 1, max = 1e9;

  /// Throws InvalidArgument naming `what` and the bad text.
  static LengthDistribution parse(std::string_view text, std::string_view what);
  [[nodiscard]] std::int64_t sample(std::mt19937_64& rng) const;
  [[nodiscard]] std::string describe() const;
};

struct SyntheticWorkload {
  std::int64_t num_requests = 200;
  double rate = 0;  ///< Poisson arrivals per second; 0 = everything arrives at t = 0
  LengthDistribution prompt = LengthDistribution::parse("uniform:16:1024", "prompt");
  LengthDistribution output = LengthDistribution::parse("uniform:16:512", "output");
  std::uint64_t seed = 0;
};

/// Deterministic for a given config (seeded std::mt19937_64).
[[nodiscard]] std::vector<Request> generate(const SyntheticWorkload& w);

}  // namespace kvlab
