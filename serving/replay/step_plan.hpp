#pragma once
// What one step of a replay will do, decided before it is done: the scheduler's output and the
// executor's input (serving/replay/scheduler.hpp, serving/replay/replayer.cpp).
//
// Rationale: a reader, a test or `kvlab replay --dump-plans` sees "what this step does" apart from
// "doing it". The plan holds no pointers and no backend state: request indices, sequence ids and
// token counts, so it prints, compares and outlives the step.
//
// Approach: as vLLM's scheduler does, planning makes the step's KV allocations itself (admit,
// grow, fork, swap, release: the backend owns which blocks a sequence holds), so `work` is what
// the backend now holds room for. The executor then prices the step (the clock), runs the
// kernels over that work, and hands the plan back to the scheduler to produce the tokens.
#include <cstdint>
#include <string>
#include <vector>

#include "alloc/backend/kv_backend.hpp"

namespace kvlab {

/// One sequence's share of the step: a prefill chunk or a decode token.
struct PlannedWork {
  std::int64_t request = 0;  ///< index into the workload
  SeqId seq = 0;
  bool prefill = false;      ///< a prefill chunk (else one decode token)
  std::int64_t kv_from = 0;  ///< tokens already in the KV before this step computes its own
  std::int64_t tokens = 0;   ///< tokens computed this step (1 for a decode)
  /// The sequence decodes again next step (a prefill that completes its prompt, or a decode with
  /// more to produce): what background mapping may prepare for.
  bool decodes_next = false;
  [[nodiscard]] std::int64_t kv_after() const noexcept { return kv_from + tokens; }
  bool operator==(const PlannedWork&) const = default;
};

/// A scheduling decision that changed a request's place: the queue moves and what ended it.
struct PlanEvent {
  enum class Kind {
    admitted,             ///< from waiting to running; `tokens` = prompt tokens found in the prefix cache
    swapped_in,           ///< from swapped back to running
    preempted_swap,       ///< running to swapped (its KV copied to the host)
    preempted_recompute,  ///< running to waiting (its KV released, to be recomputed)
    rejected,             ///< ended: never fits, or preempted too often (`reason`)
    failed,               ///< ended: a device error in a backend call (`reason`)
  };
  Kind kind = Kind::admitted;
  std::int64_t request = 0;
  std::int64_t tokens = 0;
  std::string reason;
  bool operator==(const PlanEvent&) const = default;
};

[[nodiscard]] const char* to_string(PlanEvent::Kind kind) noexcept;

struct StepPlan {
  /// The step's number from 1: a plan that runs is row `step` of steps.csv; one that does not run
  /// carries the number of the next step that will.
  std::int64_t step = 0;
  double at_s = 0;  ///< the clock when the step was planned
  /// vLLM v0's prompt step (PrefillSteps::separate): only newly admitted prompts run, and the
  /// running decoders sit it out (`paused` sequences).
  bool prompt_step = false;
  int paused = 0;
  std::vector<PlannedWork> work;  ///< in the batch's order (the kernels' order)
  std::vector<PlanEvent> events;  ///< in the order they were decided
  int waiting = 0;                ///< requests left waiting or swapped once planned

  [[nodiscard]] int sequences() const noexcept { return static_cast<int>(work.size()); }
  [[nodiscard]] bool runs() const noexcept { return !work.empty(); }
  [[nodiscard]] std::int64_t prefill_tokens() const noexcept;
  [[nodiscard]] std::int64_t decode_tokens() const noexcept;
  bool operator==(const StepPlan&) const = default;
};

/// The plan as text, a header line then one line per event and per work item (a plan that does
/// not run: "before step N at T s: nothing runs, W waiting", then its events), e.g.
///   step 7 at 1.250000 s: 3 sequences (prefill 120 tokens, decode 2), 0 paused, 4 waiting
///     admitted request 5 (0 cached)
///     prefill request 5 seq 9 tokens 0..120
///     decode request 1 seq 2 token 57
[[nodiscard]] std::string format_plan(const StepPlan& plan);

}  // namespace kvlab
