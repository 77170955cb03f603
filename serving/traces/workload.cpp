#include "serving/traces/workload.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "alloc/core/error.hpp"

namespace kvlab {

namespace {
constexpr double kMaxLength = 10'000'000;  // the longest request kvlab accepts anywhere (traces too)

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (std::size_t pos = 0;;) {
    const std::size_t next = s.find(sep, pos);
    out.push_back(s.substr(pos, next - pos));
    if (next == std::string_view::npos) return out;
    pos = next + 1;
  }
}
double number(std::string_view text, std::string_view what, std::string_view whole) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v)) {
    KVLAB_THROW(InvalidArgument, std::string(what) + " length '" + std::string(whole) + "': '" + std::string(text) +
                                     "' is not a number");
  }
  return v;
}
}  // namespace

LengthDistribution LengthDistribution::parse(std::string_view text, std::string_view what) {
  const auto parts = split(text, ':');
  LengthDistribution d;
  const auto bad = [&](const std::string& why) {
    KVLAB_THROW(InvalidArgument, std::string(what) + " length '" + std::string(text) + "': " + why +
                                     " (expected fixed:N, uniform:LO:HI or lognormal:MU:SIGMA[:MAX])");
  };
  if (parts[0] == "fixed" && parts.size() == 2) {
    d.kind = Kind::fixed;
    d.a = d.b = number(parts[1], what, text);
    if (d.a < 1 || d.a > kMaxLength || d.a != std::floor(d.a)) bad("length must be a whole number in 1..10000000");
  } else if (parts[0] == "uniform" && parts.size() == 3) {
    d.kind = Kind::uniform;
    d.a = number(parts[1], what, text);
    d.b = number(parts[2], what, text);
    if (d.a < 1 || d.b < d.a || d.b > kMaxLength || d.a != std::floor(d.a) || d.b != std::floor(d.b))
      bad("need whole numbers 1 <= LO <= HI <= 10000000");
  } else if (parts[0] == "lognormal" && (parts.size() == 3 || parts.size() == 4)) {
    d.kind = Kind::lognormal;
    d.a = number(parts[1], what, text);
    d.b = number(parts[2], what, text);
    if (parts.size() == 4) d.max = number(parts[3], what, text);
    if (d.b < 0 || d.b > 10 || std::abs(d.a) > 20 || d.max < 1 || d.max > kMaxLength)
      bad("need |MU| <= 20, 0 <= SIGMA <= 10 and 1 <= MAX <= 10000000");
  } else {
    bad("unknown form");
  }
  return d;
}

std::int64_t LengthDistribution::sample(std::mt19937_64& rng) const {
  switch (kind) {
    case Kind::fixed:
      return static_cast<std::int64_t>(a);
    case Kind::uniform:
      return std::uniform_int_distribution<std::int64_t>(static_cast<std::int64_t>(a),
                                                         static_cast<std::int64_t>(b))(rng);
    case Kind::lognormal: {
      const double x = std::lognormal_distribution<double>(a, b)(rng);
      return static_cast<std::int64_t>(std::clamp(std::round(x), 1.0, max));
    }
  }
  return 1;
}

std::string LengthDistribution::describe() const {
  switch (kind) {
    case Kind::fixed:
      return "fixed:" + std::to_string(static_cast<std::int64_t>(a));
    case Kind::uniform:
      return "uniform:" + std::to_string(static_cast<std::int64_t>(a)) + ":" +
             std::to_string(static_cast<std::int64_t>(b));
    case Kind::lognormal:
      return "lognormal:" + std::to_string(a) + ":" + std::to_string(b);
  }
  return "?";
}

std::vector<Request> generate(const SyntheticWorkload& w) {
  KVLAB_EXPECTS(w.num_requests >= 0, "request count must not be negative");
  KVLAB_EXPECTS(w.rate >= 0 && std::isfinite(w.rate), "arrival rate must be a finite number >= 0");
  KVLAB_EXPECTS(w.burstiness > 0 && std::isfinite(w.burstiness), "burstiness must be a positive number");
  KVLAB_EXPECTS(w.prefix_groups >= 0, "prefix groups must not be negative");
  KVLAB_EXPECTS(w.shared_prefix_tokens >= 0, "shared prefix tokens must not be negative");
  // Bounds that keep a small command from asking for unbounded memory, and the token ids of
  // shared prefixes (group x 100,000 + position) below the unique ids (from 2^30).
  KVLAB_EXPECTS(
      w.shared_prefix_tokens <= kMaxSharedPrefixTokens,
      fmt::format("shared prefix tokens must be at most {} (got {})", kMaxSharedPrefixTokens, w.shared_prefix_tokens));
  KVLAB_EXPECTS(w.prefix_groups <= kMaxPrefixGroups,
                fmt::format("prefix groups must be at most {} (got {})", kMaxPrefixGroups, w.prefix_groups));
  KVLAB_EXPECTS(w.turns >= 1, "turns per conversation must be at least 1");
  const std::int64_t conversations = w.turns > 1 ? (w.num_requests + w.turns - 1) / w.turns : 0;
  std::vector<std::vector<std::int32_t>> history(static_cast<std::size_t>(conversations));
  std::mt19937_64 rng(w.seed);
  const double shape = 1.0 / (w.burstiness * w.burstiness);
  std::gamma_distribution<double> gap(shape, w.rate > 0 ? 1.0 / (w.rate * shape) : 1.0);
  std::uniform_int_distribution<std::size_t> pick(0, w.resample.empty() ? 0 : w.resample.size() - 1);
  std::vector<Request> out;
  out.reserve(static_cast<std::size_t>(w.num_requests));
  double t = 0;
  std::int32_t next_token = std::int32_t{1} << 30;  // unique (unshared) token ids start above every shared one
  for (std::int64_t i = 0; i < w.num_requests; ++i) {
    if (w.rate > 0 && i > 0) t += gap(rng);
    Request r;
    r.id = i;
    r.arrival_s = t;
    if (!w.resample.empty()) {
      const auto& [p, o] = w.resample[pick(rng)];
      r.prompt_tokens = p;
      r.output_tokens = o;
    } else {
      r.prompt_tokens = w.prompt.sample(rng);
      r.output_tokens = w.output.sample(rng);
    }
    if (conversations > 0) {
      auto& h = history[static_cast<std::size_t>(i % conversations)];
      r.prompt_token_ids = h;
      for (std::int64_t k = 0; k < r.prompt_tokens; ++k) r.prompt_token_ids.push_back(next_token++);
      r.prompt_tokens = static_cast<std::int64_t>(r.prompt_token_ids.size());
      h = r.prompt_token_ids;  // the next turn sees this prompt and this answer
      for (std::int64_t k = 0; k < r.output_tokens; ++k) h.push_back(next_token++);
    } else if (w.prefix_groups > 0 && w.shared_prefix_tokens > 0) {
      const auto group = static_cast<std::int32_t>(i % w.prefix_groups);
      r.prompt_tokens = std::max(r.prompt_tokens, w.shared_prefix_tokens + 1);
      r.prompt_token_ids.reserve(static_cast<std::size_t>(r.prompt_tokens));
      for (std::int64_t k = 0; k < w.shared_prefix_tokens; ++k)
        r.prompt_token_ids.push_back(group * 100'000 + static_cast<std::int32_t>(k % 100'000));
      while (static_cast<std::int64_t>(r.prompt_token_ids.size()) < r.prompt_tokens)
        r.prompt_token_ids.push_back(next_token++);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kvlab
