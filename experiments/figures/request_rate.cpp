// vLLM (SOSP'23) Fig. 12: normalized latency (end-to-end latency over output tokens, averaged over
// requests) against the request rate, for Orca (Max), Orca (Pow2), Orca (Oracle) and vLLM, with
// OPT-13B on one A100-40GB, OPT-66B on four and OPT-175B on eight A100-80GB (the paper's Table 1,
// tensor parallel); and the rate each system sustains at a fixed normalized latency.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "experiments/figures/figure_kit.hpp"
#include "experiments/figures/figure_list.hpp"
#include "experiments/figures/orca_vs_vllm.hpp"

namespace kvlab::fig {

namespace {
/// A model on its GPUs with the KV space the vLLM paper's Table 1 gives it.
struct Setting {
  std::string label;
  BackendOptions options;
  ReplayConfig config;
};

Setting opt_on(const std::string& model, double kv_gb, const std::string& device, int gpus, const std::string& label) {
  BackendOptions o;
  o.model = model_preset(model);
  o.capacity_bytes = static_cast<std::size_t>(kv_gb * 1e9);
  return {label, o, vllm_v0_on(device, gpus)};
}

// The vLLM paper's Table 1: memory for the KV cache (GB).
constexpr double kOpt66bKvGb = 21;
constexpr double kOpt175bKvGb = 264;

struct RateWorkload {
  Setting setting;
  std::string workload;
  std::function<std::vector<Request>(double rate)> make;
  std::vector<double> rates;
  bool paper_lengths = false;  ///< the paper's mean lengths: its stated ranges apply
  /// The `scheduler` column: the CLI's --prefill-steps value of the setting's clock.
  [[nodiscard]] std::string scheduler() const {
    return setting.config.prefill_steps == PrefillSteps::separate ? "separate" : "mixed";
  }
  [[nodiscard]] std::string label() const {
    return setting.label + ", " + workload + (scheduler() == "mixed" ? ", prompts in the decode step" : "");
  }
};

std::vector<RateWorkload> workloads(const FigureContext& ctx) {
  const std::int64_t n = ctx.full ? 2000 : 300;
  const int points = ctx.full ? 16 : 10;
  const Setting opt13b{"OPT-13B on 1x A100-40GB", opt13b_12gb(), a100_40gb()};
  const Setting opt66b = opt_on("opt-66b", kOpt66bKvGb, "a100-40gb", 4, "OPT-66B on 4x A100-40GB");
  const Setting opt175b = opt_on("opt-175b", kOpt175bKvGb, "a100-80gb", 8, "OPT-175B on 8x A100-80GB");
  // The code the paper measured scheduled otherwise (see the notes): the same settings with new
  // whole prompts in the decoders' step, to show how much the choice moves the ratios.
  const auto in_decode = [](Setting s) {
    s.config.prefill_steps = PrefillSteps::mixed;
    return s;
  };
  const auto vllm_lengths = [n](double r) { return sharegpt_vllm_lengths(r, n); };
  return {
      {opt13b, "ShareGPT (vLLM's lengths)", vllm_lengths, geometric_rates(0.1, 8, points), true},
      {opt66b, "ShareGPT (vLLM's lengths)", vllm_lengths, geometric_rates(0.05, 4, points), true},
      {opt175b, "ShareGPT (vLLM's lengths)", vllm_lengths, geometric_rates(0.1, 8, points), true},
      {in_decode(opt13b), "ShareGPT (vLLM's lengths)", vllm_lengths, geometric_rates(0.1, 8, points), true},
      {in_decode(opt66b), "ShareGPT (vLLM's lengths)", vllm_lengths, geometric_rates(0.05, 4, points), true},
      {in_decode(opt175b), "ShareGPT (vLLM's lengths)", vllm_lengths, geometric_rates(0.1, 16, points), true},
      {opt13b, "ShareGPT (shared trace)", [&ctx, n](double r) { return sharegpt_vllm_filtered(ctx, r, n); },
       geometric_rates(0.05, 4, points), false},
      {opt13b, "Alpaca-like", [n](double r) { return alpaca_like(r, n); }, geometric_rates(1, 120, points), false},
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

/// Latencies (times vLLM's unloaded one) at which the notes also read the ratios.
constexpr double kLaterReadings[] = {8, 16};

constexpr const char* kTable1 = "vLLM (SOSP'23) Table 1: memory for the KV cache";
constexpr const char* kSec62 = "vLLM (SOSP'23) sec. 6.2, ShareGPT, OPT-13B/66B/175B";

/// Inside, below or above [lo, hi], from the ratio as printed.
std::string within(double ratio, double lo, double hi) {
  if (!std::isfinite(ratio)) return "not comparable";
  const double r = std::round(ratio * 100) / 100;
  return r >= lo && r <= hi ? "inside" : r < lo ? "below" : "above";
}

/// vLLM's sustained rate over Orca (Oracle)'s and Orca (Max)'s, on one setting with the paper's
/// lengths, beside the paper's ranges (which span its three settings): the README's sentence.
std::string against_paper(const std::vector<double>& sustained, Facts& f) {
  const double v = sustained.back();
  return fmt::format(
      " The paper (sec. 6.2, ShareGPT, over its OPT-13B/66B/175B settings): {}x-{}x Orca (Oracle)'s rate and "
      "{}x-{}x Orca (Max)'s at similar latency; this setting's ratios are {} the first range and {} the second.",
      f.quote("paper: vLLM / Orca (Oracle), low", 1.7, 1, kSec62),
      f.quote("paper: vLLM / Orca (Oracle), high", 2.7, 1, kSec62),
      f.quote("paper: vLLM / Orca (Max), low", 2.7, 1, kSec62), f.quote("paper: vLLM / Orca (Max), high", 8, 0, kSec62),
      within(v / sustained[2], 1.7, 2.7), within(v / sustained[0], 2.7, 8.0));
}

/// The span of vLLM's ratios over the settings with the paper's lengths, under one scheduler,
/// against the paper's ranges: the claims (low end against low end, high against high; `suffix`
/// names the scheduler when it is not the figure's own) and the README's paragraph.
std::string span_against_paper(const std::vector<std::pair<std::string, std::vector<double>>>& settings,
                               const std::string& suffix, Facts& f) {
  std::vector<double> oracle, max;
  std::string names;
  for (const auto& [label, s] : settings) {
    const double v = s.back();
    if (!std::isfinite(v) || !std::isfinite(s[2]) || !std::isfinite(s[0])) continue;
    oracle.push_back(v / s[2]);
    max.push_back(v / s[0]);
    names += (names.empty() ? "" : "; ") + label;
  }
  if (oracle.empty()) return "";
  const auto [olo, ohi] = std::minmax_element(oracle.begin(), oracle.end());
  const auto [mlo, mhi] = std::minmax_element(max.begin(), max.end());
  const std::string over = "over the settings" + suffix;
  f.claim("vLLM / Orca (Oracle) sustained rate, lowest " + over, *olo, 1.7, 2, std::string(kSec62) + ": 1.7x");
  f.claim("vLLM / Orca (Oracle) sustained rate, highest " + over, *ohi, 2.7, 2, std::string(kSec62) + ": 2.7x");
  f.claim("vLLM / Orca (Max) sustained rate, lowest " + over, *mlo, 2.7, 2, std::string(kSec62) + ": 2.7x");
  f.claim("vLLM / Orca (Max) sustained rate, highest " + over, *mhi, 8, 2, std::string(kSec62) + ": 8x");
  return fmt::format(
      "\n\nOver the {} settings with the paper's lengths{} ({}), vLLM sustains {}x-{}x Orca (Oracle)'s rate (paper "
      "1.7x-2.7x) and {}x-{}x Orca (Max)'s (paper 2.7x-8x).",
      oracle.size(), suffix, names, fixed(*olo, 2), fixed(*ohi, 2), fixed(*mlo, 2), fixed(*mhi, 2));
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
      f.quote(w.label() + ": vLLM / Orca (Oracle) mean batch where each turns", v.mean_batch / o.mean_batch, 2,
              "this run (mean_batch)"),
      f.quote(w.label() + ": vLLM / Orca (Oracle) time per output token where each turns",
              v.mean_tpot_s / o.mean_tpot_s, 2, "this run (tpot_mean_s)"),
      f.quote(w.label() + ": vLLM / Orca (Oracle) batch over time per token where each turns",
              (v.mean_batch / v.mean_tpot_s) / (o.mean_batch / o.mean_tpot_s), 2,
              "this run (mean_batch, tpot_mean_s)"));
}

/// One workload's result: each system's curve and sustained rate, read at `threshold`.
struct RateResult {
  std::vector<std::string> backends, labels;
  std::vector<Curve> curves;
  std::vector<double> sustained;
  double threshold = 0;
};

/// Every system at the workload's rates, then each system's crossing bisected.
RateResult run_workload(const FigureContext& ctx, const RateWorkload& w, int bisection_steps) {
  std::vector<OrcaVsVllm> sweep;
  for (double rate : w.rates) sweep.push_back(orca_vs_vllm(ctx, w.make(rate), w.setting.options, w.setting.config));
  RateResult r{sweep.front().backends, sweep.front().labels, {}, {}, 0};
  r.threshold = kSaturationLatencyFactor * sweep.front().results.back().mean_normalized_latency_s;
  r.curves.resize(r.backends.size());
  for (std::size_t s = 0; s < r.backends.size(); ++s) {
    Curve& c = r.curves[s];
    c.rates = w.rates;
    for (const auto& point : sweep) c.results.push_back(point.results[s]);
    c.bisected.assign(w.rates.size(), false);
    bisect(c, r.threshold, bisection_steps, [&](double rate) {
      return run(ctx, r.backends[s], w.setting.options, w.make(rate), w.setting.config).summary;
    });
    r.sustained.push_back(c.sustained(r.threshold));
  }
  return r;
}

void add_rows(Table& t, const RateWorkload& w, const RateResult& r) {
  for (std::size_t s = 0; s < r.backends.size(); ++s)
    for (std::size_t i = 0; i < r.curves[s].rates.size(); ++i) {
      const ReplaySummary& x = r.curves[s].results[i];
      const bool paged = r.backends[s].starts_with("paged");
      t.add({w.setting.label, w.workload, w.scheduler(), r.labels[s], r.backends[s], paged ? "block pool" : "buddy",
             fixed(r.curves[s].rates[i], 3), r.curves[s].bisected[i] ? "bisection" : "sweep",
             fixed(x.mean_normalized_latency_s, 4), fixed(x.mean_ttft_s, 3), fixed(x.mean_tpot_s, 4),
             std::to_string(x.completed), std::to_string(x.rejected), std::to_string(x.preemptions),
             fixed(x.mean_batch), fixed(r.threshold, 4), rate_text(r.sustained[s])});
    }
}

/// How the ratios move when the sustained rate is read at a higher latency (the paper reads its
/// plots by eye, "at similar latency", and names no threshold): vLLM's ratios at kLaterReadings
/// times the unloaded latency, from the measured points (the bisection narrows only the crossing
/// at kSaturationLatencyFactor).
std::string later_reading(const RateWorkload& w, const RateResult& r, Facts& f) {
  const double unloaded = r.threshold / kSaturationLatencyFactor;
  std::string readings;
  for (const double k : kLaterReadings) {
    std::vector<double> at;
    for (const Curve& c : r.curves) at.push_back(c.sustained(k * unloaded));
    if (!std::all_of(at.begin(), at.end(), [](double x) { return std::isfinite(x); })) continue;
    const std::string tag = fmt::format("{}: read at {:g}x the unloaded latency: ", w.label(), k);
    readings += fmt::format("{}at {}x, {} Orca (Oracle)'s rate and {} Orca (Max)'s", readings.empty() ? "" : "; ",
                            f.quote("later reading: latency factor over the unloaded", k, 0, "setup (kLaterReadings)"),
                            ratio_text(at.back(), at[2], f, tag + "vLLM / Orca (Oracle) rate"),
                            ratio_text(at.back(), at[0], f, tag + "vLLM / Orca (Max) rate"));
  }
  if (readings.empty()) return "";
  return fmt::format(
      " Read where the latency is a larger multiple of the unloaded one (between the measured points), vLLM "
      "sustains {}: the ratios depend on the latency they are read at.",
      readings);
}

/// The README's paragraph on one workload: sustained rates, vLLM's ratios, where the curves turn.
std::string workload_text(const RateWorkload& w, const RateResult& r, Facts& f) {
  const auto [prompt, output] = mean_lengths(w.make(w.rates.front()));
  std::string text = fmt::format(
      "\n\n{} (mean prompt {}, output {} tokens): at {} s/token ({}x vLLM's at {} req/s) "
      "the sustained rates (req/s) are ",
      w.label(), f.quote(w.label() + ": mean prompt tokens", prompt, 1, "this run's workload"),
      f.quote(w.label() + ": mean output tokens", output, 1, "this run's workload"), fixed(r.threshold, 4),
      f.quote("sustained: latency factor over the unloaded", kSaturationLatencyFactor, 0,
              "setup (kSaturationLatencyFactor)"),
      fixed(w.rates.front(), 3));
  for (std::size_t s = 0; s < r.backends.size(); ++s)
    text += fmt::format("{}{} {}", s ? ", " : "", r.labels[s], rate_text(r.sustained[s]));
  const double v = r.sustained.back();
  text += fmt::format("; vLLM sustains {} Orca (Oracle)'s rate, {} Orca (Pow2)'s and {} Orca (Max)'s.",
                      ratio_text(v, r.sustained[2], f, w.label() + ": vLLM / Orca (Oracle) sustained rate"),
                      ratio_text(v, r.sustained[1], f, w.label() + ": vLLM / Orca (Pow2) sustained rate"),
                      ratio_text(v, r.sustained[0], f, w.label() + ": vLLM / Orca (Max) sustained rate"));
  text += turn_text(w, r.curves, r.sustained, f);
  if (w.paper_lengths) text += against_paper(r.sustained, f);
  return text + later_reading(w, r, f);
}

void request_rate(const FigureContext& ctx) {
  Table t{{"setting", "workload", "scheduler", "system", "backend", "arena", "request_rate_per_s", "point",
           "mean_normalized_latency_s", "ttft_mean_s", "tpot_mean_s", "completed", "rejected", "preemptions",
           "mean_batch", "threshold_normalized_latency_s", "sustained_rate_per_s"}};
  std::string findings;
  Facts f;
  const int bisection_steps = ctx.full ? 5 : 3;
  // Per scheduler: the settings with the paper's lengths, and each one's sustained rates.
  std::map<std::string, std::vector<std::pair<std::string, std::vector<double>>>> paper_settings;
  for (const RateWorkload& w : workloads(ctx)) {
    const RateResult r = run_workload(ctx, w, bisection_steps);
    add_rows(t, w, r);
    findings += workload_text(w, r, f);
    if (w.paper_lengths) paper_settings[w.scheduler()].emplace_back(w.setting.label, r.sustained);
  }
  const std::string spans = span_against_paper(paper_settings["separate"], "", f) +
                            span_against_paper(paper_settings["mixed"], ", prompts in the decode step", f);
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
      "much KV each layout wastes at that length. Settings (`setting`, the paper's Table 1): OPT-13B on one "
      "A100-40GB with {} GB of KV, OPT-66B on four A100-40GB with {} GB, OPT-175B on eight A100-80GB with {} GB "
      "(GB as 10^9 bytes in all three); the last two are tensor parallel: the clock divides the weights' and the "
      "KV's work over the GPUs and adds two NVLink all-reduces per layer (docs/clock.md). The engine's CPU time per "
      "step is Vidur's TP1 measurement in every setting; vLLM v0 drove tensor-parallel workers through Ray, which "
      "cost more per step, and that is not modelled. Scheduling (`scheduler`, the CLI's --prefill-steps): `separate` "
      "is the vLLM v0 scheduler of its later releases, which every setting uses (a step that can admit waiting "
      "prompts runs only them, and the running decoders sit it out); the code the paper measured (the vLLM "
      "repository's cacheflow/master/scheduler.py, which also gathers the statistics behind the paper's memory "
      "figures) instead ran new whole prompts in the decoders' step within the same {} tokens, `mixed`: the "
      "rows with `scheduler` mixed run that in the three settings with the paper's lengths, and their span against "
      "the paper's ranges is stated apart.{}{}",
      f.quote("sustained: latency factor over the unloaded", kSaturationLatencyFactor, 0,
              "setup (kSaturationLatencyFactor)"),
      f.quote("bisection steps per system", bisection_steps, 0, "setup"),
      f.quote("requests per rate", ctx.full ? 2000 : 300, 0, "setup"),
      f.quote("OPT-13B: KV space (GB)", static_cast<double>(opt13b_12gb().capacity_bytes) / 1e9, 0, kTable1),
      f.quote("OPT-66B: KV space (GB)", kOpt66bKvGb, 0, kTable1),
      f.quote("OPT-175B: KV space (GB)", kOpt175bKvGb, 0, kTable1),
      f.quote("tokens per step (max_num_batched_tokens)", static_cast<double>(a100_40gb().max_batched_tokens), 0,
              "vLLM v0's default, as the paper's code had it"),
      findings, spans);
  publish(ctx,
          {"request-rate", "vLLM (SOSP'23) Figure 12: normalized latency against request rate",
           std::string(kOrcaSetup) +
               "; OPT-66B and OPT-175B on 4 and 8 GPUs as the notes say; request rates swept per workload (the rows)",
           modelled_a100(), notes, clock_sources(a100_40gb().device), f},
          t);
}
}  // namespace

Figure request_rate_figure() {
  return {"request-rate", "vLLM Fig. 12: normalized latency vs request rate (Orca Max/Pow2/Oracle, vLLM)",
          request_rate};
}

}  // namespace kvlab::fig
