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
#include <functional>
#include <span>
#include <string_view>
#include <vector>

namespace kvlab {

enum class SchedulePolicy { fcfs, lpm };

/// "fcfs" or "lpm" (the --schedule values); InvalidArgument naming them for anything else.
[[nodiscard]] SchedulePolicy parse_schedule_policy(std::string_view name);
[[nodiscard]] std::string_view to_string(SchedulePolicy policy) noexcept;

/// A waiting request as a custom admission order sees it.
struct QueuedRequest {
  std::int64_t id = 0;  ///< its index in the workload (requests.csv's id)
  double arrival_s = 0, waited_s = 0;
  std::int64_t prompt_tokens = 0;  ///< to prefill (a recompute adds what it had generated)
  std::int64_t output_tokens = 0;  ///< still to generate, per sequence
  std::int64_t cached_tokens = 0;  ///< of its prompt, in the prefix cache now
  int preemptions = 0;
};

/// A running request as a custom preemption choice sees it.
struct RunningRequest {
  std::int64_t id = 0;
  double arrival_s = 0;
  std::int64_t prompt_tokens = 0, prefilled_tokens = 0;
  std::int64_t output_tokens = 0;  ///< still to generate, per sequence
  int sequences = 0;               ///< parallel samples or beams it runs
  int preemptions = 0;
};

/// A custom admission order: the head of the waiting queue (at most `window` requests, in queue
/// order) to the order they are offered to the backend, as indices (a permutation).
using AdmissionOrder = std::function<std::vector<std::size_t>(std::span<const QueuedRequest>)>;
/// A custom preemption choice: which of `candidates` (running requests that have not claimed their
/// memory this step, the one that did not fit among them, in arrival order) to preempt, by index.
using PreemptionChoice = std::function<std::size_t(std::span<const RunningRequest>)>;

struct SchedulePolicyOptions {
  SchedulePolicy policy = SchedulePolicy::fcfs;
  std::size_t window = 128;  ///< lpm and admission_order: waiting requests reordered each step (the queue's head)
  double max_wait_s = 5.0;   ///< lpm: fairness bound, seconds since arrival
  /// Replaces `policy`'s order when set (the Python package's policies, docs/python.md). Called
  /// each step that can admit, with two or more requests waiting and none swapped out.
  AdmissionOrder admission_order;
  /// Replaces "the latest arrival" when set: called each time a running request does not fit.
  PreemptionChoice preemption_victim;
};

/// The lpm order of a queue's head: `cached[i]` prompt tokens of candidate i are in the prefix
/// cache and it has waited `waited_s[i]`. Returns candidate indices: those at or past the bound in
/// queue order, then the rest by cached tokens, most first (ties in queue order).
[[nodiscard]] std::vector<std::size_t> lpm_order(std::span<const std::int64_t> cached, std::span<const double> waited_s,
                                                 double max_wait_s);

}  // namespace kvlab
