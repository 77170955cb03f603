#pragma once
// Which waiting request the replayer admits next. FCFS (vLLM's default) takes the queue in order;
// longest-prefix-match (SGLang's "lpm") takes the requests with the most prompt tokens already in
// the prefix cache first, so a cached prefix is reused before eviction can take it, with a
// fairness bound: a request that has waited max_wait_s since it arrived goes ahead of every
// request that has not, in queue order, so a prompt with no hit is never starved.
//
// Like SGLang, only the head of the queue is reordered (SGLang falls back to FCFS beyond 128
// waiting requests; kvlab reorders the first 128 and keeps the rest in order), which bounds the
// per-step cost of the prefix lookups.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kvlab {

enum class SchedulePolicy { fcfs, lpm };

/// "fcfs" or "lpm" (the --schedule values); InvalidArgument naming them for anything else.
[[nodiscard]] SchedulePolicy parse_schedule_policy(std::string_view name);
[[nodiscard]] std::string_view to_string(SchedulePolicy policy) noexcept;

struct SchedulePolicyOptions {
  SchedulePolicy policy = SchedulePolicy::fcfs;
  std::size_t window = 128;  ///< lpm: waiting requests reordered each step (the queue's head)
  double max_wait_s = 5.0;   ///< lpm: fairness bound, seconds since arrival
};

/// The lpm order of a queue's head: `cached[i]` prompt tokens of candidate i are in the prefix
/// cache and it has waited `waited_s[i]`. Returns candidate indices: those at or past the bound in
/// queue order, then the rest by cached tokens, most first (ties in queue order).
[[nodiscard]] std::vector<std::size_t> lpm_order(std::span<const std::int64_t> cached, std::span<const double> waited_s,
                                                 double max_wait_s);

}  // namespace kvlab
