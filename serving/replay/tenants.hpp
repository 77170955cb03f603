#pragma once
// Several tenants (models with their own workloads) sharing one GPU's KV memory, replayed on one
// timeline: a static split of the capacity against an elastic pool they share (kvcached's setting;
// docs/elastic.md, "Tenants").
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "serving/replay/backend_factory.hpp"
#include "serving/replay/replayer.hpp"
#include "serving/traces/workload.hpp"

namespace kvlab {

/// How the tenants' KV memory is divided.
///  * static_split: each tenant owns `share` of the capacity from the start (vLLM instances side by
///    side, each with its own gpu_memory_utilization); any backend.
///  * elastic: one pool the tenants share, first come first served, each up to its limit; a tenant's
///    limit may drop at a time (kvcached's `kvctl limit`), and its pool then shrinks as its blocks
///    free. Backends that map on demand only (elastic-B).
enum class TenantPolicy { static_split, elastic };

/// A tenant's memory limit from `at_s` on (its own clock).
struct LimitChange {
  double at_s = 0;
  std::size_t bytes = 0;
};

struct TenantSpec {
  std::string name;
  ModelGeometry model;
  std::vector<Request> requests;  ///< sorted by arrival, the tenant's offset applied
  double share = 0;               ///< static_split: fraction of the capacity (0: an equal share)
  std::size_t limit_bytes = 0;    ///< elastic: the most it may hold (0: the whole capacity)
  std::vector<LimitChange> limit_changes;
};

struct TenantRun {
  std::string name;
  ReplayResult result;
};

/// Builds each tenant's backend `backend` (e.g. "paged-16" for a static split, "elastic-16" for
/// the shared pool) over `capacity_bytes` of KV memory divided by `policy`, and replays them
/// interleaved (replay_interleaved). `base` supplies everything but the model and the budget.
/// Throws InvalidArgument for shares that sum past 1, a limit change that is not in time order, or
/// a backend that cannot share memory under the elastic policy.
[[nodiscard]] std::vector<TenantRun> replay_tenants(const std::vector<TenantSpec>& tenants, TenantPolicy policy,
                                                    std::string_view backend, std::size_t capacity_bytes,
                                                    const BackendOptions& base, const ReplayConfig& config);

[[nodiscard]] TenantPolicy parse_tenant_policy(std::string_view name);
[[nodiscard]] std::string_view to_string(TenantPolicy policy) noexcept;

}  // namespace kvlab
