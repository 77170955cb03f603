#pragma once
// Requests a replay serves, and the seeded synthetic generator. Trace readers (issue: replayer)
// produce the same Request type.
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvlab {

struct Request {
  std::int64_t id = 0;
  double arrival_s = 0;  ///< seconds since the start of the workload
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;  ///< tokens generated (>= 1)

  // Optional prefix information from traces that carry it (serving/traces/trace_reader.hpp); empty
  // for synthetic workloads and length-only traces. Consumers must treat empty as "unknown".

  /// Chained prefix-block hashes (Mooncake `hash_ids`): one id per `prefix_hash_block` prompt
  /// tokens, the last block possibly partial; equal ids at position i mean equal first
  /// (i + 1) * prefix_hash_block prompt tokens. Size == ceil(prompt_tokens / prefix_hash_block).
  std::vector<std::int64_t> prefix_hashes = {};
  std::int32_t prefix_hash_block = 0;  ///< tokens per entry of prefix_hashes; 0 when there are none
  /// The prompt's token ids (LLMServingSim `input_tok_ids`), size == prompt_tokens, or empty.
  std::vector<std::int32_t> prompt_token_ids = {};
};

/// A token-length distribution: "fixed:N", "uniform:LO:HI" (inclusive), or
/// "lognormal:MU:SIGMA[:MAX]" (natural-log parameters, clamped to [1, MAX]).
struct LengthDistribution {
  enum class Kind { fixed, uniform, lognormal } kind = Kind::fixed;
  double a = 1, b = 1, max = 1e7;

  /// Throws InvalidArgument naming `what` and the bad text.
  static LengthDistribution parse(std::string_view text, std::string_view what);
  [[nodiscard]] std::int64_t sample(std::mt19937_64& rng) const;
  [[nodiscard]] std::string describe() const;
};

struct SyntheticWorkload {
  std::int64_t num_requests = 200;
  double rate = 0;  ///< arrivals per second; 0 = everything arrives at t = 0
  /// Inter-arrival gaps are gamma distributed with this coefficient of variation: 1 is a Poisson
  /// process, above 1 burstier, below 1 more regular (shape 1/cv^2, mean 1/rate).
  double burstiness = 1.0;
  LengthDistribution prompt = LengthDistribution::parse("uniform:16:1024", "prompt");
  LengthDistribution output = LengthDistribution::parse("uniform:16:512", "output");
  /// When non-empty, (prompt, output) pairs are drawn from here instead (lengths resampled from a
  /// trace, keeping each request's prompt/output correlation).
  std::vector<std::pair<std::int64_t, std::int64_t>> resample;
  /// Shared-prefix groups: request i belongs to group i % prefix_groups and its prompt starts with
  /// that group's shared_prefix_tokens tokens (a system prompt); prompt_token_ids are generated.
  int prefix_groups = 0;
  std::int64_t shared_prefix_tokens = 0;
  /// Multi-turn chats: requests form conversations of this many turns (request i belongs to
  /// conversation i % ceil(n / turns), so turns interleave in time); a turn's prompt is the whole
  /// conversation so far (earlier prompts and answers) plus a new message of the prompt length.
  /// prompt_token_ids are generated. 1: independent requests.
  int turns = 1;
  std::uint64_t seed = 0;
};

/// Largest shared system prompt and most prefix groups a synthetic workload accepts.
inline constexpr std::int64_t kMaxSharedPrefixTokens = std::int64_t{1} << 20;
inline constexpr int kMaxPrefixGroups = 10'000;

/// Deterministic for a given config (seeded std::mt19937_64).
[[nodiscard]] std::vector<Request> generate(const SyntheticWorkload& w);

}  // namespace kvlab
