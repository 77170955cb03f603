// vLLM (SOSP'23) Fig. 2: where the KV cache memory goes under Orca's reservations and under paging.
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
  Table t{{"workload", "system", "backend", "token_states_pct", "reserved_pct", "internal_frag_pct", "external_frag_pct",
           "free_pct", "token_states_pct_of_used", "paper_token_states_pct_of_used", "relative_error_pct"}};
  for (const auto& [workload, w] : workloads) {
    const OrcaVsVllm r = orca_vs_vllm(ctx, w);
    for (std::size_t i = 0; i < r.results.size(); ++i) {
      const MemoryFractions& f = r.results[i].mean_fractions;
      const double used = 1.0 - f.free;
      const double of_used = used > 0 ? f.token_states / used : 0;
      t.add({workload, r.labels[i], r.backends[i], pct(f.token_states), pct(f.reserved), pct(f.internal_fragmentation),
             pct(f.external_fragmentation), pct(f.free), pct(of_used), fixed(paper[i], 1),
             relative_error_pct(100 * of_used, paper[i])});
    }
  }
  publish(ctx,
          {"memory-breakdown", "vLLM (SOSP'23) Figure 2: where the KV cache memory goes",
           std::string(kOrcaSetup) + "; and the same with lognormal lengths of the paper's ShareGPT means (161 / 338 "
                                     "tokens)",
           modelled_a100(),
           "Shares are averaged over the replay weighted by step time (docs/metrics.md). The paper's bars divide the "
           "*used* KV memory into four categories, which `token_states_pct_of_used` matches; the first five "
           "columns divide the whole capacity, free memory included. Differences to expect: the paper's ShareGPT "
           "sample (OPT tokenizer, mean 161 prompt / 338 output tokens) is shorter than the Llama-2-tokenized "
           "ShareGPT file read here, so sequences fill more of a max-length reservation (the reservation schemes' "
           "`relative_error_pct` is large on the shared trace for that reason: the paper's shorter requests waste "
           "more of each reservation). The second workload draws lengths with the means of the paper's sample "
           "(161 / 338 tokens, lognormal, the rule of batch-size's README), which is the paper's denominator. "
           "Orca's reservations sit in a binary buddy allocator, as the paper's Orca did (sec. 6.1); its rounding of "
           "each reservation to a power of two of tokens is counted as external fragmentation, the category the "
           "paper's bars put it in (Orca Pow2 and Oracle: 41.6 % and 36.6 % external there), and Orca (Pow2) "
           "over-reserves the output only, to a power of two. `relative_error_pct` = (ours - paper) / paper.",
           clock_sources(a100_40gb().device)},
          t);
}
}  // namespace

Figure memory_breakdown_figure() {
  return {"memory-breakdown", "vLLM Fig. 2: memory breakdown, Orca max/pow2/oracle vs paged", memory_breakdown};
}

}  // namespace kvlab::fig
