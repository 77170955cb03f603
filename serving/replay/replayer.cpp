#include "serving/replay/replayer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>

#include "alloc/core/error.hpp"
#include "alloc/transfer/device_staging.hpp"
#include "serving/replay/detail/sequence_group.hpp"
#include "serving/replay/kv_fill.hpp"
#include "serving/replay/kv_integrity.hpp"
#include "serving/replay/scheduler.hpp"
#include "kernels/attention.hpp"
#include "kernels/batch_attention_params.hpp"
#include "kernels/device_timer.hpp"

namespace kvlab {

namespace {

using Clock = std::chrono::steady_clock;
using detail::attempt;
using detail::Outcome;

/// The executor: asks the scheduler for each step's plan, prices it on the clock (modelled, or the
/// measured time of the kernels it runs over the plan's work), and hands it back to produce its
/// tokens. It owns the clock, the kernels' buffers and the summary's averages.
class Replay {
 public:
  Replay(KvBackend& backend, const std::vector<Request>& workload, const ReplayConfig& config,
         const ProgressCallback& progress)
      : b_(backend), w_(workload), c_(config), progress_(progress) {}

  ReplayResult run();

  // The replay one iteration at a time (run() is begin, advance until done, end), so that several
  // replays can interleave on one timeline (serving/replay/tenants.hpp).
  void begin();
  [[nodiscard]] bool done() const { return sched_->ended() >= result_.summary.requests; }
  /// When this replay acts next: now while work waits or runs, else its next arrival; nullopt when
  /// every request has ended.
  [[nodiscard]] std::optional<double> next_time() const;
  /// Takes the arrivals due and runs one step. True when it ran a step or a request ended.
  bool advance();
  /// Moves the clock to `t` (it waits for memory another replay holds).
  void wait_until(double t) { now_ = std::max(now_, t); }
  [[nodiscard]] double now() const noexcept { return now_; }
  /// Its last step could not admit a request for want of memory.
  [[nodiscard]] bool blocked_on_memory() const { return sched_ && sched_->blocked().has_value(); }
  ReplayResult end();

 private:
  void run_step();
  void account(const StepPlan& plan);
  void summarize();
  [[nodiscard]] StepWork step_work(const StepPlan& plan) const;
  double execute_kernels(const StepPlan& plan, double& prepare_s);
  /// The step's kernels under the catch ladder: a device error fails the step's requests.
  double execute_step(const StepPlan& plan, double& prepare_s);
  /// Where the kernels read q and q_indptr and write out: host vectors, or their device copies.
  struct KernelArgs {
    const float* q;
    float* out;
    const std::int32_t* q_indptr;
  };
  [[nodiscard]] KernelArgs kernel_args();

