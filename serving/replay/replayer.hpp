#pragma once
// Continuous-batching replay of a workload through one KV backend, on a virtual clock: the
// scheduler (serving/replay/scheduler.hpp) plans each step as a StepPlan (step_plan.hpp), and
// the replayer runs the plan (clock, kernels) and hands it back for its tokens.
//
// Scheduling, each step (vLLM-style, FCFS):
//  1. Arrivals join the waiting queue; a request longer than max_seq_len is rejected or truncated
//     (counted either way).
//  2. Running sequences claim their KV slots for this step: a decode token each, or the next
//     prefill chunk. When the backend cannot grow, the latest-arrived running request is
//     preempted — swapped out (preemption = swap, when the backend can) or released and requeued
//     to recompute its prompt plus what it generated (preemption = recompute) — until it can.
//  3. Swapped requests come back first, then waiting requests are admitted in order (FCFS, or
//     longest prefix match first with ReplayConfig::schedule) while the
//     batch has room (max_running sequences, a token budget of max_batched_tokens per step) and
//     the backend's side-effect-free can_admit says yes. With chunked prefill a long prompt is
//     split across steps to fit the budget; without it a prompt is prefilled in one step.
//  4. The clock advances: in memory mode by the declared roofline cost model; in execute mode by
//     the measured time of the attention kernels that really ran over the backend's memory (all
//     layers, or the first `execute_layers` scaled up; CUDA events on a GPU). Memory accounting is
//     identical. A device error in the step's kernels (or in staging their arguments) fails the
//     requests of that step, with the reason, and the replay goes on.
//  5. Every sequence that did work samples a token; finished requests release their memory.
//
// Token semantics (vLLM's): a request with P prompt and O output tokens holds P tokens after its
// prefill and P + i after its i-th decode step; it finishes after O - 1 decode steps, so it never
// holds more than P + O - 1 tokens (the last sampled token's KV is never written). With parallel
// sampling (n > 1) the prefilled prompt is forked into n sequences that decode independently; the
// request finishes when all n have produced O tokens.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "alloc/backend/kv_backend.hpp"
#include "alloc/core/memory_breakdown.hpp"
#include "alloc/memory/memory_resource.hpp"
#include "serving/clock/cost_model.hpp"
#include "serving/replay/schedule_policy.hpp"
#include "serving/traces/workload.hpp"
#include "serving/replay/serving_metrics.hpp"
#include "serving/replay/step_plan.hpp"
#include "kernels/attention_params.hpp"

