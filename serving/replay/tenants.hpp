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
///  * fair_share: the elastic pool, and each tenant is owed `share` of it (an equal part by
///    default): while a tenant holding less than its share waits for memory, the tenants holding at
///    least theirs admit nothing new, so what their requests return as they end goes to it (no
///    preemption, nothing taken back). An idle tenant's share is anyone's.
enum class TenantPolicy { static_split, elastic, fair_share };

/// A tenant's memory limit from `at_s` on (its own clock).
struct LimitChange {
  double at_s = 0;
  std::size_t bytes = 0;
};

struct TenantSpec {
  std::string name;
  ModelGeometry model;
  std::vector<Request> requests;  ///< sorted by arrival, the tenant's offset applied
  double share = 0;               ///< static_split, fair_share: fraction of the capacity (0: an equal share)
  std::size_t limit_bytes = 0;    ///< elastic: the most it may hold (0: the whole capacity)
  std::vector<LimitChange> limit_changes;
  /// elastic: while a tenant of higher priority waits for memory, this one admits no new request
  /// (its running ones go on and free memory as they end). Equal priorities: first come. A static
  /// split ignores it: there no tenant waits for another's memory.
  int priority = 0;
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

/// A tenant's memory as a step function of time: each step record's values from the step's start,
/// each idle sample's from its time on (ReplayResult::idle), nothing before its first step.
[[nodiscard]] std::vector<MemorySample> memory_timeline(const ReplayResult& r);
/// The timeline's value at `t` (zero before its first point).
[[nodiscard]] MemorySample memory_at(const std::vector<MemorySample>& timeline, double t);

/// Pages a replay's backend mapped and unmapped (an elastic backend's critical_maps + reserve_maps
/// and unmaps counters; zero for backends that map nothing).
struct PageMaps {
  double mapped = 0, unmapped = 0;
};
[[nodiscard]] PageMaps page_maps(const ReplayResult& r);

/// What an idle tenant keeps (kvcached's idle-memory question, docs/elastic.md): over the times it
/// had nothing to do after it first ran, up to `end_s` (the end of the shared timeline).
struct IdleMemory {
  double idle_s = 0;
  double held_bytes = 0;   ///< mean memory held while idle
  double floor_bytes = 0;  ///< mean packed floor while idle (its cached blocks: no sequence runs)
};
[[nodiscard]] IdleMemory idle_memory(const ReplayResult& r, double end_s);

/// The whole GPU's KV memory over the tenants' shared timeline, from the first arrival to the last
/// step's end: the sum of what the tenants held against the sum of their packed floors, and how
/// fast pages were mapped and unmapped (an elastic backend's critical_maps + reserve_maps and
/// unmaps counters; zero for backends that map nothing).
struct GpuMemory {
  double start_s = 0, end_s = 0;
  double mean_held_bytes = 0, mean_floor_bytes = 0;  ///< time-weighted over [start_s, end_s]
  std::size_t peak_held_bytes = 0, peak_floor_bytes = 0;
  double mapped_pages_per_s = 0, unmapped_pages_per_s = 0;
};
[[nodiscard]] GpuMemory gpu_memory(const std::vector<TenantRun>& runs);

[[nodiscard]] TenantPolicy parse_tenant_policy(std::string_view name);
[[nodiscard]] std::string_view to_string(TenantPolicy policy) noexcept;

}  // namespace kvlab
