#include "experiments/figures/orca_vs_vllm.hpp"

#include "experiments/figures/figure_kit.hpp"

namespace kvlab::fig {

std::vector<Request> orca_sharegpt(const FigureContext& ctx) {
  return sharegpt_vllm_filtered(ctx, 2.0, ctx.full ? 3000 : 400);
}

OrcaVsVllm orca_vs_vllm(const FigureContext& ctx) { return orca_vs_vllm(ctx, orca_sharegpt(ctx)); }

OrcaVsVllm orca_vs_vllm(const FigureContext& ctx, const std::vector<Request>& w) {
  return orca_vs_vllm(ctx, w, opt13b_12gb(), a100_40gb());
}

OrcaVsVllm orca_vs_vllm(const FigureContext& ctx, const std::vector<Request>& w, const BackendOptions& o,
                        const ReplayConfig& c) {
  OrcaVsVllm r;
  for (const auto& b : r.backends) r.results.push_back(run(ctx, b, o, w, c).summary);
  return r;
}

}  // namespace kvlab::fig
