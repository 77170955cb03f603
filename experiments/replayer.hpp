#pragma once
// Continuous-batching replay of a workload through one KV backend, on a virtual clock.
//
// Each step: finished sequences leave; waiting requests that have arrived are admitted FCFS while
// the batch has room (max_running, a prefill token budget) and the backend says can_admit; every
// running sequence then does one unit of work: a newly admitted one its prefill (producing its
// first token), the others one decode token. A decode token first needs a KV slot: when
// can_grow fails, the latest-arrived running request is preempted (released, requeued for
// recompute) until it succeeds. The clock advances by the cost model (memory mode).
//
// Token semantics (vLLM's): a request with P prompt and O output tokens holds P tokens after its
// prefill step and P + i after its i-th decode step; it finishes after O - 1 decode steps, so it
// never holds more than P + O - 1 tokens (the last sampled token's KV is never written).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "alloc/kv_backend.hpp"
#include "alloc/memory_breakdown.hpp"
#include "experiments/cost_model.hpp"
#include "experiments/workload.hpp"

namespace kvlab {

enum class LongRequestPolicy { reject, truncate };

struct ReplayConfig {
  int max_running = 256;                    ///< sequences in a batch
  std::int64_t max_prefill_tokens = 8192;  ///< prompt tokens admitted per step (at least one request)
  LongRequestPolicy long_requests = LongRequestPolicy::reject;
  DeviceModel device = {"a100-80gb", 2.039e12, 312e12};
};

struct StepRecord {
  double time_s = 0;  ///< clock at the end of the step
  double duration_s = 0;
  int running = 0;
  int waiting = 0;  ///< arrived but not running
  MemoryFractions fractions;
  std::size_t allocated_bytes = 0;
};

struct RequestRecord {
  std::int64_t id = 0;
  double arrival_s = 0;
  double first_scheduled_s = -1;
  double first_token_s = -1;
  double finish_s = -1;
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;     ///< as requested by the workload
  std::int64_t generated_tokens = 0;  ///< as produced (fewer when truncated)
  int preemptions = 0;
  enum class Status { completed, rejected, truncated_completed } status = Status::completed;
  std::string reason;  ///< why rejected
};

struct ReplaySummary {
  std::string backend;
  std::int64_t requests = 0, completed = 0, rejected = 0, truncated = 0;
  std::int64_t steps = 0, preemptions = 0, out_of_memory = 0;
  std::int64_t generated_tokens = 0, prompt_tokens = 0;
  double makespan_s = 0;
  double mean_batch = 0;  ///< running sequences, weighted by step time (idle gaps left out)
  int max_batch = 0;
  MemoryFractions mean_fractions;  ///< weighted by step time (idle gaps left out)
  std::size_t peak_allocated_bytes = 0;
  std::size_t capacity_bytes = 0;
  double mean_ttft_s = 0, mean_tpot_s = 0, mean_e2e_s = 0;
};

struct ReplayResult {
  ReplaySummary summary;
  std::vector<StepRecord> steps;
  std::vector<RequestRecord> requests;
};

/// Called now and then with (requests finished or rejected, total).
using ProgressCallback = std::function<void(std::int64_t, std::int64_t)>;

/// Replays `workload` (sorted by arrival) through `backend`, which must start empty; it is empty
/// again afterwards. Memory accounting only: no kernels run.
[[nodiscard]] ReplayResult replay(KvBackend& backend, const std::vector<Request>& workload,
                                  const ReplayConfig& config, const ProgressCallback& progress = {});

}  // namespace kvlab
