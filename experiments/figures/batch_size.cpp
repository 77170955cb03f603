// vLLM (SOSP'23) Fig. 13: how many requests each KV layout lets the scheduler batch, on both of the
// paper's workloads (ShareGPT at 2 req/s, Alpaca at 30 req/s) and on ShareGPT lengths drawn with
// the means the paper reports for its own ShareGPT sample.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "experiments/figures/figure_kit.hpp"
#include "experiments/figures/figure_list.hpp"
#include "experiments/figures/orca_vs_vllm.hpp"

namespace kvlab::fig {

namespace {
// The paper's Fig. 13, Orca Max / Pow2 / Oracle / vLLM (OPT-13B, one A100-40GB).
constexpr std::array<double, 4> kPaperShareGpt = {7.00, 9.81, 13.62, 30.42};  // ShareGPT, 2 req/s
constexpr std::array<double, 4> kPaperAlpaca = {7.00, 43.24, 72.75, 132.44};  // Alpaca, 30 req/s

struct Workload {
  std::string label;        ///< our workload
  std::string paper_panel;  ///< the panel of the paper's figure our rows are compared with
  std::array<double, 4> paper;
  std::vector<Request> requests;
};

std::vector<Workload> workloads(const FigureContext& ctx) {
  const std::int64_t n = ctx.full ? 3000 : 400;
  std::vector<Workload> w;
  w.push_back({"ShareGPT (shared trace) @ 2 req/s", "ShareGPT @ 2 req/s", kPaperShareGpt, orca_sharegpt(ctx)});
  w.push_back(
      {"ShareGPT (vLLM's lengths) @ 2 req/s", "ShareGPT @ 2 req/s", kPaperShareGpt, sharegpt_vllm_lengths(2.0, n)});
  w.push_back({"Alpaca-like @ 30 req/s", "Alpaca @ 30 req/s", kPaperAlpaca, alpaca_like(30.0, n)});
  return w;
}

std::string workload_means(const std::vector<Workload>& ws, Facts& f) {
  std::string s;
  for (const Workload& w : ws) {
    const auto [p, o] = mean_lengths(w.requests);
    s += fmt::format("{}{}: {} requests, mean prompt {} / output {} tokens", s.empty() ? "" : "; ", w.label,
                     f.quote(w.label + ": requests", static_cast<double>(w.requests.size()), 0, "this run's workload"),
                     f.quote(w.label + ": mean prompt tokens", p, 1, "this run's workload"),
                     f.quote(w.label + ": mean output tokens", o, 1, "this run's workload"));
  }
  return s;
}

/// How much more KV the shared trace's requests hold than those with vLLM's means: at the end of a
/// request (prompt + output tokens) and summed over its decode steps (about output * (prompt +
/// output / 2) token-steps), both from the workloads as replayed.
std::pair<double, double> kv_ratios(const std::vector<Workload>& ws) {
  const auto footprint = [](const std::vector<Request>& w) {
    double end = 0, life = 0;
    for (const Request& r : w) {
      const auto p = static_cast<double>(r.prompt_tokens), o = static_cast<double>(r.output_tokens);
      end += p + o;
      life += o * (p + o / 2);
    }
    return std::pair{end, life};
  };
  const auto [e0, l0] = footprint(ws[0].requests);
  const auto [e1, l1] = footprint(ws[1].requests);
  const double n = static_cast<double>(ws[1].requests.size()) / static_cast<double>(ws[0].requests.size());
  return {e0 * n / e1, l0 * n / l1};
}

/// Per workload, the reservation systems that batch within 5 % of paging (the last system, the
/// layout memory bounds least): for them the offered load, not the KV layout, bounds the batch.
std::string load_bound(const std::vector<Workload>& ws, const std::vector<OrcaVsVllm>& rs, Facts& f) {
  const std::string within =
      f.quote("near paging: within this % of its batch", 5, 0, "setup: this figure's reading rule");
  std::string s;
  for (std::size_t i = 0; i < ws.size(); ++i) {
    const double paged = rs[i].results.back().mean_batch;
    std::string near;
    for (std::size_t j = 0; j + 1 < rs[i].results.size(); ++j)
      if (rs[i].results[j].mean_batch >= paged * 0.95) near += (near.empty() ? "" : ", ") + rs[i].labels[j];
    if (!near.empty()) s += fmt::format("{}{}: {}", s.empty() ? "" : "; ", ws[i].label, near);
  }
  return s.empty() ? "Every reservation system batches more than " + within +
                         " % below paging on every workload: KV memory bounds their batch."
                   : "Within " + within + " % of paging's batch (" + s +
                         "): there the offered load, not the KV layout, bounds the batch; on this clock requests "
                         "finish before enough others arrive to fill memory.";
}

/// The rows more than 20 % from the paper, counted and named, from the data as printed.
std::string outside_20pct(const std::vector<Workload>& ws, const std::vector<OrcaVsVllm>& rs, Facts& f) {
  std::string names;
  int outside = 0, rows = 0;
  for (std::size_t i = 0; i < ws.size(); ++i)
    for (std::size_t j = 0; j < rs[i].results.size(); ++j, ++rows) {
      // The error as the table prints it (one decimal), so the count agrees with the column.
      const std::string printed = relative_error_pct(rs[i].results[j].mean_batch, ws[i].paper[j]);
      const double err = printed == "n/a" ? 0.0 : std::stod(printed);
      if (std::abs(err) <= 20) continue;
      ++outside;
      names += fmt::format("{}{} on {} ({:+.1f} %)", names.empty() ? "" : "; ", rs[i].labels[j], ws[i].label, err);
    }
  return fmt::format(
      "Rows more than {} % from the paper: {} of {}{}{}.",
      f.quote("far from the paper: relative error beyond this %", 20, 0, "setup: this figure's reading rule"),
      f.quote("rows far from the paper", outside, 0, "this run (data.csv's relative_error_pct)"),
      f.quote("rows", rows, 0, "data.csv"), outside ? ": " : "", names);
}

/// Paging with unbounded KV memory on every workload, against the table's 12 GB: what memory costs
/// paging's batch, and what is left to the step time (at a fixed arrival rate, the batch is the
/// rate times how long a request runs: Little's law).
/// Paging with 1 TiB of KV on each workload (the column mean_batched_requests_1tib_kv of its rows).
std::vector<ReplaySummary> unbounded_paging(const FigureContext& ctx, const std::vector<Workload>& ws) {
  BackendOptions unbounded = opt13b_12gb();
  unbounded.capacity_bytes = std::size_t{1} << 40;
  std::vector<ReplaySummary> out;
  for (const Workload& w : ws) out.push_back(run(ctx, "paged-16", unbounded, w.requests, a100_40gb()).summary);
  return out;
}

std::string memory_vs_time(const std::vector<Workload>& ws, const std::vector<OrcaVsVllm>& rs,
                           const std::vector<ReplaySummary>& unbounded, Facts& f) {
  std::string out =
      fmt::format("with {} TiB of KV instead of {} GB it batches ", f.quote("unbounded KV (TiB)", 1, 0, "setup"),
                  f.quote("KV capacity (GB)", 12, 0, "setup: the paper's 12 GB on an A100-40GB"));
  for (std::size_t i = 0; i < ws.size(); ++i) {
    const ReplaySummary& u = unbounded[i];
    out += fmt::format("{}{:.2f} (12 GB: {:.2f}, {} preemptions) on {}", i ? "; " : "", u.mean_batch,
                       rs[i].results.back().mean_batch, rs[i].results.back().preemptions, ws[i].label);
  }
  return out +
         ". Where the two agree, memory is not what bounds paging and its row measures the modelled step "
         "time; where they differ, memory does.";
}

std::string notes(const std::vector<Workload>& ws, const std::vector<OrcaVsVllm>& rs, const std::string& memory_time,
                  Facts& f) {
  const auto [end_ratio, life_ratio] = kv_ratios(ws);
  const DeviceModel clock = a100_40gb().device;
  const std::string vllm = "vLLM (SOSP'23) Fig. 11";
  const std::string prompt = f.quote("paper's ShareGPT mean input tokens", kVllmShareGptMeanPrompt, 2, vllm);
  const std::string output = f.quote("paper's ShareGPT mean output tokens", kVllmShareGptMeanOutput, 2, vllm);
  const std::string filter = "setup: vLLM's benchmark filter (benchmark_serving.py)";
  const std::string sigma = "setup: alpaca_like()'s convention (LognormalLengths)";
  const std::string memory = memory_time;  // quoted before the workloads, in the order the README reads
  const std::string means = workload_means(ws, f);
  return fmt::format(
      "Mean batch = sequences per step weighted by step time. The batch a system sustains is bounded by how many "
      "sequences its KV layout fits; paging lifts that bound, the paper's central result. {}\n\n"
      "What sets each side, all from sources other than this figure: the Orca rows place their reservations with "
      "a binary buddy allocator (`contiguous-POLICY-buddy`), as the paper implemented Orca (sec. 6.1: \"assuming "
      "it uses the buddy allocation algorithm\"), and Orca (Pow2) over-reserves only the output, to a power of two "
      "(the paper's example: an output of {} tokens reserves {}); the buddy rounds each reservation to a power of "
      "two of tokens, which the paper's Fig. 2 shows as external fragmentation (memory-breakdown reproduces those "
      "shares). The clock adds vLLM v0's CPU time per step (Vidur's published A100 profile of that engine, the "
      "clock sources line) and prices decode attention as Vidur's measured A100 attention profile does ({} % "
      "of the datasheet bandwidth plus {} us per layer); together they set how long a request stays in the "
      "batch once memory does not. Memory against time, for paging: {}\n\n"
      "What the paper column is: `paper_mean_batch` is the bar of the paper's Fig. 13 panel named in "
      "`paper_panel` (OPT-13B on one A100-40GB, {} GB of KV). Both ShareGPT rows are compared with the paper's "
      "ShareGPT panel, the Alpaca rows with its Alpaca panel; `relative_error_pct` = (ours - paper) / paper. None "
      "of our workloads is the paper's trace. The paper sampled ShareGPT conversations with the OPT tokenizer "
      "(Fig. 11: mean {} input / {} output tokens); the shared trace "
      "(sharegpt_8k_filtered_stats_llama2_tokenizer.csv) is Llama-2 tokenized and multi-turn, so even after "
      "vLLM's benchmark filter (prompt <= {}, prompt + output <= {} tokens) its requests are longer: a request holds "
      "{}x the KV at its end (prompt + output "
      "tokens) and {}x the KV-time over its decode steps of one with the paper's means, which caps the batch "
      "by memory. \"vLLM's lengths\" rows draw lognormal lengths with only the paper's means ({} / {}); the "
      "Alpaca-like rows use alpaca_like() as it was (lognormal, the same sigmas, mu set for means of about {} / {} "
      "tokens, clamped at {} / {}), near the paper's {} / {}; the paper's Alpaca trace is not public either. {}\n\n"
      "The lognormal spread is not fitted to this figure: sigma is {} for prompts and {} for outputs, the "
      "convention alpaca_like() used before this figure compared anything with the paper, and mu = ln(mean) - "
      "sigma^2 / 2 so that the unclipped mean is the paper's; lengths are clamped to OPT's {}-token context and "
      "requests longer than it dropped before arrivals are drawn. Workloads as replayed: {}.",
      outside_20pct(ws, rs, f), f.quote("Orca (Pow2) example output tokens", 25, 0, "vLLM (SOSP'23) sec. 6.1"),
      f.quote("Orca (Pow2) example reservation tokens", 32, 0, "vLLM (SOSP'23) sec. 6.1"),
      f.quote("decode attention, share of datasheet bandwidth (%)", 100 * clock.attention_bandwidth_efficiency, 0,
              "device model a100-40gb (clock sources line)"),
      f.quote("decode attention, overhead per layer (us)", 1e6 * clock.attention_layer_overhead_s, 1,
              "device model a100-40gb (clock sources line)"),
      memory, f.quote("KV capacity (GB)", 12, 0, "setup: the paper's 12 GB on an A100-40GB"), prompt, output,
      f.quote("filter: max prompt tokens", 1024, 0, filter),
      f.quote("filter: max prompt + output tokens", 2048, 0, filter),
      f.quote("KV at a request's end, shared trace / vLLM's lengths", end_ratio, 2, "this run's workloads"),
      f.quote("KV-time over decode, shared trace / vLLM's lengths", life_ratio, 2, "this run's workloads"), prompt,
      output, f.quote("alpaca_like() mean prompt tokens (about)", 19, 0, sigma),
      f.quote("alpaca_like() mean output tokens (about)", 57, 0, sigma),
      f.quote("alpaca_like() prompt clamp", 512, 0, sigma), f.quote("alpaca_like() output clamp", 1024, 0, sigma),
      f.quote("paper's Alpaca mean input tokens", kVllmAlpacaMeanPrompt, 2, vllm),
      f.quote("paper's Alpaca mean output tokens", kVllmAlpacaMeanOutput, 2, vllm), load_bound(ws, rs, f),
      f.quote("lognormal sigma, prompts", 0.6, 1, sigma), f.quote("lognormal sigma, outputs", 0.7, 1, sigma),
      f.quote("OPT context tokens", 2048, 0, "OPT-13B's maximum sequence length"), means);
}

void batch_size(const FigureContext& ctx) {
  const std::vector<Workload> ws = workloads(ctx);
  Table t{{"workload", "paper_panel", "system", "backend", "mean_batch", "paper_mean_batch", "relative_error_pct",
           "max_batch", "preemptions", "mean_batch_1tib_kv"}};
  std::vector<OrcaVsVllm> rs;
  const std::vector<ReplaySummary> unbounded = unbounded_paging(ctx, ws);
  for (std::size_t k = 0; k < ws.size(); ++k) {
    const Workload& w = ws[k];
    const OrcaVsVllm& r = rs.emplace_back(orca_vs_vllm(ctx, w.requests));
    for (std::size_t i = 0; i < r.results.size(); ++i)
      t.add({w.label, w.paper_panel, r.labels[i], r.backends[i], fixed(r.results[i].mean_batch), fixed(w.paper[i]),
             relative_error_pct(r.results[i].mean_batch, w.paper[i]), std::to_string(r.results[i].max_batch),
             std::to_string(r.results[i].preemptions),
             r.backends[i] == "paged-16" ? fixed(unbounded[k].mean_batch) : "n/a"});
  }
  ReadmeText text{
      "batch-size",
      "vLLM (SOSP'23) Figure 13: average number of batched requests",
      "OPT-13B, 12 GB of KV cache (A100-40GB), FCFS continuous batching as vLLM v0 scheduled it (prompt steps and "
      "decode steps apart, at most 256 sequences and 2560 tokens a step, its CPU time per step), recompute preemption; "
      "Orca "
      "Max / Pow2 / Oracle reservations in a buddy allocator and paging (block 16) on three workloads: the shared "
      "ShareGPT "
      "trace at 2 req/s (filtered first as vLLM's benchmarks sample ShareGPT: prompts of at most 1024 tokens, "
      "prompt + output within OPT's 2048-token context; Poisson arrivals "
      "drawn after the filter), lognormal lengths with the means vLLM reports for its ShareGPT sample "
      "at 2 req/s, and Alpaca-like lengths at 30 req/s",
      modelled_a100(),
      "",
      clock_sources(a100_40gb().device)};
  text.notes = notes(ws, rs, memory_vs_time(ws, rs, unbounded, text.facts), text.facts);
  publish(ctx, text, t);
}
}  // namespace

Figure batch_size_figure() {
  return {"batch-size", "vLLM Fig. 13: average batched requests (ShareGPT 2 req/s, Alpaca 30 req/s)", batch_size};
}

}  // namespace kvlab::fig