  KvBackend& b_;
  const std::vector<Request>& w_;
  const ReplayConfig& c_;
  const ProgressCallback& progress_;
  ReplayResult result_;
  double now_ = 0;
  std::unique_ptr<KvIntegrity> integrity_;
  std::optional<KvFill> fill_;  // execute mode on the host without verify_kv
  std::optional<Scheduler> sched_;
  std::vector<SeqId> next_decoders_;  // this step's, for prefetch
  bool prefetched_ = false;           // execute mode: the prefetch for next_decoders_ was started
  double shared_savings_time_ = 0;    // integral of shared_savings over busy time
  double held_time_ = 0;              // integral of held bytes over busy time
  // Execute mode buffers.
  std::vector<float> q_, out_;
  std::vector<std::int32_t> q_indptr_;
  DeviceStaging q_device_, out_device_;  // device copies (backends on a device)
  std::optional<DeviceTimer> timer_;
  std::mt19937_64 rng_{12345};
  Clock::time_point wall0_;
};

double Replay::execute_kernels(const StepPlan& plan, double& prepare_s) {
  std::vector<SeqId> ids;
  q_indptr_.assign(1, 0);
  for (const PlannedWork& w : plan.work) {
    ids.push_back(w.seq);
    q_indptr_.push_back(q_indptr_.back() + static_cast<std::int32_t>(w.tokens));
  }
  if (ids.empty()) return 0;
  const ModelGeometry& m = b_.model();
  const std::size_t qsize = static_cast<std::size_t>(q_indptr_.back()) * m.num_q_heads * m.head_dim;
  if (q_.size() < qsize) {
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    const std::size_t old = q_.size();
    q_.resize(qsize);
    for (std::size_t i = old; i < qsize; ++i) q_[i] = uni(rng_);
    out_.resize(qsize);
  }
  const auto t0 = Clock::now();
  const PreparedBatch batch = b_.prepare_batch(ids);
  const KernelArgs a = kernel_args();
  const auto t1 = Clock::now();
  const AttentionParams p = batch_attention_params(m, batch, a.q, a.out, a.q_indptr, q_indptr_.data());
  const int layers = c_.execute_layers > 0 ? std::min(c_.execute_layers, m.num_layers) : m.num_layers;
  if (!timer_) timer_.emplace(b_.device());
  timer_->start();
  for (int l = 0; l < layers; ++l) {
    if (c_.attention) {
      c_.attention(p, b_.layer_view(l));
    } else {
      attention(b_.device(), p, b_.layer_view(l));
    }
  }
  // The next step's background work (vmm: mapping its pages) starts once every kernel is queued,
  // so it overlaps the device's compute without delaying a launch; on the host, whose kernels ran
  // already, it overlaps the replay's own work until the next step waits for it (begin_step, which
  // counts that wait as critical-path mapping).
  const double kernels_s = timer_->stop([&] {
    try {
      b_.prefetch(next_decoders_);
      prefetched_ = true;
    } catch (...) {  // not the kernels' failure: account() starts it again outside the step's attempt
    }
  });  // waits for the device's kernels
  prepare_s = std::chrono::duration<double>(t1 - t0).count();
  return kernels_s * m.num_layers / layers;
}

Replay::KernelArgs Replay::kernel_args() {
  if (b_.device() == Device::host || c_.device_memory == nullptr) return {q_.data(), out_.data(), q_indptr_.data()};
  // Device kernels read their arguments from device memory: q and the offsets in one upload, the
  // output buffer beside them (staging grows as needed and is reused across steps).
  const std::size_t n = static_cast<std::size_t>(q_indptr_.back()) * b_.model().num_q_heads * b_.model().head_dim;
  std::byte* qi =
      q_device_.upload(*c_.device_memory, std::as_bytes(std::span(q_.data(), n)), std::as_bytes(std::span(q_indptr_)));
  std::byte* out = out_device_.upload(*c_.device_memory, std::as_bytes(std::span(out_.data(), n)), {});
  return {reinterpret_cast<const float*>(qi), reinterpret_cast<float*>(out),
          reinterpret_cast<const std::int32_t*>(qi + n * sizeof(float))};
}

double Replay::execute_step(const StepPlan& plan, double& prepare_s) {
  double kernel_s = 0;
  std::string error;
  if (attempt([&] { kernel_s = execute_kernels(plan, prepare_s); }, &error) == Outcome::ok) return kernel_s;
  sched_->fail_step(error);
  return 0;
}

/// What the plan asks of the device, for the modelled clock.
StepWork Replay::step_work(const StepPlan& plan) const {
  StepWork work;
  work.view = b_.view_shape();
  const ViewShape& shape = work.view;
  const auto blocks = [&](std::int64_t len) {
    return shape.layout == KvLayout::paged && shape.block_tokens > 0
               ? (len + shape.block_tokens - 1) / shape.block_tokens
               : 0;
  };
  for (const PlannedWork& w : plan.work) {
    const std::int64_t len = w.kv_after();
    (w.prefill ? work.prefill_tokens : work.decode_tokens) += w.tokens;
    work.kv_tokens_read += len;
    work.attention_pairs += w.prefill ? w.tokens * w.kv_from + w.tokens * (w.tokens + 1) / 2 : len;
    ++work.sequences;
    work.block_table_entries += blocks(len);
  }
  return work;
}

/// The step's work, its duration and its memory.
void Replay::account(const StepPlan& plan) {
  ReplaySummary& sum = result_.summary;
  StepRecord rec;
  next_decoders_.clear();
  for (const PlannedWork& w : plan.work)
    if (w.decodes_next) next_decoders_.push_back(w.seq);
  // Measured clock: the next step's background work (vmm: map its pages) starts once this step's
  // kernels are queued (execute_kernels). Modelled clock: after the step's tokens (run_step), so
  // the background thread never races this step's releases and the replay does not depend on
  // thread timing.
  prefetched_ = false;
  const StepCosts costs = b_.step_costs();
  StepWork work = step_work(plan);
  work.ops = costs;
  rec.parts = step_time(b_.model(), c_.device, work);
  double dt = 0;
  if (c_.execute) {
    // Measured: the kernels' and the mapping's wall time. Copies to the host and copy-on-write
    // stay modelled (execute mode copies host memory, which is not what a GPU would wait for).
    rec.kernel_s = execute_step(plan, rec.prepare_s);
    if (!prefetched_) {  // no kernel ran, the step failed or the prefetch threw: start it now, for what still runs
      std::erase_if(next_decoders_, [&](SeqId id) { return !b_.contains(id); });
      b_.prefetch(next_decoders_);
    }
    rec.mapping_s = costs.mapping_s;
    rec.parts = StepTime{.transfer = rec.parts.transfer, .copy = rec.parts.copy};
    dt = rec.kernel_s + rec.mapping_s + rec.parts.total();  // mapping on the critical path delays the step
    sum.kernel_s += rec.kernel_s;
    sum.prepare_s += rec.prepare_s;
  } else {
    rec.mapping_s = rec.parts.mapping;
    dt = rec.parts.total();
  }
  sum.mapping_s += rec.mapping_s;
  sum.clock_parts += rec.parts;
  const auto& blocked = sched_->blocked();
  const MemoryBreakdown mem = b_.breakdown(blocked ? &*blocked : nullptr);
  now_ += dt;
  rec.time_s = now_;
  rec.duration_s = dt;
  rec.running = plan.sequences() + plan.paused;
  rec.waiting = plan.waiting;
  rec.prefill_tokens = work.prefill_tokens;
  rec.decode_tokens = work.decode_tokens;
  rec.fractions = MemoryFractions::of(mem);
  rec.allocated_bytes = mem.allocated();
  rec.shared_savings_bytes = mem.shared_savings;
  rec.held_bytes = b_.held_bytes().value_or(mem.capacity);
  rec.floor_bytes = mem.used() + mem.cached;
  if (c_.keep_steps) result_.steps.push_back(rec);
  sum.mean_fractions.add_scaled(rec.fractions, dt);
  shared_savings_time_ += static_cast<double>(mem.shared_savings) * dt;
  held_time_ += static_cast<double>(rec.held_bytes) * dt;
  sum.peak_held_bytes = std::max(sum.peak_held_bytes, rec.held_bytes);
  sum.busy_s += dt;
  sum.mean_batch += dt * rec.running;
  sum.max_batch = std::max(sum.max_batch, rec.running);
  sum.peak_allocated_bytes = std::max(sum.peak_allocated_bytes, mem.allocated());
  sum.prefill_tokens_computed += work.prefill_tokens;
  ++sum.steps;
}

/// Plan, price and run one step, then produce its tokens.
void Replay::run_step() {
  // Background work begun last step for this one (vmm: prefetched pages) finishes first; an error
  // it met is counted like an allocation that failed, and the step's own calls map what it could not.
  if (attempt([&] { b_.begin_step(); }) != Outcome::ok) ++result_.summary.out_of_memory;
  const StepPlan plan = sched_->plan_step();
  if (c_.on_plan && (plan.runs() || !plan.events.empty())) c_.on_plan(plan);
  if (!plan.runs()) return;
  if (fill_) fill_->write(sched_->computed_tokens());  // before the kernels read them
  account(plan);
  if (integrity_) sched_->write_and_verify_kv();
  sched_->complete_step();
  if (!c_.execute) {
    std::erase_if(next_decoders_, [&](SeqId id) { return !b_.contains(id); });  // finished or replaced beams
    b_.prefetch(next_decoders_);
  }
}

void Replay::begin() {
  KVLAB_EXPECTS(b_.num_sequences() == 0, "replay needs an empty backend");
  KVLAB_EXPECTS(c_.max_running >= 1, "max_running must be at least 1");
  KVLAB_EXPECTS(c_.max_batched_tokens >= 1, "max_batched_tokens must be at least 1");
  KVLAB_EXPECTS(c_.prefill_steps == PrefillSteps::mixed || !c_.chunked_prefill,
                "separate prefill steps run whole prompts: turn chunked prefill off");
  KVLAB_EXPECTS(c_.samples_per_request >= 1, "samples per request must be at least 1");
  KVLAB_EXPECTS(c_.samples_per_request <= c_.max_running, "samples per request must fit max_running");
  KVLAB_EXPECTS(!c_.execute || b_.has_storage(), "execute mode needs a backend with KV storage");
  KVLAB_EXPECTS(!c_.execute || b_.device() == Device::host || c_.attention || c_.device_memory != nullptr,
                "execute mode on a device needs ReplayConfig::device_memory for the kernels' arguments");
  for (std::size_t i = 1; i < w_.size(); ++i)
    KVLAB_EXPECTS(w_[i].arrival_s >= w_[i - 1].arrival_s, "workload must be sorted by arrival");
  KVLAB_EXPECTS(c_.beam_reselect_probability >= 0 && c_.beam_reselect_probability <= 1,
                "beam reselection probability must be in [0, 1]");
  if (c_.verify_kv) integrity_ = std::make_unique<KvIntegrity>(b_);
  // Host kernels must not read never-written pool memory (Linux's zero page, never fetched from
  // DRAM): the KV each step computes is written first (kv_fill.hpp). The integrity checker writes it otherwise.
  if (c_.execute && !c_.verify_kv && b_.device() == Device::host)
    fill_.emplace(b_, c_.execute_layers > 0 ? c_.execute_layers : b_.model().num_layers);
  wall0_ = Clock::now();
  ReplaySummary& sum = result_.summary;
  sum.backend = b_.name();
  sum.clock = c_.execute ? "measured" : "modelled";
  sum.requests = static_cast<std::int64_t>(w_.size());
  sum.capacity_bytes = b_.breakdown().capacity;
  result_.requests.resize(w_.size());
  if (c_.keep_steps) {
    // Room for the steps up front, up to a bound: pages are only zeroed (and counted) once a step
    // is written, while a vector that doubles touches twice the memory and copies it. A replay's
    // fresh pages were a large part of its wall time (results/README.md, 2026-11-29c).
    constexpr std::int64_t kReservedSteps = std::int64_t{1} << 20;  // about 190 MB of address space
    result_.steps.reserve(static_cast<std::size_t>(std::min(estimate_kept_memory(w_, c_).steps, kReservedSteps)));
  }
  sched_.emplace(b_, w_, c_, result_, now_, integrity_.get(), progress_);
}

std::optional<double> Replay::next_time() const {
  if (done()) return std::nullopt;
  if (!sched_->idle()) return now_;
  const auto next = sched_->next_arrival_s();
  return next ? std::max(now_, *next) : now_;
}

bool Replay::advance() {
  if (sched_->idle())
    if (const auto next = sched_->next_arrival_s()) now_ = std::max(now_, *next);  // idle: jump to the next arrival
  sched_->take_arrivals();
  if (sched_->idle()) return true;
  if (c_.at_step_boundary) c_.at_step_boundary();
  const std::int64_t before = sched_->ended();
  const std::int64_t steps_before = result_.summary.steps;
  run_step();
  if (sched_->idle()) {  // out of work: what the backend keeps until the next arrival
    const MemoryBreakdown mem = b_.breakdown();
    result_.idle.push_back({now_, b_.held_bytes().value_or(mem.capacity), mem.used() + mem.cached});
  }
  return result_.summary.steps != steps_before || sched_->ended() != before;
}

ReplayResult Replay::end() {
  summarize();
  result_.summary.wall_s = std::chrono::duration<double>(Clock::now() - wall0_).count();
  KVLAB_ASSERT(b_.num_sequences() == 0);
  return std::move(result_);
}

ReplayResult Replay::run() {
  begin();
  std::int64_t idle_steps = 0;
  while (!done()) {
    // A step that ran nothing and finished nothing, with no arrival left to wait for, cannot
    // change anything the next time either: fail loudly instead of spinning.
    const bool nothing = !advance() && !sched_->next_arrival_s();
    idle_steps = nothing ? idle_steps + 1 : 0;
    if (idle_steps > 1000)
      KVLAB_THROW(Error, "replay stalled: " + std::to_string(sched_->waiting()) + " waiting, " +
                             std::to_string(sched_->swapped()) + " swapped, nothing can run (a kvlab bug)");
  }
  return end();
}

/// The summary's averages: time-weighted memory and batch, per-request latencies.
void Replay::summarize() {
  ReplaySummary& sum = result_.summary;
  // From the first arrival: traces with absolute (epoch) timestamps report the same rates.
  sum.makespan_s = w_.empty() ? 0 : now_ - w_.front().arrival_s;
  if (sum.busy_s > 0) {
    MemoryFractions m;
    sum.mean_fractions = m.add_scaled(sum.mean_fractions, 1.0 / sum.busy_s);
    sum.mean_batch /= sum.busy_s;
    sum.mean_shared_savings_bytes = static_cast<std::size_t>(shared_savings_time_ / sum.busy_s);
    sum.mean_held_bytes = static_cast<std::size_t>(held_time_ / sum.busy_s);
  }
  std::vector<double> ttfts, tpots, e2els;
  std::int64_t n_tpot = 0, good = 0;
  for (const RequestRecord& r : result_.requests) {
    if (!r.finished()) continue;
    ttfts.push_back(r.ttft());
    e2els.push_back(r.e2e());
    sum.mean_ttft_s += r.ttft();
    sum.mean_e2e_s += r.e2e();
    const std::int64_t per_sample = r.generated_tokens / std::max(1, c_.samples_per_request);
    sum.mean_normalized_latency_s += r.e2e() / static_cast<double>(std::max<std::int64_t>(per_sample, 1));
    double tpot = -1;
    if (per_sample > 1) {
      tpot = (r.e2e() - r.ttft()) / static_cast<double>(per_sample - 1);
      tpots.push_back(tpot);
      sum.mean_tpot_s += tpot;
      ++n_tpot;
    }
    good += c_.goodput.met(r.ttft(), tpot, r.e2e());
  }
  sum.ttft = latency_stats(ttfts, c_.percentiles);
  sum.tpot = latency_stats(std::move(tpots), c_.percentiles);
  sum.e2el = latency_stats(std::move(e2els), c_.percentiles);
  sum.itl = latency_stats_of_runs(sched_->take_inter_token_gaps(), c_.percentiles);
  if (c_.goodput.any() && !ttfts.empty()) {
    sum.slo_attainment_frac = static_cast<double>(good) / static_cast<double>(ttfts.size());
    sum.goodput_requests_per_s = sum.makespan_s > 0 ? static_cast<double>(good) / sum.makespan_s : 0;
  }
  if (!ttfts.empty()) {
    const double n = static_cast<double>(ttfts.size());
    sum.mean_ttft_s /= n;
    sum.mean_e2e_s /= n;
    sum.mean_normalized_latency_s /= n;
    std::sort(ttfts.begin(), ttfts.end());
    sum.p99_ttft_s = ttfts[static_cast<std::size_t>(std::ceil(0.99 * n)) - 1];
  }
  if (n_tpot > 0) sum.mean_tpot_s /= static_cast<double>(n_tpot);
  sum.prefix_lookup_tokens = b_.prefix_cache_stats().queries;
  sum.backend_counters = b_.counters();
  if (integrity_) {
    sum.kv_mismatches = integrity_->mismatches();
    sum.kv_tokens_checked = integrity_->tokens_checked();
  }
}

}  // namespace

KeptMemoryEstimate estimate_kept_memory(const std::vector<Request>& workload, const ReplayConfig& config) {
  // Per request: its RequestRecord (reason included), the scheduler's entry and its share of the
  // summary's per-request vectors: 512 bytes covers them with room. Per generated token, at most
  // (no two consecutive gaps equal): a run of its gap, in a vector that grows, and the sort's copy
  // at the end, whose counts come once (serving/support/float_runs.hpp).
  constexpr std::size_t kPerRequest = 512, kPerToken = FloatRuns::kBytesPerValue + FloatRuns::kSortBytesPerValue;
  KeptMemoryEstimate e;
  const std::int64_t chunk = std::max<std::int64_t>(config.max_batched_tokens, 1);
  const std::int64_t samples = std::max(config.samples_per_request, 1);
  for (const Request& r : workload) {
    ++e.requests;
    e.generated_tokens += r.output_tokens * samples;
    if (config.keep_steps) e.steps += r.output_tokens + (r.prompt_tokens + chunk - 1) / chunk;
  }
  e.bytes = FloatRuns::kSortFixedBytes + static_cast<std::size_t>(e.requests) * kPerRequest +
            static_cast<std::size_t>(e.generated_tokens) * kPerToken +
            static_cast<std::size_t>(e.steps) * sizeof(StepRecord);
  return e;
}

ReplayResult replay(KvBackend& backend, const std::vector<Request>& workload, const ReplayConfig& config,
                    const ProgressCallback& progress) {
  return Replay(backend, workload, config, progress).run();
}

namespace {
/// The replay replay_interleaved runs next: the earliest next action among those not waiting.
std::optional<std::size_t> pick_next(const std::vector<std::unique_ptr<Replay>>& rs, const std::vector<char>& waiting) {
  std::optional<std::size_t> best;
  double at = 0;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const auto t = rs[i]->next_time();
    if (!t || waiting[i] != 0) continue;
    if (!best || *t < at) {
      best = i;
      at = *t;
    }
  }
  return best;
}

/// Whether replay `i` must admit nothing new now: a replay of higher priority waits for memory, or
/// (fair share) one below its share waits while `i` holds at least its own.
bool admissions_held(const std::vector<ReplayJob>& jobs, const std::vector<std::unique_ptr<Replay>>& rs,
                     std::size_t i) {
  const auto holds = [&](std::size_t k) { return jobs[k].backend->held_bytes().value_or(0); };
  const bool over_share = jobs[i].fair_share_bytes > 0 && holds(i) >= jobs[i].fair_share_bytes;
  for (std::size_t k = 0; k < rs.size(); ++k) {
    if (k == i || rs[k]->done() || !rs[k]->blocked_on_memory()) continue;
    if (jobs[k].priority > jobs[i].priority) return true;
    if (over_share && jobs[k].fair_share_bytes > 0 && holds(k) < jobs[k].fair_share_bytes) return true;
  }
  return false;
}
}  // namespace