namespace kvlab {

enum class LongRequestPolicy { reject, truncate };
enum class PreemptionMode { recompute, swap };
/// How a step mixes prompts and decodes. mixed: new prompts join the decoders' step (vLLM v1,
/// Sarathi). separate: a step that can admit waiting prompts runs only those prompts and the
/// running decoders wait for the next step (vLLM v0's scheduler, the system of the vLLM paper:
/// prompts are scheduled first, and a step is a prompt step or a decode step, never both).
enum class PrefillSteps { mixed, separate };

/// Runs attention for one layer of a prepared batch.
using AttentionFn = std::function<void(const AttentionParams&, const KvView&)>;

struct ReplayConfig {
  int max_running = 256;                             ///< sequences in a batch
  std::int64_t max_batched_tokens = 8192;            ///< tokens computed per step (decodes + prefill chunks)
  bool chunked_prefill = false;                      ///< split prompts to fit max_batched_tokens
  PrefillSteps prefill_steps = PrefillSteps::mixed;  ///< separate needs chunked_prefill off
  PreemptionMode preemption = PreemptionMode::recompute;
  LongRequestPolicy long_requests = LongRequestPolicy::reject;
  /// Which waiting request is admitted next: FCFS or longest prefix match (serving/replay/schedule_policy.hpp).
  SchedulePolicyOptions schedule;
  int samples_per_request = 1;  ///< parallel sampling n (or beam width): the prompt is shared by n sequences
  /// Beam search: after every decode step each beam, with this probability, is replaced by a fork
  /// of another beam of its request (a seeded stand-in for top-k beam selection), so beams share
  /// the generated tokens too, not only the prompt. 0: independent samples.
  double beam_reselect_probability = 0;
  std::uint64_t seed = 0;  ///< for beam reselection
  /// The modelled clock's device (serving/devices/*.txt or a file from kvlab calibrate).
  DeviceModel device = device_model_preset("a100-80gb");
  /// Execute mode: run the host attention kernels over the backend's memory every step and
  /// advance the clock by their measured time. Needs a backend with storage.
  bool execute = false;
  /// Write a deterministic pattern into every KV slot computed and read every resident sequence
  /// back after every step (serving/replay/kv_integrity.hpp). Needs a host backend with storage; slow.
  bool verify_kv = false;
  int execute_layers = 0;  ///< layers really run in execute mode (0: all); time is scaled to all
  /// Keep every step's record in ReplayResult::steps. Off: steps stays empty (the summary is the
  /// same), so a run that writes no steps.csv keeps no per-step memory (one request of 10 M output
  /// tokens kept 2.8 GB of steps).
  bool keep_steps = true;
  /// The backend shares its memory with other replays (replay_tenants' elastic pool): a request
  /// that does not fit while nothing of this replay runs waits for the others to free memory
  /// instead of being rejected (unless it needs more than the whole capacity).
  bool shared_memory = false;
  /// Set by replay_interleaved when every unfinished replay waits for memory the others hold (an
  /// idle tenant's cache, a finished one's mapped pages): a request that cannot fit while nothing
  /// of this replay runs is then rejected, as it would be alone, and counted as out of memory.
  bool memory_stalled = false;
  /// Set by replay_interleaved while a replay of higher priority (ReplayJob::priority) waits for
  /// memory: this one admits no new request; its running ones go on, and free memory as they end.
  bool admissions_held = false;
  /// The attention implementation execute mode runs over each layer's view. Empty: the backend
  /// device's default kernels (kvlab::attention: host kernels on the host; on a GPU FlashInfer's
  /// where built, else kvlab's CUDA kernels). `kvlab replay --kernels emulated` passes the CUDA
  /// kernels under the host SIMT emulator, `--kernels kvlab|flashinfer` the one named.
  AttentionFn attention;
  /// Service-level objectives for goodput (kvlab --goodput); none by default.
  ServingSlo goodput;
  /// The latency percentiles the outputs report (--percentiles).
  std::vector<double> percentiles = kDefaultPercentiles;
  /// Execute mode with a backend on a device (cuda, emulated): device memory for the queries,
  /// outputs and query offsets the kernels read and write (the backend's own memory resource, from
  /// the factory's DeviceContext). Needed exactly when the backend's device is not the host.
  MemoryResource* device_memory = nullptr;
  /// Called before every step; it may throw to stop the replay there (kvlab's SIGINT/SIGTERM
  /// handling: experiments/runs/run_control.hpp). Empty: nothing.
  std::function<void()> at_step_boundary;
  /// Called with every step's plan once the scheduler made it, before the step runs (`kvlab replay
  /// --dump-plans`): the plans that run, and those that only record events (an admission refused,
  /// a request rejected). Empty: nothing.
  std::function<void(const StepPlan&)> on_plan;
};

struct StepRecord {
  double time_s = 0;  ///< clock at the end of the step
  double duration_s = 0;
  /// Sequences that did work this step; with separate prefill steps, also the decoders that sat
  /// out a prompt step (they keep their place in the running batch, as in vLLM v0's running queue).
  int running = 0;
  int waiting = 0;  ///< arrived requests not running (waiting + swapped)
  std::int64_t prefill_tokens = 0, decode_tokens = 0;
  MemoryFractions fractions;
  std::size_t allocated_bytes = 0;
  /// Physical KV memory the backend holds (KvBackend::held_bytes(): mapped pages for vmm and
  /// elastic, the whole capacity for the others).
  std::size_t held_bytes = 0;
  /// The packed floor: bytes of the blocks (or pages) that hold KV, live sequences' and cached
  /// (MemoryBreakdown used() + cached) - what the backend would hold with no fragmentation and
  /// no mapped free pages.
  std::size_t floor_bytes = 0;
  std::size_t shared_savings_bytes = 0;  ///< bytes sharing saved (fork, prefix caching)
  double kernel_s = 0;                   ///< measured attention time (execute mode), scaled to all layers
  double prepare_s = 0;                  ///< building/uploading the per-batch arrays (execute mode)
  double mapping_s = 0;  ///< critical-path mapping: measured (execute mode) or modelled from the backend's map counts
  /// The modelled clock's parts (memory mode; in execute mode only transfer and copy are modelled).
  StepTime parts;
};

struct RequestRecord {
  std::int64_t id = 0;
  double arrival_s = 0;
  double first_scheduled_s = -1;
  double first_token_s = -1;
  double finish_s = -1;
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;     ///< as requested by the workload (per sample)
  std::int64_t generated_tokens = 0;  ///< as produced, over all samples (fewer when truncated)
  int preemptions = 0;
  /// rejected: never served (too long, cannot fit); failed: a device error (an injected fault, a
  /// failed copy) ended it, its memory released. Both carry the reason.
  enum class Status { completed, rejected, truncated_completed, failed } status = Status::completed;
  std::string reason;  ///< why rejected or failed

