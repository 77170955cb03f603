#include "experiments/figures/orca_vs_vllm.hpp"

#include "experiments/figures/figure_kit.hpp"

namespace kvlab::fig {

std::vector<Request> orca_sharegpt(const FigureContext& ctx) {
  // vLLM's benchmarks (benchmark_serving.py, benchmark_throughput.py) drop ShareGPT requests with
  // prompts over 1024 tokens or prompt + output over 2048. (Their minimum of 4 tokens each is not
  // applied: it drops 94 of the ~11,000 rows that pass here.)
  return sharegpt(ctx, 2.0, ctx.full ? 3000 : 400, opt13b_12gb().model.max_context, 0, kVllmShareGptMaxPrompt);
}

OrcaVsVllm orca_vs_vllm(const FigureContext& ctx) { return orca_vs_vllm(ctx, orca_sharegpt(ctx)); }

OrcaVsVllm orca_vs_vllm(const FigureContext& ctx, const std::vector<Request>& w) {
  OrcaVsVllm r;
  for (const auto& b : r.backends) r.results.push_back(run(ctx, b, opt13b_12gb(), w, a100_40gb()).summary);
  return r;
}

}  // namespace kvlab::fig
