// vLLM (SOSP'23) Fig. 2: where the KV cache memory goes under Orca's reservations and under paging.
#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "experiments/figures/figure_kit.hpp"
#include "experiments/figures/figure_list.hpp"
#include "experiments/figures/orca_vs_vllm.hpp"

namespace kvlab::fig {

namespace {
void memory_breakdown(const FigureContext& ctx) {
  const double paper[] = {20.4, 26.8, 38.2, 96.3};
  // The shared ShareGPT trace, and lognormal lengths with the means of the paper's own ShareGPT
  // sample (its denominator: how much of a 2048-token reservation a request of its lengths uses).
  const std::vector<std::pair<std::string, std::vector<Request>>> workloads = {
      {"ShareGPT (shared trace)", orca_sharegpt(ctx)},
      {"ShareGPT (vLLM's lengths)", sharegpt_vllm_lengths(2.0, ctx.full ? 3000 : 400)}};
  Table t{{"workload", "system", "backend", "token_states_pct", "reserved_pct", "internal_fragmentation_pct",
           "external_fragmentation_pct", "free_pct", "token_states_of_used_pct", "paper_token_states_of_used_pct",
           "relative_error_pct"}};
  Facts facts;
  const std::string fig2 = "vLLM (SOSP'23) Fig. 2";
  const std::string prompt =
      facts.quote("paper's ShareGPT mean input tokens (rounded)", kVllmShareGptMeanPrompt, 0, "vLLM (SOSP'23) Fig. 11");
  const std::string output = facts.quote("paper's ShareGPT mean output tokens (rounded)", kVllmShareGptMeanOutput, 0,
                                         "vLLM (SOSP'23) Fig. 11");
  // The paper's external fragmentation for Orca (Pow2) and Orca (Oracle), as shares of used memory.
  const std::pair<std::string, double> paper_external[] = {{"Orca (Pow2)", 41.6}, {"Orca (Oracle)", 36.6}};
  for (const auto& [workload, w] : workloads) {
    const OrcaVsVllm r = orca_vs_vllm(ctx, w);
    for (std::size_t i = 0; i < r.results.size(); ++i)
      for (const auto& [system, paper_pct] : paper_external)
        if (r.labels[i] == system) {
          const MemoryFractions& f = r.results[i].mean_fractions;
          const double used = 1.0 - f.free;
          facts.claim(workload + ": " + system + " external fragmentation, % of used",
                      used > 0 ? 100 * f.external_fragmentation / used : 0, paper_pct, 1, fig2);
        }
    for (std::size_t i = 0; i < r.results.size(); ++i) {
      const MemoryFractions& f = r.results[i].mean_fractions;
      const double used = 1.0 - f.free;
      const double of_used = used > 0 ? f.token_states / used : 0;
      t.add({workload, r.labels[i], r.backends[i], pct(f.token_states), pct(f.reserved), pct(f.internal_fragmentation),
             pct(f.external_fragmentation), pct(f.free), pct(of_used), fixed(paper[i], 1),
             relative_error_pct(100 * of_used, paper[i])});
    }
  }
  publish(
      ctx,
      {"memory-breakdown", "vLLM (SOSP'23) Figure 2: where the KV cache memory goes",
       std::string(kOrcaSetup) + "; and the same with lognormal lengths of the paper's ShareGPT means (" + prompt +
           " / " + output + " tokens)",
       modelled_a100(),
       fmt::format(
           "Shares are averaged over the replay weighted by step time (docs/metrics.md). The paper's bars divide the "
           "*used* KV memory into four categories, which `token_states_of_used_pct` matches; the first five "
           "columns divide the whole capacity, free memory included. Differences to expect: the paper's ShareGPT "
           "sample (OPT tokenizer, mean {} prompt / {} output tokens) is shorter than the Llama-2-tokenized "
           "ShareGPT file read here, so sequences fill more of a max-length reservation (the reservation schemes' "
           "`relative_error_pct` is large on the shared trace for that reason: the paper's shorter requests waste "
           "more of each reservation). The second workload draws lengths with the means of the paper's sample "
           "({} / {} tokens, lognormal, the rule of batch-size's README), which is the paper's denominator. "
           "Orca's reservations sit in a binary buddy allocator, as the paper's Orca did (sec. 6.1); its rounding of "
           "each reservation to a power of two of tokens is counted as external fragmentation, the category the "
           "paper's bars put it in (Orca Pow2 and Oracle: {} % and {} % external there; ours below the table), and "
           "Orca (Pow2) over-reserves the output only, to a power of two. `relative_error_pct` = (ours - paper) / "
           "paper.",
           prompt, output, prompt, output, fixed(paper_external[0].second, 1), fixed(paper_external[1].second, 1)),
       clock_sources(a100_40gb().device), facts},
      t);
}
}  // namespace

Figure memory_breakdown_figure() {
  return {"memory-breakdown", "vLLM Fig. 2: memory breakdown, Orca max/pow2/oracle vs paged", memory_breakdown};
}

}  // namespace kvlab::fig