  [[nodiscard]] bool finished() const noexcept { return finish_s >= 0; }
  [[nodiscard]] double ttft() const noexcept { return first_token_s - arrival_s; }
  [[nodiscard]] double e2e() const noexcept { return finish_s - arrival_s; }
};

struct ReplaySummary {
  std::string backend;
  std::string clock = "modelled";  ///< "modelled" (memory mode) or "measured" (execute mode)
  std::int64_t requests = 0, completed = 0, rejected = 0, truncated = 0, failed = 0;
  std::int64_t steps = 0, preemptions = 0, swaps = 0, out_of_memory = 0;
  std::int64_t generated_tokens = 0, prompt_tokens = 0, prefill_tokens_computed = 0;
  double makespan_s = 0;  ///< from the first arrival to the end of the last step
  double busy_s = 0;      ///< sum of step durations (idle gaps between arrivals left out)
  double mean_batch = 0;  ///< running sequences, weighted by step time
  int max_batch = 0;
  MemoryFractions mean_fractions;  ///< weighted by step time
  std::size_t peak_allocated_bytes = 0;
  std::size_t capacity_bytes = 0;
  std::size_t mean_shared_savings_bytes = 0;  ///< time-weighted bytes saved by sharing
  /// Physical KV memory held (StepRecord::held_bytes): time-weighted over busy time, and the most.
  std::size_t mean_held_bytes = 0, peak_held_bytes = 0;
  double mean_ttft_s = 0, p99_ttft_s = 0, mean_tpot_s = 0, mean_e2e_s = 0, mean_normalized_latency_s = 0;
  /// Serving metrics as vLLM's bench serve reports them (serving/replay/serving_metrics.hpp), over the
  /// finished requests: TTFT, TPOT (requests of more than one output token), ITL (every gap between
  /// a request's consecutive tokens, across requests) and end-to-end latency.
  LatencyStats ttft, tpot, itl, e2el;
  /// Goodput (ReplayConfig::goodput given): finished requests meeting every objective, per second
  /// of makespan, and as a share of the finished requests (SLO attainment); -1 without objectives.
  double goodput_requests_per_s = -1, slo_attainment_frac = -1;
  double kernel_s = 0, prepare_s = 0;     ///< execute mode totals
  double mapping_s = 0;                   ///< critical-path mapping time, summed (StepRecord::mapping_s)
  StepTime clock_parts;                   ///< the modelled clock's parts, summed over steps
  std::int64_t prefix_hit_tokens = 0;     ///< prompt tokens served from the prefix cache (prefill skipped)
  std::int64_t prefix_lookup_tokens = 0;  ///< prompt tokens looked up in the prefix cache
  /// Of the two above: admissions of requests preempted before (recomputed), counted apart as vLLM
  /// v1 does (PrefixCacheStats.preempted_*): what they find is mostly their own KV from before the
  /// preemption. Hit rate across requests = (hit - preempted_hit) / (lookup - preempted_lookup).
  std::int64_t prefix_preempted_hit_tokens = 0;
  std::int64_t prefix_preempted_lookup_tokens = 0;
  std::int64_t kv_mismatches = 0;      ///< verify_kv: KV elements that did not read back as written
  std::int64_t kv_tokens_checked = 0;  ///< verify_kv: token reads (summed over steps)
  double wall_s = 0;                   ///< wall-clock seconds the replay itself took
  /// What the device still held or refused to free once the backend was gone (leaks, refused
  /// deallocations with their CUresult, contract violations on the emulated device); empty when
  /// clean. The measurement stands; the run exits non-zero (experiments/cli/kvlab_main.cpp).
  std::string device_fault;
  /// The backend's own named counters at the end of the replay (KvBackend::counters(): copy-on-write
  /// copies, vmm maps and reclaimed pages, ...): what is specific to a backend lives here, by name.
  BackendCounters backend_counters;
};

/// The backend's memory at one moment: what it holds and its packed floor (StepRecord's fields).
struct MemorySample {
  double time_s = 0;
  std::size_t held_bytes = 0;
  std::size_t floor_bytes = 0;
};

struct ReplayResult {
  ReplaySummary summary;
  std::vector<StepRecord> steps;
  std::vector<RequestRecord> requests;
  /// Each time the replay ran out of work (nothing running, waiting or swapped), the backend's
  /// memory after that step's releases; it stays so until the next step. An idle tenant's memory
  /// (docs/elastic.md): what a step record, taken before the step's releases, does not show.
  std::vector<MemorySample> idle;
};

/// What a replay of a workload keeps in memory until it ends, bounded from above before it starts
/// (the rule of --max-memory-gib): a record per request, the inter-token gap of every generated
/// token (for the ITL statistics), and with keep_steps a record per step, counting one step per
/// generated token and per prefill chunk as if no two sequences ever shared a step.
struct KeptMemoryEstimate {
  std::int64_t requests = 0;
  std::int64_t generated_tokens = 0;  ///< output tokens over all samples
  std::int64_t steps = 0;             ///< an upper bound (0 without keep_steps)
  std::size_t bytes = 0;
};
[[nodiscard]] KeptMemoryEstimate estimate_kept_memory(const std::vector<Request>& workload, const ReplayConfig& config);

/// Called now and then with (requests finished or rejected, total).
using ProgressCallback = std::function<void(std::int64_t, std::int64_t)>;

/// Replays `workload` (sorted by arrival) through `backend`, which must start empty; it is empty
/// again afterwards. Every request ends completed, truncated, rejected or failed (with a reason):
/// out of memory is counted and handled by the scheduler, and a device error fails only the
/// request it hit.
[[nodiscard]] ReplayResult replay(KvBackend& backend, const std::vector<Request>& workload, const ReplayConfig& config,
                                  const ProgressCallback& progress = {});

/// One of several replays on one timeline; their backends may share memory (a PhysicalBudget).
struct ReplayJob {
  KvBackend* backend = nullptr;
  const std::vector<Request>* workload = nullptr;
  ReplayConfig config;
  /// Called with the replay's clock before each of its iterations (a tenant's limit changes).
  std::function<void(double now_s)> before_step;
  /// While a replay of higher priority waits for memory, this one admits nothing new
  /// (ReplayConfig::admissions_held).
  int priority = 0;
  /// Fair share (0: none): while another replay that holds less than its own fair share waits for
  /// memory, this one, holding at least this many bytes, admits nothing new; its running requests
  /// go on and return memory as they end.
  std::size_t fair_share_bytes = 0;
};

/// Runs the replays interleaved in time: each iteration goes to the replay whose next action is
/// earliest (ties: the lowest index), so memory one takes is taken before anything later of the
/// others. Each prices its steps on its own clock (they share memory, not compute). A replay that
/// has work but can run none (it waits for memory another holds) waits until another acts and then
/// resumes at that one's time. Throws Error when every unfinished replay waits (nothing can run).
/// Returns the results in order.
[[nodiscard]] std::vector<ReplayResult> replay_interleaved(std::vector<ReplayJob>& jobs);

}  // namespace kvlab
