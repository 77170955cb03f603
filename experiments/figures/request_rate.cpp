// vLLM (SOSP'23) Fig. 12: normalized latency (end-to-end latency over output tokens, averaged over
// requests) against the request rate, for Orca (Max), Orca (Pow2), Orca (Oracle) and vLLM, with
// OPT-13B on one A100-40GB; and the rate each system sustains at a fixed normalized latency.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "experiments/figures/figure_kit.hpp"
#include "experiments/figures/figure_list.hpp"
#include "experiments/figures/orca_vs_vllm.hpp"

namespace kvlab::fig {

namespace {
struct RateWorkload {
  std::string label;
  std::function<std::vector<Request>(double rate)> make;
  std::vector<double> rates;
  bool paper_lengths = false;  ///< the paper's mean lengths: its stated ranges apply
};

std::vector<RateWorkload> workloads(const FigureContext& ctx) {
  const std::int64_t n = ctx.full ? 2000 : 300;
  const int points = ctx.full ? 16 : 10;
  return {
      {"ShareGPT (vLLM's lengths)", [n](double r) { return sharegpt_vllm_lengths(r, n); },
       geometric_rates(0.1, 8, points), true},
      {"ShareGPT (shared trace)", [&ctx, n](double r) { return sharegpt_vllm_filtered(ctx, r, n); },
       geometric_rates(0.05, 4, points), false},
      {"Alpaca-like", [n](double r) { return alpaca_like(r, n); }, geometric_rates(1, 120, points), false},
  };
}

/// One system's curve: the rates it ran at (ascending) and its result at each; `bisected` marks
/// the points added around the crossing.
struct Curve {
  std::vector<double> rates;
  std::vector<ReplaySummary> results;
  std::vector<bool> bisected;

