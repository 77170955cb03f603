#include "serving/replay/tenants.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <memory>

#include "alloc/core/error.hpp"

namespace kvlab {

TenantPolicy parse_tenant_policy(std::string_view name) {
  if (name == "static") return TenantPolicy::static_split;
  if (name == "elastic") return TenantPolicy::elastic;
  if (name == "fair-share") return TenantPolicy::fair_share;
  KVLAB_THROW(InvalidArgument, fmt::format("unknown tenant policy '{}' (static, elastic or fair-share)", name));
}

std::string_view to_string(TenantPolicy policy) noexcept {
  switch (policy) {
    case TenantPolicy::static_split:
      return "static";
    case TenantPolicy::elastic:
      return "elastic";
    case TenantPolicy::fair_share:
      return "fair-share";
  }
  return "unknown";
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

std::vector<MemorySample> memory_timeline(const ReplayResult& r) {
  std::vector<MemorySample> out;
  out.reserve(r.steps.size() + r.idle.size());
  auto idle = r.idle.begin();
  for (const StepRecord& s : r.steps) {
    const double start = s.time_s - s.duration_s;
    for (; idle != r.idle.end() && idle->time_s <= start; ++idle) out.push_back(*idle);
    out.push_back({start, s.held_bytes, s.floor_bytes});
  }
  out.insert(out.end(), idle, r.idle.end());
  return out;
}

MemorySample memory_at(const std::vector<MemorySample>& timeline, double t) {
  const auto after = std::ranges::upper_bound(timeline, t, {}, &MemorySample::time_s);
  if (after == timeline.begin()) return {t, 0, 0};
  MemorySample m = *std::prev(after);
  m.time_s = t;
  return m;
}

IdleMemory idle_memory(const ReplayResult& r, double end_s) {
  IdleMemory m;
  auto step = r.steps.begin();
  for (const MemorySample& i : r.idle) {
    while (step != r.steps.end() && step->time_s - step->duration_s < i.time_s) ++step;
    const double until = std::min(end_s, step == r.steps.end() ? end_s : step->time_s - step->duration_s);
    if (until <= i.time_s) continue;
    const double dt = until - i.time_s;
    m.idle_s += dt;
    m.held_bytes += static_cast<double>(i.held_bytes) * dt;
    m.floor_bytes += static_cast<double>(i.floor_bytes) * dt;
  }
  if (m.idle_s > 0) {
    m.held_bytes /= m.idle_s;
    m.floor_bytes /= m.idle_s;
  }
  return m;
}

PageMaps page_maps(const ReplayResult& r) {
  PageMaps m;
  for (const auto& [n, v] : r.summary.backend_counters) {
    if (n == "critical_maps" || n == "reserve_maps") m.mapped += v;
    if (n == "unmaps") m.unmapped += v;
  }
  return m;
}

GpuMemory gpu_memory(const std::vector<TenantRun>& runs) {
  GpuMemory g;
  std::vector<std::vector<MemorySample>> lines;
  std::vector<double> times;
  bool first = true;
  double maps = 0, unmaps = 0;
  for (const TenantRun& t : runs) {
    lines.push_back(memory_timeline(t.result));
    for (const MemorySample& m : lines.back()) times.push_back(m.time_s);
    for (const RequestRecord& q : t.result.requests) {
      g.start_s = first ? q.arrival_s : std::min(g.start_s, q.arrival_s);
      first = false;
    }
    if (!t.result.steps.empty()) g.end_s = std::max(g.end_s, t.result.steps.back().time_s);
    maps += page_maps(t.result).mapped;
    unmaps += page_maps(t.result).unmapped;
  }
  times.push_back(g.start_s);
  times.push_back(g.end_s);
  std::ranges::sort(times);
  times.erase(std::unique(times.begin(), times.end()), times.end());
  // The sums are step functions that change only at the tenants' points: integrate between them.
  for (std::size_t k = 0; k < times.size(); ++k) {
    if (times[k] < g.start_s || times[k] >= g.end_s) continue;
    std::size_t held = 0, floor = 0;
    for (const auto& line : lines) {
      const MemorySample m = memory_at(line, times[k]);
      held += m.held_bytes;
      floor += m.floor_bytes;
    }
    const double dt = (k + 1 < times.size() ? std::min(times[k + 1], g.end_s) : g.end_s) - times[k];
    g.mean_held_bytes += static_cast<double>(held) * dt;
    g.mean_floor_bytes += static_cast<double>(floor) * dt;
    g.peak_held_bytes = std::max(g.peak_held_bytes, held);
    g.peak_floor_bytes = std::max(g.peak_floor_bytes, floor);
  }
  if (const double span = g.end_s - g.start_s; span > 0) {
    g.mean_held_bytes /= span;
    g.mean_floor_bytes /= span;
    g.mapped_pages_per_s = maps / span;
    g.unmapped_pages_per_s = unmaps / span;
  }
  return g;
}

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
    const bool pooled = policy != TenantPolicy::static_split;
    job.config.shared_memory = pooled;
    job.priority = pooled ? t.priority : 0;  // a static split: nobody waits for another
    if (policy == TenantPolicy::fair_share)
      job.fair_share_bytes =
          std::max<std::size_t>(1, static_cast<std::size_t>(share[i] * static_cast<double>(capacity_bytes)));
    if (pooled && !t.limit_changes.empty()) {
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
