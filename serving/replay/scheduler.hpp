#pragma once
// The replay's scheduler: turns the queues and the backend's state into a StepPlan, one step at a
// time, and takes the step's tokens back once the executor ran it (serving/replay/replayer.cpp).
//
// Rationale: scheduling decisions (who prefills how much, who decodes, who is preempted, swapped
// or admitted) are tested and printed apart from the clock and the kernels (issue 31).
//
// Approach: vLLM's scheduler, FCFS continuous batching, as replayer.hpp's header describes. Like
// vLLM's, it makes the step's KV allocations while it plans (the backend owns which blocks a
// sequence holds, and whether the next grow fits depends on the last), so a plan is what the
// backend already holds room for. A backend call that fails with a device error fails only the
// request it hit; out of memory is a value it handles (preempt, wait, count).
//
// Limitations: one plan at a time, in order: plan_step, then complete_step (or fail_step) for that
// plan, before the next.
#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "alloc/backend/kv_backend.hpp"
#include "serving/replay/detail/sequence_group.hpp"
#include "serving/replay/kv_fill.hpp"
#include "serving/replay/kv_integrity.hpp"
#include "serving/replay/replayer.hpp"
#include "serving/replay/step_plan.hpp"
#include "serving/support/float_runs.hpp"
#include "serving/traces/token_ids.hpp"

namespace kvlab {

class Scheduler {
 public:
  /// Schedules `workload` (sorted by arrival) through `backend`, writing request records and the
  /// scheduling counters into `result` (requests sized to the workload). `clock` is the executor's
  /// time, read, never set. `integrity` (may be null) follows every fork and release.
  Scheduler(KvBackend& backend, const std::vector<Request>& workload, const ReplayConfig& config, ReplayResult& result,
            const double& clock, KvIntegrity* integrity, const ProgressCallback& progress);

  /// Requests whose arrival time has come join the waiting queue (or end, too long or empty).
  void take_arrivals();
  /// Nothing running, waiting or swapped.
  [[nodiscard]] bool idle() const noexcept { return running_.empty() && waiting_.empty() && swapped_.empty(); }
  /// When the next request arrives; empty once all have.
  [[nodiscard]] std::optional<double> next_arrival_s() const;
  /// Requests ended (completed, truncated, rejected or failed).
  [[nodiscard]] std::int64_t ended() const noexcept { return done_; }
  [[nodiscard]] std::size_t waiting() const noexcept { return waiting_.size(); }
  [[nodiscard]] std::size_t swapped() const noexcept { return swapped_.size(); }
  /// The admission the backend last refused this step (the breakdown's "blocked" request).
  [[nodiscard]] const std::optional<SequenceSpec>& blocked() const noexcept { return blocked_; }
  /// Every inter-token gap of every request, seconds, as runs; the scheduler keeps none after.
  [[nodiscard]] FloatRuns take_inter_token_gaps() noexcept { return std::exchange(itl_, {}); }

  /// Plans the next step and claims its KV. A plan that does not run (runs() false) still carries
  /// the events that led there; the step is then over.
  [[nodiscard]] StepPlan plan_step();
  /// The plan ran: every sequence in it produces its token; finished requests leave.
  void complete_step();
  /// The plan's kernels failed: its requests end as failed, with `error`.
  void fail_step(const std::string& error);
  /// verify_kv: writes the pattern of every token the plan computes, then reads back every
  /// resident sequence.
  void write_and_verify_kv();
  /// The tokens the plan computes, one entry per sequence (between plan_step and complete_step).
  [[nodiscard]] std::vector<ComputedTokens> computed_tokens();

 private:
  using Group = detail::Group;
  using Seq = detail::Seq;

  /// Calls f(group, sequence, from, count) for each sequence's tokens the plan computes.
  template <class F>
  void for_each_computed(F&& f);

  void finish(Group& g, RequestRecord::Status status, const std::string& reason = {});
  void event(PlanEvent::Kind kind, const Group& g, std::int64_t tokens = 0, std::string reason = {});
  bool claim_slots(Group& g);
  bool try_claim(Group& g, bool& failed, std::string& error);
  void preempt(std::size_t pos);
  [[nodiscard]] std::size_t latest_running() const;
  [[nodiscard]] std::size_t chosen_victim(std::size_t first) const;
  [[nodiscard]] std::vector<QueuedRequest> queued_head(std::size_t n) const;
  void claim_running();
  void swap_in_groups();
  void order_waiting();
  void admit_waiting();
  [[nodiscard]] bool prompt_step();
  [[nodiscard]] bool settle();
  void requeue(Group g);
  void fill_work();
  void reselect_beams(Group& g);
  void release_seq(SeqId id);
  void fork_seq(SeqId parent, SeqId child);
  [[nodiscard]] const std::vector<std::uint64_t>& prompt_tags(Group& g) const;
  /// A request's group produced a token now: its gap since the previous one is an ITL sample.
  void token_out(Group& g);

  /// The backend's KV capacity (what a request alone could ever get).
  [[nodiscard]] std::size_t capacity_bytes() const { return result_.summary.capacity_bytes; }

  KvBackend& b_;
  const std::vector<Request>& w_;
  const ReplayConfig& c_;
  ReplayResult& result_;
  const double& now_;
  KvIntegrity* integrity_;
  const ProgressCallback& progress_;
  std::deque<Group> waiting_, swapped_;
  std::vector<Group> running_;
  FloatRuns itl_;  // every inter-token gap of every request, seconds (runs of equal gaps: a few bytes a step)
  StepPlan plan_;  // the plan being made (events since the last one included)
  std::size_t next_arrival_ = 0;
  std::int64_t done_ = 0;
  SeqId next_seq_ = 0;
  std::int64_t budget_ = 0;
  int seqs_in_step_ = 0;
  int paused_ = 0;              // separate prefill steps: running sequences sitting out this prompt step
  std::int64_t step_ = 0;       // steps planned (slot bookkeeping)
  std::int64_t steps_run_ = 0;  // plans that ran: a running plan's number is its row in steps.csv
  std::optional<SequenceSpec> blocked_;
  std::int32_t fresh_token_id_ = 0x7fffffff;
  TraceTokenIds token_ids_;  // prompt ids, and answers' ids where the trace implies them
  std::mt19937_64 beam_rng_;
};

}  // namespace kvlab
