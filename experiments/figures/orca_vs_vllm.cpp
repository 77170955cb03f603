#include "experiments/figures/orca_vs_vllm.hpp"

#include "experiments/figures/figure_kit.hpp"

namespace kvlab::fig {

OrcaVsVllm orca_vs_vllm(const FigureContext& ctx) {
  OrcaVsVllm r;
  const auto w = sharegpt(ctx, 2.0, ctx.full ? 3000 : 400, opt13b_12gb().model.max_context);
  for (const auto& b : r.backends) r.results.push_back(run(ctx, b, opt13b_12gb(), w, a100_40gb()).summary);
  return r;
}

}  // namespace kvlab::fig