std::vector<ReplayResult> replay_interleaved(std::vector<ReplayJob>& jobs) {
  static const ProgressCallback no_progress;
  std::vector<std::unique_ptr<Replay>> rs;
  for (ReplayJob& j : jobs) {
    KVLAB_EXPECTS(j.backend != nullptr && j.workload != nullptr,
                  "an interleaved replay needs a backend and a workload");
    rs.push_back(std::make_unique<Replay>(*j.backend, *j.workload, j.config, no_progress));
    rs.back()->begin();
  }
  std::vector<char> waiting(rs.size(), 0);
  std::int64_t stalled = 0;  // rounds in a row in which every unfinished replay waited
  while (true) {
    std::optional<std::size_t> i = pick_next(rs, waiting);
    if (!i) {
      if (std::find(waiting.begin(), waiting.end(), 1) == waiting.end()) break;  // every replay is done
      // Every unfinished replay waits: let them try again (a step that only preempts runs
      // nothing and the next one runs), as replay() does. When that does not help, the memory
      // they wait for is held by replays that will not free it (an idle tenant's cache): from
      // then on they act as if alone, rejecting what cannot fit, until one makes progress.
      if (++stalled > 1000)
        KVLAB_THROW(Error,
                    "interleaved replays stalled: every unfinished one waits, even rejecting what cannot fit "
                    "(a kvlab bug)");
      if (stalled > 2)
        for (ReplayJob& j : jobs) j.config.memory_stalled = true;
      std::fill(waiting.begin(), waiting.end(), 0);
      i = pick_next(rs, waiting);
    }
    Replay& r = *rs[*i];
    if (jobs[*i].before_step) jobs[*i].before_step(*r.next_time());
    jobs[*i].config.admissions_held = admissions_held(jobs, rs, *i);
    if (!r.advance() && !r.done()) {
      waiting[*i] = 1;  // it has work but ran none: it waits until another acts
      continue;
    }
    stalled = 0;
    for (ReplayJob& j : jobs) j.config.memory_stalled = false;
    for (std::size_t k = 0; k < rs.size(); ++k)  // memory may have changed: the waiting try again, from now
      if (waiting[k] != 0) {
        waiting[k] = 0;
        rs[k]->wait_until(r.now());
      }
  }
  std::vector<ReplayResult> out;
  for (auto& r : rs) out.push_back(r->end());
  return out;
}

}  // namespace kvlab