  [[nodiscard]] std::vector<double> latencies() const {
    std::vector<double> l;
    for (const ReplaySummary& r : results) l.push_back(r.mean_normalized_latency_s);
    return l;
  }
  /// Where the latency first passes `threshold`, interpolated (crossing_rate over every point).
  [[nodiscard]] double sustained(double threshold) const { return crossing_rate(rates, latencies(), threshold); }
};

/// Narrows the two points around the curve's first crossing of `threshold` by bisection: `steps`
/// more runs of this system alone, each at the geometric middle of the current pair. A sweep's
/// neighbouring rates are 30-60 % apart, and a linear interpolation across a curve that turns
/// that sharply misplaces the crossing by up to the whole gap; after 5 steps the pair is 1-2 %
/// apart. Points are kept in rate order, so the crossing read from all of them is the bisection's.
void bisect(Curve& c, double threshold, int steps, const std::function<ReplaySummary(double)>& run_at) {
  for (int k = 0; k < steps; ++k) {
    const std::vector<double> lat = c.latencies();
    if (lat.empty() || lat.front() > threshold) return;
    std::size_t i = 1;
    while (i < lat.size() && lat[i] <= threshold) ++i;
    if (i == lat.size()) return;
    const double mid = std::sqrt(c.rates[i - 1] * c.rates[i]);
    const auto at = static_cast<std::ptrdiff_t>(i);
    c.rates.insert(c.rates.begin() + at, mid);
    c.results.insert(c.results.begin() + at, run_at(mid));
    c.bisected.insert(c.bisected.begin() + at, true);
  }
}

/// vLLM's sustained rate over another system's, as a text ("1.89x"), or why there is none; the
/// ratio recorded in `f` as `quantity`.
std::string ratio_text(double vllm, double other, Facts& f, const std::string& quantity) {
  if (std::isnan(vllm) || std::isnan(other) || std::isinf(vllm) || std::isinf(other))
    return "n/a (a rate outside the sweep)";
  return f.quote(quantity, vllm / other, 2, "this run (sustained_rate)") + "x";
}

std::string rate_text(double r) {
  if (std::isnan(r)) return "below the lowest rate";
  if (std::isinf(r)) return "above the highest rate";
  return fixed(r, 3);
}

/// vLLM's sustained rate against Orca (Oracle)'s and Orca (Max)'s beside the paper's ranges, on the
/// workload with the paper's lengths: the claims, and the README's sentence.
std::string against_paper(const std::string& label, const std::vector<double>& sustained, Facts& f) {
  const std::string sec62 = "vLLM (SOSP'23) sec. 6.2, ShareGPT, OPT-13B/66B/175B";
  const double v = sustained.back();
  // Inside or outside, from the ratios as printed.
  const auto within = [](double vllm, double other, double lo, double hi) {
    if (!std::isfinite(vllm) || !std::isfinite(other)) return std::string("not comparable");
    const double r = std::round(vllm / other * 100) / 100;
    return std::string(r >= lo && r <= hi ? "inside" : r < lo ? "below" : "above");
  };
  if (std::isfinite(v) && std::isfinite(sustained[2]) && std::isfinite(sustained[0])) {
    f.claim(label + ": vLLM / Orca (Oracle) sustained rate, against the range's low end", v / sustained[2], 1.7, 2,
            sec62 + ": 1.7x-2.7x");
    f.claim(label + ": vLLM / Orca (Max) sustained rate, against the range's low end", v / sustained[0], 2.7, 2,
            sec62 + ": 2.7x-8x");
  }
  return fmt::format(
      " The paper (sec. 6.2, ShareGPT, over its OPT-13B/66B/175B settings): {}x-{}x Orca (Oracle)'s rate and "
      "{}x-{}x Orca (Max)'s at similar latency; ours is {} the first range and {} the second.",
      f.quote("paper: vLLM / Orca (Oracle), low", 1.7, 1, sec62),
      f.quote("paper: vLLM / Orca (Oracle), high", 2.7, 1, sec62),
      f.quote("paper: vLLM / Orca (Max), low", 2.7, 1, sec62), f.quote("paper: vLLM / Orca (Max), high", 8, 0, sec62),
      within(v, sustained[2], 1.7, 2.7), within(v, sustained[0], 2.7, 8.0));
}

/// Where vLLM's curve turns against where Orca (Oracle)'s does, from the points around each crossing:
/// the batch each reaches and its time per output token, whose ratios make the rate ratio (a rate
/// sustained is about batch / time per token / output tokens); with vLLM's preemptions there.
std::string turn_text(const RateWorkload& w, const std::vector<Curve>& curves, const std::vector<double>& sustained,
                      Facts& f) {
  const std::size_t vllm = sustained.size() - 1, oracle = 2;
  // The last point at or below a sustained rate: the busiest run still under the threshold.
  const auto below = [](const Curve& c, double rate) {
    std::size_t i = 0;
    while (i + 1 < c.rates.size() && c.rates[i + 1] <= rate) ++i;
    return i;
  };
  if (!std::isfinite(sustained[vllm]) || !std::isfinite(sustained[oracle])) return "";
  const Curve &cv = curves[vllm], &co = curves[oracle];
  const std::size_t iv = below(cv, sustained[vllm]), io = below(co, sustained[oracle]);
  if (iv + 1 >= cv.rates.size()) return "";
  const ReplaySummary &v = cv.results[iv], &past = cv.results[iv + 1], &o = co.results[io];
  const std::string why = past.preemptions > v.preemptions
                              ? "its KV is full: preempted requests recompute their prompts"
                              : "its preemptions do not grow: the time per step, not the KV, bounds it";
  return fmt::format(
      " Where the curves turn: vLLM at {} req/s runs a mean batch of {} at {} s per output token ({} preemptions), "
      "and at {} req/s a batch of {} with {} preemptions at {} s per token ({}); Orca (Oracle) at {} req/s runs {} "
      "at {} s. There vLLM's batch is {}x Orca (Oracle)'s and its time per token {}x, a throughput ratio of {}x: "
      "the rate ratio is set by the batch each reaches before it saturates and by what a larger batch costs each "
      "step.",
      fixed(cv.rates[iv], 3), fixed(v.mean_batch), fixed(v.mean_tpot_s, 4), v.preemptions, fixed(cv.rates[iv + 1], 3),
      fixed(past.mean_batch), past.preemptions, fixed(past.mean_tpot_s, 4), why, fixed(co.rates[io], 3),
      fixed(o.mean_batch), fixed(o.mean_tpot_s, 4),
      f.quote(w.label + ": vLLM / Orca (Oracle) mean batch where each turns", v.mean_batch / o.mean_batch, 2,
              "this run (mean_batch)"),
      f.quote(w.label + ": vLLM / Orca (Oracle) time per output token where each turns", v.mean_tpot_s / o.mean_tpot_s,
              2, "this run (tpot_mean_s)"),
      f.quote(w.label + ": vLLM / Orca (Oracle) batch over time per token where each turns",
              (v.mean_batch / v.mean_tpot_s) / (o.mean_batch / o.mean_tpot_s), 2,
              "this run (mean_batch, tpot_mean_s)"));
}

void request_rate(const FigureContext& ctx) {
  Table t{{"workload", "system", "backend", "arena", "request_rate_per_s", "point", "mean_normalized_latency_s",
           "ttft_mean_s", "tpot_mean_s", "completed", "rejected", "preemptions", "mean_batch",
           "threshold_normalized_latency_s", "sustained_rate_per_s"}};
  std::string findings;
  Facts f;
  const int bisection_steps = ctx.full ? 5 : 3;
  for (const RateWorkload& w : workloads(ctx)) {
    std::vector<OrcaVsVllm> sweep;
    for (double rate : w.rates) sweep.push_back(orca_vs_vllm(ctx, w.make(rate)));
    const OrcaVsVllm& first = sweep.front();
    const double threshold = kSaturationLatencyFactor * first.results.back().mean_normalized_latency_s;
    std::vector<Curve> curves(first.backends.size());
    std::vector<double> sustained;
    for (std::size_t s = 0; s < first.backends.size(); ++s) {
      Curve& c = curves[s];
      c.rates = w.rates;
      for (const auto& r : sweep) c.results.push_back(r.results[s]);
      c.bisected.assign(w.rates.size(), false);
      bisect(c, threshold, bisection_steps, [&](double rate) {
        return run(ctx, first.backends[s], opt13b_12gb(), w.make(rate), a100_40gb()).summary;
      });
      sustained.push_back(c.sustained(threshold));
    }
    for (std::size_t s = 0; s < first.backends.size(); ++s)
      for (std::size_t i = 0; i < curves[s].rates.size(); ++i) {
        const ReplaySummary& r = curves[s].results[i];
        const bool paged = first.backends[s].starts_with("paged");
        t.add({w.label, first.labels[s], first.backends[s], paged ? "block pool" : "buddy",
               fixed(curves[s].rates[i], 3), curves[s].bisected[i] ? "bisection" : "sweep",
               fixed(r.mean_normalized_latency_s, 4), fixed(r.mean_ttft_s, 3), fixed(r.mean_tpot_s, 4),
               std::to_string(r.completed), std::to_string(r.rejected), std::to_string(r.preemptions),
               fixed(r.mean_batch), fixed(threshold, 4), rate_text(sustained[s])});
      }
    const auto [prompt, output] = mean_lengths(w.make(w.rates.front()));
    findings += fmt::format(
        "\n\n{} (mean prompt {}, output {} tokens): at {} s/token ({}x vLLM's at {} req/s) "
        "the sustained rates (req/s) are ",
        w.label, f.quote(w.label + ": mean prompt tokens", prompt, 1, "this run's workload"),
        f.quote(w.label + ": mean output tokens", output, 1, "this run's workload"), fixed(threshold, 4),
        f.quote("sustained: latency factor over the unloaded", kSaturationLatencyFactor, 0,
                "setup (kSaturationLatencyFactor)"),
        fixed(w.rates.front(), 3));
    for (std::size_t s = 0; s < first.backends.size(); ++s)
      findings += fmt::format("{}{} {}", s ? ", " : "", first.labels[s], rate_text(sustained[s]));
    const double v = sustained.back();
    findings += fmt::format("; vLLM sustains {} Orca (Oracle)'s rate, {} Orca (Pow2)'s and {} Orca (Max)'s.",
                            ratio_text(v, sustained[2], f, w.label + ": vLLM / Orca (Oracle) sustained rate"),
                            ratio_text(v, sustained[1], f, w.label + ": vLLM / Orca (Pow2) sustained rate"),
                            ratio_text(v, sustained[0], f, w.label + ": vLLM / Orca (Max) sustained rate"));
    findings += turn_text(w, curves, sustained, f);
    if (w.paper_lengths) findings += against_paper(w.label, sustained, f);
  }
  const std::string notes = fmt::format(
      "Normalized latency = a request's end-to-end latency over its output tokens, averaged over the completed "
      "requests (the paper's Fig. 12 metric). A system's sustained rate is where its curve first passes a fixed "
      "normalized latency: {}x vLLM's at the lowest rate swept (the unloaded latency). The sweep's rates "
      "(`point` sweep) bracket each crossing; {} bisection steps (`point` bisection, that system alone at the "
      "geometric middle of the bracket) narrow it, and the crossing is interpolated linearly between the last two "
      "points around it; `sustained_rate_per_s` repeats it on every row of the system. "
      "Workloads: the paper's ShareGPT means as lognormal lengths (vLLM's lengths: the rows the paper's stated "
      "ranges apply to), the shared ShareGPT trace after vLLM's benchmark filter, and Alpaca-like lengths; every "
      "rate redraws Poisson arrivals for the same {} requests, so the heaviest rates end when the last request "
      "does and the curves flatten there instead of diverging. The Orca rows place reservations with a binary "
      "buddy allocator (`arena` buddy), as the paper implemented Orca; vLLM's rows are the paged backend's block "
      "pool. The shared trace's requests are longer than the paper's (its means above; batch-size explains the "
      "effect on memory), so every system saturates at a lower rate there and the gap between them is set by how "
      "much KV each layout wastes at that length.{}",
      f.quote("sustained: latency factor over the unloaded", kSaturationLatencyFactor, 0,
              "setup (kSaturationLatencyFactor)"),
      f.quote("bisection steps per system", bisection_steps, 0, "setup"),
      f.quote("requests per rate", ctx.full ? 2000 : 300, 0, "setup"), findings);
  publish(ctx,
          {"request-rate", "vLLM (SOSP'23) Figure 12: normalized latency against request rate",
           std::string(kOrcaSetup) + "; request rates swept per workload (the rows)", modelled_a100(), notes,
           clock_sources(a100_40gb().device), f},
          t);
}
}  // namespace

Figure request_rate_figure() {
  return {"request-rate", "vLLM Fig. 12: normalized latency vs request rate (Orca Max/Pow2/Oracle, vLLM)",
          request_rate};
}

}  // namespace kvlab::fig
