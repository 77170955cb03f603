#include "serving/replay/tenants.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "alloc/core/error.hpp"

namespace kvlab {

TenantPolicy parse_tenant_policy(std::string_view name) {
  if (name == "static") return TenantPolicy::static_split;
  if (name == "elastic") return TenantPolicy::elastic;
  KVLAB_THROW(InvalidArgument, fmt::format("unknown tenant policy '{}' (static or elastic)", name));
}

std::string_view to_string(TenantPolicy policy) noexcept {
  return policy == TenantPolicy::static_split ? "static" : "elastic";
}

namespace {
/// Each tenant's share of the capacity under a static split: its own, or an equal part of what the
/// tenants without one leave.
std::vector<double> shares(const std::vector<TenantSpec>& tenants) {
  double given = 0;
  std::size_t unset = 0;
  for (const TenantSpec& t : tenants) {
    KVLAB_EXPECTS(t.share >= 0 && t.share <= 1, fmt::format("tenant '{}': share {} is not in [0, 1]", t.name, t.share));
    given += t.share;
    unset += t.share == 0;
  }
  if (given > 1 + 1e-9)
    KVLAB_THROW(InvalidArgument, fmt::format("the tenants' shares sum to {:g}, more than the whole capacity", given));
  std::vector<double> out;
  for (const TenantSpec& t : tenants)
    out.push_back(t.share > 0 ? t.share : (1 - given) / static_cast<double>(std::max<std::size_t>(unset, 1)));
  return out;
}
}  // namespace

std::vector<TenantRun> replay_tenants(const std::vector<TenantSpec>& tenants, TenantPolicy policy,
                                      std::string_view backend, std::size_t capacity_bytes, const BackendOptions& base,
                                      const ReplayConfig& config) {
  KVLAB_EXPECTS(!tenants.empty(), "no tenants to replay");
  const std::vector<double> share = shares(tenants);
  const auto gpu = std::make_shared<PhysicalBudget>(capacity_bytes);
  std::vector<std::shared_ptr<PhysicalBudget>> budgets;
  std::vector<std::unique_ptr<KvBackend>> backends;
  std::vector<ReplayJob> jobs;
  for (std::size_t i = 0; i < tenants.size(); ++i) {
    const TenantSpec& t = tenants[i];
    for (std::size_t k = 1; k < t.limit_changes.size(); ++k)
      KVLAB_EXPECTS(t.limit_changes[k].at_s >= t.limit_changes[k - 1].at_s,
                    fmt::format("tenant '{}': limit changes must be in time order", t.name));
    BackendOptions o = base;
    o.model = t.model;
    if (policy == TenantPolicy::static_split) {
      if (!t.limit_changes.empty() || t.limit_bytes != 0)
        KVLAB_THROW(InvalidArgument,
                    fmt::format("tenant '{}': limits need the elastic policy (a static share is fixed)", t.name));
      o.capacity_bytes = static_cast<std::size_t>(share[i] * static_cast<double>(capacity_bytes));
    } else {
      o.capacity_bytes = capacity_bytes;  // every tenant's virtual range spans the GPU's memory
      budgets.push_back(std::make_shared<PhysicalBudget>(t.limit_bytes > 0 ? t.limit_bytes : capacity_bytes, gpu));
      o.budget = budgets.back();
    }
    try {
      backends.push_back(make_backend(backend, o));
    } catch (const InvalidArgument& e) {
      KVLAB_THROW(InvalidArgument, fmt::format("tenant '{}': {}", t.name, e.what()));
    }
    ReplayJob job;
    job.backend = backends.back().get();
    job.workload = &t.requests;
    job.config = config;
    job.config.shared_memory = policy == TenantPolicy::elastic;
    if (policy == TenantPolicy::elastic && !t.limit_changes.empty()) {
      job.before_step = [budget = budgets.back(), changes = t.limit_changes,
                         next = std::size_t{0}](double now) mutable {
        for (; next < changes.size() && changes[next].at_s <= now; ++next) budget->set_limit(changes[next].bytes);
      };
    }
    jobs.push_back(std::move(job));
  }
  std::vector<ReplayResult> results = replay_interleaved(jobs);
  std::vector<TenantRun> out;
  for (std::size_t i = 0; i < tenants.size(); ++i) out.push_back({tenants[i].name, std::move(results[i])});
  return out;
}

}  // namespace kvlab
