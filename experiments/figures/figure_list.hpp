#pragma once
// One function per figure, each defined in its own file under experiments/figures/; the registry
// (experiments/figures/figures.cpp) lists them. A new figure is a new file plus one line in each place.
#include "experiments/figures/figures.hpp"

namespace kvlab::fig {

[[nodiscard]] Figure memory_breakdown_figure();
[[nodiscard]] Figure batch_size_figure();
[[nodiscard]] Figure block_size_figure();
[[nodiscard]] Figure recompute_vs_swap_figure();
[[nodiscard]] Figure kernel_overhead_figure();
[[nodiscard]] Figure sharing_figure();
[[nodiscard]] Figure prefix_cache_figure();
[[nodiscard]] Figure page_size_figure();
[[nodiscard]] Figure overlap_figure();
[[nodiscard]] Figure request_rate_figure();
[[nodiscard]] Figure multi_tenant_figure();

}  // namespace kvlab::fig
