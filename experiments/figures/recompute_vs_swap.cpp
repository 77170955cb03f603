// vLLM (SOSP'23) Fig. 19: recomputation against swapping as the way to bring a preempted
// sequence's KV back, across block sizes: (a) a microbenchmark of the modelled cost of one
// sequence's KV, (b) end-to-end ShareGPT replays through paged-B with each preemption mode.
#include <fmt/format.h>

#include "serving/clock/cost_model.hpp"
#include "experiments/figures/figure_kit.hpp"
#include "experiments/figures/figure_list.hpp"

namespace kvlab::fig {

namespace {
const std::vector<int> kSizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
/// Part (a) moves the KV of this many tokens: about one ShareGPT request of the shared trace after
/// vLLM's benchmark filter (mean prompt + output ~800 tokens), a multiple of every block size.
constexpr std::int64_t kMicroTokens = 1024;

/// The modelled cost of bringing back `tokens` tokens of one preempted sequence.
struct PreemptionCost {
  double swap_out_s = 0;    ///< device -> host copy of its blocks
  double swap_in_s = 0;     ///< host -> device copy of its blocks
  double recompute_s = 0;   ///< recomputing the tokens as one prefill
  std::int64_t copies = 0;  ///< block copies per direction: one per block, per layer, for K and for V
};

// ---------------------------------------------------------------------------------------------
// THE CLOCK HOOK OF PART (a): the only place this figure asks the clock for a time, through the
// same step-time model the replayer uses (serving/clock/cost_model.hpp). Swapping moves whole blocks
// as the paged backend does: one host transfer per block, per layer, for K and for V (vLLM v0's
// swap_blocks), each paying the device model's per-transfer latency plus its bytes at the host
// link's bandwidth; recomputing is one prefill of `tokens` tokens, which attends to everything
// before it.
PreemptionCost preemption_cost(const ModelGeometry& model, const DeviceModel& device, std::int64_t tokens,
                               int block_size) {
  PreemptionCost c;
  const std::int64_t blocks = (tokens + block_size - 1) / block_size;
  c.copies = 2 * static_cast<std::int64_t>(model.num_layers) * blocks;
  StepWork swap;
  swap.ops.host_transfers = c.copies;
  swap.ops.host_transfer_bytes =
      static_cast<double>(blocks * block_size) * static_cast<double>(model.kv_bytes_per_token());
  c.swap_out_s = c.swap_in_s = step_time(model, device, swap).transfer;
  StepWork prefill;
  prefill.prefill_tokens = tokens;
  prefill.sequences = 1;
  prefill.kv_tokens_read = tokens;
  prefill.attention_pairs = tokens * (tokens + 1) / 2;
  c.recompute_s = step_seconds(model, device, prefill);
  return c;
}
// ---------------------------------------------------------------------------------------------

const std::vector<std::string> kColumns = {"part",
                                           "block_size",
                                           "method",
                                           "time_ms",
                                           "block_copies_per_direction",
                                           "mean_normalized_latency_s",
                                           "preemptions",
                                           "swaps",
                                           "prefill_tokens_computed"};

/// Part (a): one row per method and block size; returns the README's reading of it.
std::string microbenchmark(Table& t, Facts& f) {
  const ModelGeometry model = opt13b_12gb().model;
  const DeviceModel device = a100_40gb().device;
  std::string recompute_wins, swap_wins;
  for (int b : kSizes) {
    const PreemptionCost c = preemption_cost(model, device, kMicroTokens, b);
    const std::string copies = std::to_string(c.copies);
    const std::pair<const char*, double> rows[] = {{"recompute", c.recompute_s},
                                                   {"swap out", c.swap_out_s},
                                                   {"swap in", c.swap_in_s},
                                                   {"swap in+out", c.swap_in_s + c.swap_out_s}};
    for (const auto& [method, s] : rows)
      t.add({"microbenchmark", std::to_string(b), method, fixed(1e3 * s, 3),
             std::string(method).starts_with("swap") ? copies : "", "", "", "", ""});
    std::string& wins = c.recompute_s < c.swap_in_s + c.swap_out_s ? recompute_wins : swap_wins;
    wins += (wins.empty() ? "" : ", ") + std::to_string(b);
  }
  return fmt::format(
      "(a) Microbenchmark, the KV of {} tokens of OPT-13B: recompute is cheaper than swap in+out at "
      "block sizes [{}], swap in+out is cheaper at [{}].",
      f.quote("microbenchmark tokens", kMicroTokens, 0, "setup"), recompute_wins, swap_wins);
}

/// Part (b): one row per preemption mode and block size; returns the README's reading of it.
std::string end_to_end(const FigureContext& ctx, Table& t, Facts& f) {
  const auto w = sharegpt_vllm_filtered(ctx, 2.0, ctx.full ? 2000 : 300);
  std::string swap_wins, recompute_wins;
  for (int b : kSizes) {
    double latency[2] = {0, 0};
    for (const PreemptionMode mode : {PreemptionMode::recompute, PreemptionMode::swap}) {
      ReplayConfig c = a100_40gb();
      c.preemption = mode;
      const ReplaySummary s = run(ctx, fmt::format("paged-{}", b), opt13b_12gb(), w, c).summary;
      const bool swap = mode == PreemptionMode::swap;
      latency[swap ? 1 : 0] = s.mean_normalized_latency_s;
      t.add({"end-to-end", std::to_string(b), swap ? "swap" : "recompute", "", "",
             fixed(s.mean_normalized_latency_s, 4), std::to_string(s.preemptions), std::to_string(s.swaps),
             std::to_string(s.prefill_tokens_computed)});
    }
    std::string& wins = latency[1] < latency[0] ? swap_wins : recompute_wins;
    wins += fmt::format("{}{} ({} %)", wins.empty() ? "" : ", ", b,
                        with_sign(f.quote(fmt::format("block {}: swap's latency relative to recompute's (%)", b),
                                          100 * relative_error(latency[1], latency[0]), 1,
                                          "this run (mean_normalized_latency_s_per_token)")));
  }
  return fmt::format(
      "(b) End to end, ShareGPT at 2 req/s ({} requests): swap has the lower mean normalized latency "
      "at block sizes [{}], recompute at [{}] (in brackets: swap's latency relative to recompute's).",
      f.quote("end-to-end requests", static_cast<double>(w.size()), 0, "this run's workload"),
      swap_wins.empty() ? "none" : swap_wins, recompute_wins.empty() ? "none" : recompute_wins);
}

void recompute_vs_swap(const FigureContext& ctx) {
  Table t{kColumns};
  Facts f;
  const std::string a = microbenchmark(t, f);
  const std::string b = end_to_end(ctx, t, f);
  publish(ctx,
          {"recompute-vs-swap", "vLLM (SOSP'23) Figure 19: recomputation vs swapping across block sizes",
           fmt::format(
               "OPT-13B, 12 GB of KV. (a) The modelled time to swap the KV of {} tokens out to host memory "
               "and back, and to recompute them as one prefill, at block sizes 1..256. (b) ShareGPT "
               "lengths (filtered as vLLM's benchmarks sample ShareGPT, prompts of at most 1024 tokens and prompt + "
               "output within OPT's 2048, before arrivals are drawn) at 2 req/s through "
               "paged-B with swap or with recompute preemption, FCFS continuous batching as vLLM v0 scheduled it "
               "(prompt steps and decode steps apart)",
               kMicroTokens),
           modelled_a100(),
           fmt::format(
               "Paper (Fig. 19): swapping's overhead is large at small block sizes, where it issues many "
               "small PCIe copies, while recomputation's is the same at every block size (it does not touch "
               "the blocks); so recomputation is cheaper at small blocks and swapping at large ones, and "
               "end to end the two are comparable for medium blocks (16 to 64).\n\nOurs, read from the "
               "table above:\n\n- {}\n- {}\n\nPart (a) asks the clock for its times through one function "
               "(`preemption_cost` in experiments/figures/recompute_vs_swap.cpp), the replayer's step-time model: each "
               "copy pays the device model's host_transfer_latency_s, and `block_copies_per_direction` is how "
               "many copies it multiplies. In part (b) a swap costs what the replayer's "
               "clock charges for the copies, and a recompute the prefill of `prefill_tokens_computed`.",
               a, b),
           clock_sources(a100_40gb().device), f},
          t);
}
}  // namespace

Figure recompute_vs_swap_figure() {
  return {"recompute-vs-swap", "vLLM Fig. 19: recompute vs swap preemption across block sizes", recompute_vs_swap};
}

}  // namespace kvlab::fig
