// The figure registry: every figure by name, in the order of docs/experiments.md. The list is
// written out here rather than filled by static registrars in each file: a static library drops
// object files nothing refers to, and static initialisation has no order across files.
#include "experiments/figures/figures.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "alloc/core/error.hpp"
#include "experiments/figures/figure_list.hpp"

namespace kvlab {

const std::vector<Figure>& figures() {
  static const std::vector<Figure> all = {
      fig::memory_breakdown_figure(),  fig::batch_size_figure(),      fig::block_size_figure(),
      fig::recompute_vs_swap_figure(), fig::kernel_overhead_figure(), fig::sharing_figure(),
      fig::prefix_cache_figure(),      fig::page_size_figure(),       fig::overlap_figure(),
      fig::request_rate_figure(),      fig::multi_tenant_figure(),
  };
  return all;
}

const Figure& find_figure(const std::string& name) {
  for (const Figure& f : figures())
    if (f.name == name) return f;
  std::vector<std::string> known;
  for (const Figure& f : figures()) known.push_back(f.name);
  KVLAB_THROW(InvalidArgument, fmt::format("unknown figure '{}' (known: {}, all)", name, fmt::join(known, ", ")));
}

}  // namespace kvlab
