#include "serving/replay/schedule_policy.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "alloc/core/error.hpp"

namespace kvlab {

SchedulePolicy parse_schedule_policy(std::string_view name) {
  if (name == "fcfs") return SchedulePolicy::fcfs;
  if (name == "lpm") return SchedulePolicy::lpm;
  KVLAB_THROW(InvalidArgument, "unknown schedule policy '" + std::string(name) + "' (known: fcfs, lpm)");
}

std::string_view to_string(SchedulePolicy policy) noexcept { return policy == SchedulePolicy::lpm ? "lpm" : "fcfs"; }

std::vector<std::size_t> lpm_order(std::span<const std::int64_t> cached, std::span<const double> waited_s,
                                   double max_wait_s) {
  if (cached.size() != waited_s.size()) KVLAB_THROW(InvalidArgument, "lpm_order: one waiting time per candidate");
  std::vector<std::size_t> order(cached.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  const auto overdue = [&](std::size_t i) { return waited_s[i] >= max_wait_s; };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (overdue(a) != overdue(b)) return overdue(a);
    if (overdue(a)) return false;  // both overdue: queue order
    return cached[a] > cached[b];
  });
  return order;
}

}  // namespace kvlab
