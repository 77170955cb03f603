// vLLM (SOSP'23) Fig. 13: how many requests each KV layout lets the scheduler batch.
#include "experiments/figures/figure_kit.hpp"
#include "experiments/figures/figure_list.hpp"
#include "experiments/figures/orca_vs_vllm.hpp"

namespace kvlab::fig {

namespace {
void batch_size(const FigureContext& ctx) {
  const double paper[] = {7.00, 9.81, 13.62, 30.42};
  const OrcaVsVllm r = orca_vs_vllm(ctx);
  Table t{{"system", "backend", "mean_batched_requests", "max_batch", "preemptions", "paper_mean_batched_requests"}};
  for (std::size_t i = 0; i < r.results.size(); ++i)
    t.add({r.labels[i], r.backends[i], fixed(r.results[i].mean_batch), std::to_string(r.results[i].max_batch),
           std::to_string(r.results[i].preemptions), fixed(paper[i])});
  publish(ctx,
          {"batch-size", "vLLM (SOSP'23) Figure 13: average number of batched requests", kOrcaSetup, kModelledA100,
           "Mean batch = sequences per step weighted by step time. The batch a system sustains is bounded by how "
           "many sequences its KV layout fits; paging lifts that bound, the paper's central result."},
          t);
}
}  // namespace

Figure batch_size_figure() {
  return {"batch-size", "vLLM Fig. 13: average batched requests", batch_size};
}

}  // namespace kvlab::fig
