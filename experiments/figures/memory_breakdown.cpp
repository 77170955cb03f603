// vLLM (SOSP'23) Fig. 2: where the KV cache memory goes under Orca's reservations and under paging.
#include "experiments/figures/figure_kit.hpp"
#include "experiments/figures/figure_list.hpp"
#include "experiments/figures/orca_vs_vllm.hpp"

namespace kvlab::fig {

namespace {
void memory_breakdown(const FigureContext& ctx) {
  const double paper[] = {20.4, 26.8, 38.2, 96.3};
  const OrcaVsVllm r = orca_vs_vllm(ctx);
  Table t{{"system", "backend", "token_states_pct", "reserved_pct", "internal_frag_pct", "external_frag_pct", "free_pct",
           "token_states_pct_of_used", "paper_token_states_pct_of_used", "relative_error_pct"}};
  for (std::size_t i = 0; i < r.results.size(); ++i) {
    const MemoryFractions& f = r.results[i].mean_fractions;
    const double used = 1.0 - f.free;
    t.add({r.labels[i], r.backends[i], pct(f.token_states), pct(f.reserved), pct(f.internal_fragmentation),
           pct(f.external_fragmentation), pct(f.free), pct(used > 0 ? f.token_states / used : 0), fixed(paper[i], 1),
           relative_error_pct(100 * (used > 0 ? f.token_states / used : 0), paper[i])});
  }
  publish(ctx,
          {"memory-breakdown", "vLLM (SOSP'23) Figure 2: where the KV cache memory goes", kOrcaSetup, modelled_a100(),
           "Shares are averaged over the replay weighted by step time (docs/metrics.md). The paper's bars divide the "
           "*used* KV memory into four categories, which `token_states_pct_of_used` matches; the first five "
           "columns divide the whole capacity, free memory included. Differences to expect: the paper's ShareGPT "
           "sample (OPT tokenizer, mean 161 prompt / 338 output tokens) is shorter than the Llama-2-tokenized "
           "ShareGPT file read here, so sequences fill more of a max-length reservation (the reservation schemes' "
           "`relative_error_pct` is large for that reason: the paper's shorter requests waste more of each "
           "reservation); and the modelled clock is faster per step than the paper's vLLM of 2023, so fewer "
           "requests overlap. `relative_error_pct` = (ours - paper) / paper. What reproduces is the ordering "
           "and the gap between reservation schemes and paging.",
           clock_sources(a100_40gb().device)},
          t);
}
}  // namespace

Figure memory_breakdown_figure() {
  return {"memory-breakdown", "vLLM Fig. 2: memory breakdown, Orca max/pow2/oracle vs paged", memory_breakdown};
}

}  // namespace kvlab::fig
