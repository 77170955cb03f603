// vLLM (SOSP'23) Fig. 18b: latency and fragmentation of the paged backend against its block size.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "experiments/figures/figure_kit.hpp"
#include "experiments/figures/figure_list.hpp"

namespace kvlab::fig {

namespace {
const std::vector<int> kSizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
/// Block sizes whose latency is within this fraction of a workload's lowest count as "near the best"
/// (a rule stated in the README, fixed before looking at the data).
constexpr double kNearBest = 0.05;

struct Workload {
  std::string label;
  std::vector<Request> requests;
  int paper_best_lo, paper_best_hi;  ///< the block sizes the paper finds best (Fig. 18b text)
  double rate = 0;                   ///< offered load, req/s
  double saturation = 0;             ///< paged-16's sustained rate on these lengths (request-rate's rule)
};

/// paged-16's sustained rate on the lengths `make` draws (request-rate's rule: where its normalized
/// latency passes kSaturationLatencyFactor x its latency at the lowest rate swept).
double saturation_rate(const FigureContext& ctx, const std::function<std::vector<Request>(double)>& make,
                       const std::vector<double>& rates) {
  std::vector<double> lat;
  for (double r : rates)
    lat.push_back(run(ctx, "paged-16", opt13b_12gb(), make(r), a100_40gb()).summary.mean_normalized_latency_s);
  return crossing_rate(rates, lat, kSaturationLatencyFactor * lat.front());
}

struct Point {
  int block = 0;
  ReplaySummary s;
  [[nodiscard]] double latency() const { return s.mean_normalized_latency_s; }
  [[nodiscard]] double waste() const { return s.mean_fractions.internal_fragmentation + s.mean_fractions.reserved; }
};

/// The offered rate over the sustained one, as data.csv holds it ("2.09"; "n/a" without a sustained rate).
std::string load_ratio(const Workload& w) {
  return std::isfinite(w.saturation) && w.saturation > 0 ? fixed(w.rate / w.saturation, 2) : "n/a";
}

/// Where one workload's minimum lies, from the data, against the paper's best range.
std::string verdict(const Workload& w, const std::vector<Point>& pts, Facts& f) {
  const Point& best = *std::min_element(pts.begin(), pts.end(), [](const Point& a, const Point& b) {
    return a.latency() < b.latency();  // the smallest block wins a tie
  });
  std::string near;
  for (const Point& p : pts)
    if (p.latency() <= best.latency() * (1 + kNearBest)) near += (near.empty() ? "" : ", ") + std::to_string(p.block);
  const bool inside = best.block >= w.paper_best_lo && best.block <= w.paper_best_hi;
  const Point &first = pts.front(), &last = pts.back();
  const bool small_side = first.latency() > best.latency() * (1 + kNearBest);
  const bool large_side = last.latency() > best.latency() * (1 + kNearBest);
  return fmt::format(
      "- {} (offered load {} of paged-16's sustained rate, {} req/s; mean TTFT {} s at block 16): lowest latency at "
      "block {} ({:.4f} s/token), {} the paper's best range {}-{}; within {:.0f} % of it: "
      "blocks {}. Block {} is {} % and block {} {} % from the lowest; block-tail waste (internal + "
      "reserved) {} % at block {}, {} % at block {}. Small-block side of the trade-off: {}; large-block side: {}.",
      w.label, load_ratio(w) == "n/a" ? "n/a" : load_ratio(w) + "x", fixed(w.saturation, 3),
      fixed(pts[4].s.mean_ttft_s, 1), best.block, best.latency(), inside ? "inside" : "outside", w.paper_best_lo,
      w.paper_best_hi, 100 * kNearBest, near, first.block,
      with_sign(f.quote(fmt::format("{}: block {} latency vs the lowest (%)", w.label, first.block),
                        100 * relative_error(first.latency(), best.latency()), 1, "this run (latency_vs_best)")),
      last.block,
      with_sign(f.quote(fmt::format("{}: block {} latency vs the lowest (%)", w.label, last.block),
                        100 * relative_error(last.latency(), best.latency()), 1, "this run (latency_vs_best)")),
      pct(first.waste()), first.block, pct(last.waste()), last.block,
      small_side ? "present (small blocks are slower)" : "absent in this clock (small blocks are not slower)",
      large_side ? "present (large blocks are slower)" : "absent (large blocks are not slower)");
}

void add_rows(Table& t, const Workload& w, const std::vector<Point>& pts) {
  double best = pts.front().latency();
  for (const Point& p : pts) best = std::min(best, p.latency());
  for (const Point& p : pts) {
    const ReplaySummary& s = p.s;
    t.add({w.label, fixed(w.rate, 3), fixed(w.saturation, 3), load_ratio(w), std::to_string(p.block),
           fixed(s.mean_normalized_latency_s, 4), fixed(best > 0 ? p.latency() / best : 0, 3), fixed(s.mean_ttft_s, 3),
           pct(s.mean_fractions.token_states), pct(s.mean_fractions.reserved),
           pct(s.mean_fractions.internal_fragmentation), pct(p.waste()), fixed(s.mean_batch),
           std::to_string(s.preemptions)});
  }
}

void block_size(const FigureContext& ctx) {
  const std::int64_t n = ctx.full ? 2000 : 300;
  const int points = ctx.full ? 16 : 10;
  const auto sharegpt_at = [&](double r) { return sharegpt_vllm_filtered(ctx, r, n); };
  const auto alpaca_at = [&](double r) { return alpaca_like(r, n); };
  const double sharegpt_sat = saturation_rate(ctx, sharegpt_at, geometric_rates(0.05, 4, points));
  const double alpaca_sat = saturation_rate(ctx, alpaca_at, geometric_rates(1, 120, points));
  // The paper's loads, and ShareGPT at half paged-16's sustained rate: at 2 req/s the shared
  // trace is past saturation and queueing, not the block size, dominates the latency.
  const double below = std::isfinite(sharegpt_sat) ? std::round(sharegpt_sat * 500) / 1000 : 0.5;
  std::vector<Workload> workloads = {
      {"ShareGPT @ 2 req/s", sharegpt_at(2.0), 16, 128, 2.0, sharegpt_sat},
      {fmt::format("ShareGPT @ {} req/s", fixed(below, 3)), sharegpt_at(below), 16, 128, below, sharegpt_sat},
      {"Alpaca-like @ 30 req/s", alpaca_at(30.0), 16, 32, 30.0, alpaca_sat}};
  Table t{{"workload", "request_rate_per_s", "saturation_rate_per_s", "load_vs_saturation_ratio", "block_size",
           "mean_normalized_latency_s", "latency_vs_best_ratio", "ttft_mean_s", "token_states_pct", "reserved_pct",
           "internal_fragmentation_pct", "block_tail_waste_pct", "mean_batch", "preemptions"}};
  std::string verdicts;
  Facts facts;
  for (const Workload& w : workloads) {
    std::vector<Point> pts;
    for (int b : kSizes)
      pts.push_back({b, run(ctx, fmt::format("paged-{}", b), opt13b_12gb(), w.requests, a100_40gb()).summary});
    add_rows(t, w, pts);
    verdicts += verdict(w, pts, facts) + "\n";
  }
  publish(
      ctx,
      {"block-size", "vLLM (SOSP'23) Figure 18b: latency and fragmentation against block size",
       "OPT-13B, 12 GB of KV, vLLM v0 scheduling (prompt steps and decode steps apart, its CPU time per step), paged "
       "backend at block sizes 1..256; ShareGPT lengths (filtered as "
       "vLLM's benchmarks sample ShareGPT, prompts of at most 1024 tokens and prompt + output within OPT's 2048, "
       "before arrivals are drawn) at 2 req/s (the paper's load) and at half paged-16's sustained rate, and "
       "Alpaca-like lengths (lognormal, means ~19 / ~58 tokens) at 30 req/s; `saturation_rate_per_s` is paged-16's "
       "sustained rate on the same lengths (request-rate's rule: where its normalized latency passes 4x its "
       "latency at the lowest rate of a sweep), `load_vs_saturation_ratio` the offered rate over it",
       modelled_a100(),
       fmt::format("Paper: block sizes 16 to 128 are best on ShareGPT, 16 to 32 on Alpaca; smaller blocks lose on GPU "
                   "kernel efficiency (more block-table lookups, less parallelism per block), larger ones on internal "
                   "fragmentation. Ours, read from the table above (`latency_vs_best_ratio` = latency / "
                   "the workload's lowest; a block size counts as near the best within {:.0f} %, a rule fixed before "
                   "looking at the data):\n\n{}\n"
                   "Whether small blocks cost latency here depends only on whether the clock charges anything per "
                   "block (see the clock sources); the host-measured kernel side is in `kernel-overhead`.",
                   100 * kNearBest, verdicts),
       clock_sources(a100_40gb().device), facts},
      t);
}
}  // namespace

Figure block_size_figure() {
  return {"block-size", "vLLM Fig. 18b: latency and fragmentation vs block size", block_size};
}

}  // namespace kvlab::fig
