#include "experiments/replay/replayer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <numeric>
#include <random>

#include "alloc/transfer/device_staging.hpp"
#include "alloc/core/error.hpp"
#include "experiments/replay/kv_integrity.hpp"
#include "experiments/traces/token_ids.hpp"
#include "kernels/attention.hpp"
#include "kernels/batch_attention_params.hpp"
#include "kernels/device_timer.hpp"

namespace kvlab {

namespace {

using Clock = std::chrono::steady_clock;

/// A request preempted more often than this is rejected (with the reason) rather than cycling.
constexpr int kMaxPreemptions = 64;

/// What a backend call came to: the replayer's one catch ladder. InvalidArgument is a replayer bug
/// and propagates; OutOfMemory is a value the scheduler handles (preempt, wait, count); any other
/// Error (a failed copy, a driver error) fails only the request it hit. `error` gets the message.
enum class Outcome { ok, out_of_memory, failed };
template <class F>
Outcome attempt(F&& call, std::string* error = nullptr) {
  try {
    call();
    return Outcome::ok;
  } catch (const InvalidArgument&) {
    throw;
  } catch (const OutOfMemory& e) {
    if (error) *error = e.what();
    return Outcome::out_of_memory;
  } catch (const Error& e) {
    if (error) *error = e.what();
    return Outcome::failed;
  }
}

struct Seq {
  SeqId id = 0;
  std::int64_t produced = 0;  // output tokens sampled by this sequence
  bool done = false;
  // A KV slot for the next token is claimed (grown) but the token not yet produced. Kept across
  // a swap, so a sequence swapped out after claiming is not grown twice.
  bool has_slot = false;
  std::int64_t slot_step = -1;  // the step that counted this slot in its batch
};

/// A request in flight: one sequence while it prefills, n after the fork for parallel sampling.
struct Group {
  std::size_t req = 0;         // index into the workload and the records
  std::int64_t prompt = 0;     // tokens to prefill (a recompute adds what was generated)
  std::int64_t output = 0;     // tokens each sequence still has to produce
  std::int64_t prefilled = 0;  // prompt tokens whose KV is computed
  std::int64_t carried = 0;    // tokens generated before a recompute (folded into the prompt)
  std::vector<Seq> seqs;       // empty while waiting
  std::int64_t chunk = 0;      // prefill tokens scheduled this step
  bool in_step = false;        // did work this step
  // Token ids for prefix caching (empty: unknown): the prompt's, then (one sequence per request)
  // the answer's, from the trace where it says them (a next turn's prompt), else fresh ids.
  std::vector<std::int32_t> ids;
  bool readmitted = false;                  // admitted before (the next admission follows a preemption)
  double last_token_s = -1;                 // when the request's latest token came out (inter-token latency)
  std::int64_t admitted_from = 0;           // prompt tokens already in the cache at admission (not computed)
  mutable std::vector<std::uint64_t> tags;  // integrity tags of the prompt tokens (verify_kv)
  [[nodiscard]] bool prefilling() const noexcept { return prefilled < prompt; }
};

SequenceSpec spec_of(const Group& g) {
  SequenceSpec s{g.prompt, g.prompt + g.output - 1};
  if (static_cast<std::int64_t>(g.ids.size()) >= g.prompt) s.prompt_token_ids = g.ids;
  return s;
}

class Replay {
 public:
  Replay(KvBackend& backend, const std::vector<Request>& workload, const ReplayConfig& config,
         const ProgressCallback& progress)
      : b_(backend), w_(workload), c_(config), progress_(progress), token_ids_(workload) {}

  ReplayResult run();

 private:
  void arrivals();
  void finish(Group& g, RequestRecord::Status status, const std::string& reason = {});
  bool claim_slots(Group& g);
  void preempt(std::size_t pos);
  [[nodiscard]] std::size_t latest_running() const;
  void swap_in_groups();
  void admit_waiting();
  void order_waiting();
  void run_step();
  void summarize();
  // The four phases of a step.
  void claim_running();
  [[nodiscard]] bool prompt_step();
  [[nodiscard]] bool settle();
  void account();
  void retire();
  /// Claims a group's slots through the catch ladder: false when it did not fit; a device error
  /// fails the group (`failed` set, the caller removes it).
  bool try_claim(Group& g, bool& failed, std::string& error);
  [[nodiscard]] std::vector<SeqId> next_step_decoders() const;
  std::vector<SeqId> next_decoders_;  // this step's, for prefetch
  bool prefetched_ = false;           // execute mode: the prefetch for next_decoders_ was started
  [[nodiscard]] StepWork step_work() const;
  void reselect_beams(Group& g);
  void release_seq(SeqId id) {
    b_.release(id);
    if (integrity_) integrity_->forget(id);
  }
  void fork_seq(SeqId parent, SeqId child) {
    b_.fork(parent, child);
    if (integrity_) integrity_->fork(parent, child);
  }
  [[nodiscard]] const std::vector<std::uint64_t>& prompt_tags(Group& g) const;
  void check_integrity();
  double execute_kernels(double& prepare_s);
  /// The step's kernels under the catch ladder: a device error fails the step's requests.
  double execute_step(double& prepare_s);
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
  std::deque<Group> waiting_, swapped_;
  std::vector<Group> running_;
  std::vector<float> itl_;  // every inter-token gap of every request, seconds (4 bytes a token)
  /// A request's group produced a token now: its gap since the previous one is an ITL sample.
  void token_out(Group& g) {
    if (g.last_token_s >= 0) itl_.push_back(static_cast<float>(now_ - g.last_token_s));
    g.last_token_s = now_;
  }
  std::size_t next_arrival_ = 0;
  std::int64_t done_ = 0;
  SeqId next_seq_ = 0;
  double now_ = 0;
  std::int64_t budget_ = 0;
  int seqs_in_step_ = 0;
  int paused_ = 0;         // separate prefill steps: running sequences sitting out this prompt step
  std::int64_t step_ = 0;  // steps begun (slot bookkeeping)
  std::optional<SequenceSpec> blocked_;
  double shared_savings_time_ = 0;  // integral of shared_savings over busy time
  std::int32_t fresh_token_id_ = 0x7fffffff;
  TraceTokenIds token_ids_;  // prompt ids, and answers' ids where the trace implies them
  std::unique_ptr<KvIntegrity> integrity_;
  // Execute mode buffers.
  std::vector<float> q_, out_;
  std::vector<std::int32_t> q_indptr_;
  DeviceStaging q_device_, out_device_;  // device copies (backends on a device)
  std::optional<DeviceTimer> timer_;
  std::mt19937_64 rng_{12345};
  std::mt19937_64 beam_rng_;
};

void Replay::finish(Group& g, RequestRecord::Status status, const std::string& reason) {
  RequestRecord& r = result_.requests[g.req];
  ReplaySummary& s = result_.summary;
  for (Seq& q : g.seqs)
    if (b_.contains(q.id)) release_seq(q.id);
  r.status = status;
  if (status == RequestRecord::Status::rejected || status == RequestRecord::Status::failed) {
    r.reason = reason;
    ++(status == RequestRecord::Status::rejected ? s.rejected : s.failed);
    std::int64_t generated = g.carried;
    for (const Seq& q : g.seqs) generated += q.produced;
    r.generated_tokens = generated;
  } else {
    std::int64_t generated = g.carried;
    for (const Seq& q : g.seqs) generated += q.produced;
    r.generated_tokens = generated;
    r.finish_s = now_;
    s.generated_tokens += generated;
    ++(status == RequestRecord::Status::truncated_completed ? s.truncated : s.completed);
  }
  g.seqs.clear();
  ++done_;
  if (progress_ && (done_ % 256 == 0 || done_ == s.requests)) progress_(done_, s.requests);
}

void Replay::arrivals() {
  if (running_.empty() && waiting_.empty() && swapped_.empty() && next_arrival_ < w_.size())
    now_ = std::max(now_, w_[next_arrival_].arrival_s);  // idle: jump to the next arrival
  const std::int64_t max_len = b_.max_seq_len();
  while (next_arrival_ < w_.size() && w_[next_arrival_].arrival_s <= now_) {
    const Request& r = w_[next_arrival_];
    RequestRecord& rec = result_.requests[next_arrival_];
    rec.id = r.id;
    rec.arrival_s = r.arrival_s;
    rec.prompt_tokens = r.prompt_tokens;
    rec.output_tokens = r.output_tokens;
    Group g;
    g.req = next_arrival_++;
    g.prompt = r.prompt_tokens;
    g.output = std::max<std::int64_t>(r.output_tokens, 1);
    if (g.prompt < 1) {
      finish(g, RequestRecord::Status::rejected, "empty prompt");
      continue;
    }
    if (g.prompt + g.output - 1 > max_len) {
      if (c_.long_requests == LongRequestPolicy::reject) {
        finish(g, RequestRecord::Status::rejected, "longer than max_seq_len " + std::to_string(max_len));
        continue;
      }
      g.prompt = std::min(g.prompt, max_len);  // keep the prompt's head, then as much output as fits
      g.output = std::max<std::int64_t>(1, max_len - g.prompt + 1);
      rec.status = RequestRecord::Status::truncated_completed;
    }
    // The answer's ids let the cache enter decode blocks (a recompute re-hits them; a next turn
    // whose prompt holds the answer hits them). Parallel samples have no one answer.
    const bool answer = c_.samples_per_request == 1;
    const bool whole = g.prompt == r.prompt_tokens && g.output == r.output_tokens;  // not truncated
    g.ids = token_ids_.ids(g.req, answer && whole ? g.prompt + g.output - 1 : g.prompt);
    if (answer && static_cast<std::int64_t>(g.ids.size()) >= g.prompt)
      while (static_cast<std::int64_t>(g.ids.size()) < g.prompt + g.output - 1) g.ids.push_back(fresh_token_id_--);
    waiting_.push_back(std::move(g));
  }
}

std::size_t Replay::latest_running() const {
  std::size_t best = 0;
  for (std::size_t i = 1; i < running_.size(); ++i)
    if (running_[i].req > running_[best].req) best = i;
  return best;
}

/// Takes running_[pos] off the device: swapped out when the mode and the backend allow,
/// otherwise released and requeued to recompute.
void Replay::preempt(std::size_t pos) {
  Group g = std::move(running_[pos]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(pos));
  RequestRecord& rec = result_.requests[g.req];
  ++rec.preemptions;
  ++result_.summary.preemptions;
  if (rec.preemptions > kMaxPreemptions) {
    // Requests that keep displacing each other (forked samples that no longer fit once swapped
    // unshared, say) would otherwise cycle for ever: the one preempted too often gives up.
    finish(g, RequestRecord::Status::rejected,
           "preempted " + std::to_string(rec.preemptions) +
               " times: the KV capacity cannot hold it with the requests before it");
    return;
  }
  bool swapped = false;
  if (c_.preemption == PreemptionMode::swap && b_.supports_swap() && !g.prefilling()) {
    swapped = attempt([&] {
                for (Seq& q : g.seqs)
                  if (!q.done) b_.swap_out(q.id);
              }) == Outcome::ok;
    // No swap space, or a failed copy: fall back to recompute (release frees swapped copies too).
    if (!swapped) ++result_.summary.out_of_memory;
  }
  if (swapped) {
    ++result_.summary.swaps;
    g.in_step = false;
    swapped_.push_back(std::move(g));
    std::sort(swapped_.begin(), swapped_.end(), [](const Group& a, const Group& b) { return a.req < b.req; });
    return;
  }
  for (Seq& q : g.seqs)
    if (b_.contains(q.id)) release_seq(q.id);
  if (c_.samples_per_request == 1 && g.seqs.size() == 1 && !g.prefilling()) {
    // Recompute: the generated tokens become part of the prompt.
    g.carried += g.seqs[0].produced;
    g.prompt += g.seqs[0].produced;
    g.output -= g.seqs[0].produced;
    // The generated tokens' ids were given since arrival (the answer's, or fresh ones).
    KVLAB_ASSERT(g.ids.empty() || static_cast<std::int64_t>(g.ids.size()) >= g.prompt);
  }  // parallel samples (or a partial prefill) restart from their prompt
  g.seqs.clear();
  g.prefilled = 0;
  g.in_step = false;
  const auto at = std::find_if(waiting_.begin(), waiting_.end(), [&](const Group& o) { return o.req > g.req; });
  waiting_.insert(at, std::move(g));
}

/// Claims this step's KV for a running group: the next prefill chunk, or the forks of parallel
/// sampling and one decode slot per unfinished sequence. All or nothing for the group.
bool Replay::claim_slots(Group& g) {
  g.in_step = false;
  g.chunk = 0;
  if (g.prefilling()) {
    const std::int64_t chunk = c_.chunked_prefill ? std::min(g.prompt - g.prefilled, budget_) : g.prompt - g.prefilled;
    if (chunk <= 0) return true;  // no budget left: wait for the next step
    if (!b_.can_grow(g.seqs[0].id, chunk)) return false;
    b_.grow(g.seqs[0].id, chunk);
    g.chunk = chunk;
    budget_ -= chunk;
    g.in_step = true;
    ++seqs_in_step_;
    return true;
  }
  // Forks for parallel sampling (each child already sampled its first token from the prefill).
  while (static_cast<int>(g.seqs.size()) < c_.samples_per_request) {
    const SeqId child = next_seq_++;
    try {
      fork_seq(g.seqs[0].id, child);
    } catch (const OutOfMemory&) {
      ++result_.summary.out_of_memory;
      return false;
    }
    g.seqs.push_back({child, g.seqs[0].produced > 0 ? 1 : 0, false});
  }
  // One slot per unfinished sequence. Sequences claim one by one: when one cannot grow, those
  // already grown keep their slot (has_slot) and are not grown again when the claim is retried.
  bool any = false;
  for (Seq& q : g.seqs) {
    if (q.done) continue;
    if (!q.has_slot) {
      if (!b_.can_grow(q.id, 1)) return false;
      b_.grow(q.id, 1);
      q.has_slot = true;
    }
    if (q.slot_step != step_) {  // count each slot once per step, retries included
      q.slot_step = step_;
      --budget_;
      ++seqs_in_step_;
    }
    any = true;
  }
  g.in_step = any;
  return true;
}

void Replay::swap_in_groups() {
  while (!swapped_.empty()) {
    Group& g = swapped_.front();
    int live = 0;
    for (const Seq& q : g.seqs) live += !q.done;
    if (seqs_in_step_ + live > c_.max_running) return;
    std::vector<SeqId> in;
    bool ok = true;
    std::string error;
    const Outcome swap = attempt(
        [&] {
          for (Seq& q : g.seqs) {
            if (q.done) continue;
            if (!b_.can_swap_in(q.id)) {
              ok = false;
              break;
            }
            b_.swap_in(q.id);
            in.push_back(q.id);
          }
          if (!ok)
            for (SeqId id : in) b_.swap_out(id);  // roll back a partial swap-in
        },
        &error);
    if (swap != Outcome::ok) {
      Group dead = std::move(g);
      swapped_.pop_front();
      finish(dead, RequestRecord::Status::failed, "swap-in failed: " + error);
      continue;
    }
    if (!ok) return;
    running_.push_back(std::move(g));
    swapped_.pop_front();
    bool failed = false;
    const bool claimed = try_claim(running_.back(), failed, error);
    if (failed) {
      Group dead = std::move(running_.back());
      running_.pop_back();
      finish(dead, RequestRecord::Status::failed, "growth failed: " + error);
      continue;
    }
    if (!claimed) {  // swapped in but no room to decode: back out
      preempt(running_.size() - 1);
      return;
    }
  }
}

/// Longest prefix match: the head of the queue reordered by cached prompt tokens, overdue first.
void Replay::order_waiting() {
  const std::size_t n = std::min(waiting_.size(), c_.schedule.window);
  if (n < 2) return;
  std::vector<std::int64_t> cached(n);
  std::vector<double> waited(n);
  for (std::size_t i = 0; i < n; ++i) {
    const Group& g = waiting_[i];
    cached[i] = g.ids.empty() ? 0 : b_.cached_prefix_tokens(spec_of(g));
    waited[i] = now_ - w_[g.req].arrival_s;
  }
  const std::vector<std::size_t> order = lpm_order(cached, waited, c_.schedule.max_wait_s);
  std::vector<Group> head;
  head.reserve(n);
  for (std::size_t i : order) head.push_back(std::move(waiting_[i]));
  std::move(head.begin(), head.end(), waiting_.begin());
}

void Replay::admit_waiting() {
  if (c_.schedule.policy == SchedulePolicy::lpm && swapped_.empty()) order_waiting();
  while (!waiting_.empty() && swapped_.empty()) {
    Group& g = waiting_.front();
    if (seqs_in_step_ + paused_ + c_.samples_per_request > c_.max_running) return;
    // With chunked prefill the first chunk is the cached prefix plus what the budget allows, so a
    // prompt whose cached part is longer than a chunk still gets its whole hit.
    const SequenceSpec lookup = spec_of(g);
    const std::int64_t hit = c_.chunked_prefill ? b_.cached_prefix_tokens(lookup) : 0;
    const std::int64_t chunk = c_.chunked_prefill ? std::min(g.prompt, hit + budget_) : g.prompt;
    if (chunk - hit <= 0) return;
    if (!c_.chunked_prefill && g.prompt > budget_ && seqs_in_step_ > 0) return;  // too big for this step
    const SequenceSpec spec = spec_of(g);
    if (!b_.can_admit(spec, chunk)) {
      if (running_.empty() && swapped_.empty()) {  // nothing will ever free memory for it
        ++result_.summary.out_of_memory;
        Group dead = std::move(g);
        waiting_.pop_front();
        finish(dead, RequestRecord::Status::rejected, "does not fit the KV capacity");
        continue;
      }
      blocked_ = spec;
      return;
    }
    const SeqId id = next_seq_++;
    std::string error;
    const std::int64_t looked_up_before = b_.prefix_cache_stats().queries;
    const Outcome admitted = attempt([&] { b_.admit(id, spec, chunk); }, &error);
    if (admitted == Outcome::out_of_memory) {  // e.g. an allocation that failed although can_admit said yes
      ++result_.summary.out_of_memory;
      if (running_.empty() && swapped_.empty()) {  // nothing will free memory: do not spin on it
        Group dead = std::move(g);
        waiting_.pop_front();
        finish(dead, RequestRecord::Status::rejected, "admission out of memory: " + error);
        continue;
      }
      blocked_ = spec;
      return;
    }
    if (admitted == Outcome::failed) {
      Group dead = std::move(g);
      waiting_.pop_front();
      finish(dead, RequestRecord::Status::failed, "admission failed: " + error);
      continue;
    }
    g.seqs = {{id, 0, false}};
    // Prompt tokens found in the prefix cache need no prefill compute (at least one always does).
    const std::int64_t cached = std::min(b_.cached_tokens(id), chunk - 1);
    g.prefilled = cached;
    g.chunk = chunk - cached;
    if (integrity_ && cached > 0)
      integrity_->expect(id, 0, std::span(prompt_tags(g)).first(static_cast<std::size_t>(cached)));
    result_.summary.prefix_hit_tokens += cached;
    if (g.readmitted) {  // counted apart (vLLM v1's preempted_*): what this admit looked up, if it did
      result_.summary.prefix_preempted_hit_tokens += cached;
      result_.summary.prefix_preempted_lookup_tokens += b_.prefix_cache_stats().queries - looked_up_before;
    }
    g.readmitted = true;
    g.in_step = true;
    budget_ -= g.chunk;
    ++seqs_in_step_;
    RequestRecord& rec = result_.requests[g.req];
    if (rec.first_scheduled_s < 0) rec.first_scheduled_s = now_;
    running_.push_back(std::move(g));
    waiting_.pop_front();
  }
}

double Replay::execute_kernels(double& prepare_s) {
  std::vector<SeqId> ids;
  q_indptr_.assign(1, 0);
  for (const Group& g : running_) {
    if (!g.in_step) continue;
    if (g.chunk > 0) {
      ids.push_back(g.seqs[0].id);
      q_indptr_.push_back(q_indptr_.back() + static_cast<std::int32_t>(g.chunk));
    } else {
      for (const Seq& q : g.seqs)
        if (q.has_slot) {
          ids.push_back(q.id);
          q_indptr_.push_back(q_indptr_.back() + 1);
        }
    }
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

double Replay::execute_step(double& prepare_s) {
  double kernel_s = 0;
  std::string error;
  if (attempt([&] { kernel_s = execute_kernels(prepare_s); }, &error) == Outcome::ok) return kernel_s;
  // The kernels only read KV: nothing of it is lost, but the step's tokens were not computed. Its
  // requests fail with the reason, as a serving engine aborts the requests of a failed step.
  for (std::size_t i = 0; i < running_.size();) {
    if (!running_[i].in_step) {
      ++i;
      continue;
    }
    Group dead = std::move(running_[i]);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    finish(dead, RequestRecord::Status::failed, "attention step failed: " + error);
  }
  return 0;
}

/// Integrity tags of a group's tokens: chained over token ids when known (so cached blocks carry
/// the same tags as the KV another request, or this one before a preemption, wrote), else by
/// request and position. Covers the prompt, and the answer when its ids are known.
const std::vector<std::uint64_t>& Replay::prompt_tags(Group& g) const {
  const bool known = static_cast<std::int64_t>(g.ids.size()) >= g.prompt;
  const std::int64_t n = known ? static_cast<std::int64_t>(g.ids.size()) : g.prompt;
  if (static_cast<std::int64_t>(g.tags.size()) == n) return g.tags;
  g.tags.resize(static_cast<std::size_t>(n));
  std::uint64_t prev = 0;
  for (std::int64_t t = 0; t < n; ++t) {
    g.tags[t] = known ? (prev = KvIntegrity::chain(prev, g.ids[static_cast<std::size_t>(t)]))
                      : KvIntegrity::positional((1ull << 40) + g.req, t);
  }
  return g.tags;
}

/// Writes the pattern of every token computed this step, then reads back every resident sequence.
void Replay::check_integrity() {
  std::vector<SeqId> resident;
  for (Group& g : running_) {
    if (g.in_step && g.chunk > 0) {
      const auto& tags = prompt_tags(g);
      integrity_->write(
          g.seqs[0].id, g.prefilled,
          std::span(tags).subspan(static_cast<std::size_t>(g.prefilled), static_cast<std::size_t>(g.chunk)));
    } else if (g.in_step) {
      for (const Seq& q : g.seqs) {
        if (!q.has_slot) continue;
        const std::int64_t pos = b_.length(q.id) - 1;  // the slot claimed for this step's token
        // A group's only sequence generates the answer whose ids are known: its chained tag.
        const auto& tags = prompt_tags(g);
        const std::uint64_t tag = g.seqs.size() == 1 && c_.samples_per_request == 1 &&
                                          pos < static_cast<std::int64_t>(tags.size()) &&
                                          static_cast<std::int64_t>(g.ids.size()) >= g.prompt
                                      ? tags[static_cast<std::size_t>(pos)]
                                      : KvIntegrity::positional(static_cast<std::uint64_t>(q.id), pos);
        integrity_->write(q.id, pos, {&tag, 1});
      }
    }
    for (const Seq& q : g.seqs)
      if (!q.done && b_.contains(q.id) && !b_.is_swapped(q.id)) resident.push_back(q.id);
  }
  integrity_->verify(resident);
}

/// Beam search stand-in: a beam may continue from another beam's sequence instead of its own. The
/// fork comes first, so a fork that finds no memory changes nothing (it is counted and skipped).
void Replay::reselect_beams(Group& g) {
  if (g.seqs.size() < 2 || g.seqs[0].done) return;  // beams finish together
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::uniform_int_distribution<std::size_t> other(0, g.seqs.size() - 2);
  for (std::size_t i = 0; i < g.seqs.size(); ++i) {
    if (coin(beam_rng_) >= c_.beam_reselect_probability) continue;
    std::size_t j = other(beam_rng_);
    if (j >= i) ++j;
    const SeqId fresh = next_seq_++;
    if (attempt([&] { fork_seq(g.seqs[j].id, fresh); }) != Outcome::ok) {
      ++result_.summary.out_of_memory;  // no memory or a failed copy: this beam keeps its own sequence
      continue;
    }
    release_seq(g.seqs[i].id);
    g.seqs[i].id = fresh;
  }
}

bool Replay::try_claim(Group& g, bool& failed, std::string& error) {
  bool claimed = false;
  switch (attempt([&] { claimed = claim_slots(g); }, &error)) {
    case Outcome::ok:
      return claimed;
    case Outcome::out_of_memory:
      return false;  // handled like any growth that does not fit
    case Outcome::failed:
      failed = true;
      return false;
  }
  return false;
}

/// Phase 1: running groups claim their slots in arrival order, preempting the latest arrival when
/// one does not fit.
void Replay::claim_running() {
  ReplaySummary& sum = result_.summary;
  std::sort(running_.begin(), running_.end(), [](const Group& a, const Group& b) { return a.req < b.req; });
  for (std::size_t i = 0; i < running_.size();) {
    bool failed = false;
    std::string error;
    if (try_claim(running_[i], failed, error)) {
      ++i;
      continue;
    }
    if (failed) {
      Group dead = std::move(running_[i]);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      finish(dead, RequestRecord::Status::failed, "growth failed: " + error);
      continue;
    }
    ++sum.out_of_memory;
    if (running_.size() == 1 && swapped_.empty()) {
      Group g = std::move(running_[0]);
      running_.clear();
      finish(g, RequestRecord::Status::rejected, "outgrew the KV capacity while running alone");
      break;
    }
    // Groups are processed in arrival order, so the latest arrival has not claimed anything yet
    // this step (or is the one failing): preempting it gives back only memory it held before.
    const std::size_t victim = latest_running();
    KVLAB_ASSERT(victim >= i);
    preempt(victim);
  }
}

/// Phase 2, after swap-ins and admissions: counts what really runs (a group preempted after a
/// partial claim took its slots with it). False when nothing can run; then a swapped group that
/// cannot come back (forks return unshared, so a group can need more memory than it held) falls
/// back to recomputing from its prompt.
bool Replay::settle() {
  seqs_in_step_ = 0;
  for (const Group& g : running_) {
    if (!g.in_step) continue;
    if (g.chunk > 0) {
      ++seqs_in_step_;
    } else {
      for (const Seq& q : g.seqs) seqs_in_step_ += q.has_slot;
    }
  }
  if (seqs_in_step_ > 0) return true;
  if (running_.empty() && !swapped_.empty()) {
    Group g = std::move(swapped_.front());
    swapped_.pop_front();
    if (++result_.requests[g.req].preemptions > kMaxPreemptions) {
      finish(g, RequestRecord::Status::rejected, "cannot be swapped back in, and preempted too often to recompute");
      return false;
    }
    for (Seq& q : g.seqs)
      if (b_.contains(q.id)) release_seq(q.id);
    g.seqs.clear();
    g.prefilled = 0;
    g.in_step = false;
    ++result_.summary.out_of_memory;
    const auto at = std::find_if(waiting_.begin(), waiting_.end(), [&](const Group& o) { return o.req > g.req; });
    waiting_.insert(at, std::move(g));
  }
  return false;
}

StepWork Replay::step_work() const {
  StepWork work;
  work.view = b_.view_shape();
  const ViewShape& shape = work.view;
  const auto blocks = [&](std::int64_t len) {
    return shape.layout == KvLayout::paged && shape.block_tokens > 0
               ? (len + shape.block_tokens - 1) / shape.block_tokens
               : 0;
  };
  for (const Group& g : running_) {
    if (!g.in_step) continue;
    if (g.chunk > 0) {
      const std::int64_t len = g.prefilled + g.chunk;
      work.prefill_tokens += g.chunk;
      work.kv_tokens_read += len;
      work.attention_pairs += g.chunk * g.prefilled + g.chunk * (g.chunk + 1) / 2;
      ++work.sequences;
      work.block_table_entries += blocks(len);
    } else {
      for (const Seq& q : g.seqs) {
        if (!q.has_slot) continue;
        const std::int64_t len = b_.length(q.id);
        ++work.decode_tokens;
        work.kv_tokens_read += len;
        work.attention_pairs += len;
        ++work.sequences;
        work.block_table_entries += blocks(len);
      }
    }
  }
  return work;
}

/// Sequences that will decode next step: a prefill finishing now, or a decode with more to go.
std::vector<SeqId> Replay::next_step_decoders() const {
  std::vector<SeqId> next;
  for (const Group& g : running_) {
    if (!g.in_step) continue;
    if (g.chunk > 0) {
      if (g.prefilled + g.chunk == g.prompt) next.push_back(g.seqs[0].id);
    } else {
      for (const Seq& q : g.seqs)
        if (q.has_slot && q.produced + 1 < g.output) next.push_back(q.id);
    }
  }
  return next;
}

/// Phase 3: the step's work, its duration and its memory.
void Replay::account() {
  ReplaySummary& sum = result_.summary;
  StepRecord rec;
  next_decoders_ = next_step_decoders();
  // Measured clock: the next step's background work (vmm: map its pages) starts once this step's
  // kernels are queued (execute_kernels). Modelled clock: after retire() (run_step), so the
  // background thread never races this step's releases and the replay does not depend on thread
  // timing.
  prefetched_ = false;
  const StepCosts costs = b_.step_costs();
  StepWork work = step_work();
  work.ops = costs;
  rec.parts = step_time(b_.model(), c_.device, work);
  double dt = 0;
  if (c_.execute) {
    // Measured: the kernels' and the mapping's wall time. Copies to the host and copy-on-write
    // stay modelled (execute mode copies host memory, which is not what a GPU would wait for).
    rec.kernel_s = execute_step(rec.prepare_s);
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
  const MemoryBreakdown mem = b_.breakdown(blocked_ ? &*blocked_ : nullptr);
  now_ += dt;
  rec.time_s = now_;
  rec.duration_s = dt;
  rec.running = seqs_in_step_ + paused_;
  rec.waiting = static_cast<int>(waiting_.size() + swapped_.size());
  rec.prefill_tokens = work.prefill_tokens;
  rec.decode_tokens = work.decode_tokens;
  rec.fractions = MemoryFractions::of(mem);
  rec.allocated_bytes = mem.allocated();
  rec.shared_savings_bytes = mem.shared_savings;
  if (c_.keep_steps) result_.steps.push_back(rec);
  sum.mean_fractions.add_scaled(rec.fractions, dt);
  shared_savings_time_ += static_cast<double>(mem.shared_savings) * dt;
  sum.busy_s += dt;
  sum.mean_batch += dt * rec.running;
  sum.max_batch = std::max(sum.max_batch, rec.running);
  sum.peak_allocated_bytes = std::max(sum.peak_allocated_bytes, mem.allocated());
  sum.prefill_tokens_computed += work.prefill_tokens;
  ++sum.steps;
}

/// Phase 4: every sequence that worked produces a token; finished requests leave.
void Replay::retire() {
  ReplaySummary& sum = result_.summary;
  for (std::size_t i = 0; i < running_.size();) {
    Group& g = running_[i];
    RequestRecord& r = result_.requests[g.req];
    if (g.in_step && g.chunk > 0) {
      g.prefilled += g.chunk;
      if (!g.prefilling()) {
        g.seqs[0].produced = 1;
        token_out(g);  // a recompute's re-prefill ends with the next token: its gap includes the stall
        if (r.first_token_s < 0) {
          r.first_token_s = now_;
          sum.prompt_tokens += r.prompt_tokens;  // once, however often a recompute re-prefills it
        }
        if (g.output == 1) {  // every sample is done with its first token
          g.carried += c_.samples_per_request - 1;
          g.seqs[0].done = true;
        }
      }
    } else if (g.in_step) {
      bool produced = false;
      for (Seq& q : g.seqs) {
        if (!q.has_slot) continue;
        produced = true;
        q.has_slot = false;
        if (++q.produced >= g.output) {
          q.done = true;
          release_seq(q.id);
        }
      }
      if (produced) token_out(g);
      if (c_.beam_reselect_probability > 0) reselect_beams(g);
    }
    g.chunk = 0;
    const bool all_forked = g.output == 1 || static_cast<int>(g.seqs.size()) == c_.samples_per_request;
    const bool all_done =
        !g.prefilling() && all_forked && std::all_of(g.seqs.begin(), g.seqs.end(), [](const Seq& q) { return q.done; });
    if (!all_done) {
      ++i;
      continue;
    }
    Group done = std::move(g);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    finish(done, r.status == RequestRecord::Status::truncated_completed ? RequestRecord::Status::truncated_completed
                                                                        : RequestRecord::Status::completed);
  }
}

/// Separate prefill steps (vLLM v0): with nothing swapped out, a step that can admit waiting
/// prompts admits only those and the running decoders sit it out. False: not a prompt step (the
/// caller runs a decode step).
bool Replay::prompt_step() {
  if (c_.prefill_steps != PrefillSteps::separate || !swapped_.empty() || waiting_.empty()) return false;
  for (Group& g : running_) {
    g.in_step = false;
    for (const Seq& q : g.seqs) paused_ += !q.done;
  }
  admit_waiting();
  if (seqs_in_step_ > 0) return true;
  paused_ = 0;
  return false;
}

void Replay::run_step() {
  // Background work begun last step for this one (vmm: prefetched pages) finishes first; an error
  // it met is counted like an allocation that failed, and the step's own calls map what it could not.
  if (attempt([&] { b_.begin_step(); }) != Outcome::ok) ++result_.summary.out_of_memory;
  ++step_;
  budget_ = c_.max_batched_tokens;
  seqs_in_step_ = 0;
  paused_ = 0;
  blocked_.reset();
  if (!prompt_step()) {
    claim_running();
    swap_in_groups();
    if (c_.prefill_steps == PrefillSteps::mixed) admit_waiting();
  }
  if (!settle()) return;
  account();
  if (integrity_) check_integrity();
  retire();
  if (!c_.execute) {
    std::erase_if(next_decoders_, [&](SeqId id) { return !b_.contains(id); });  // finished or replaced beams
    b_.prefetch(next_decoders_);
  }
}

ReplayResult Replay::run() {
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
  beam_rng_.seed(c_.seed);
  if (c_.verify_kv) integrity_ = std::make_unique<KvIntegrity>(b_);
  const auto wall0 = Clock::now();
  ReplaySummary& sum = result_.summary;
  sum.backend = b_.name();
  sum.clock = c_.execute ? "measured" : "modelled";
  sum.requests = static_cast<std::int64_t>(w_.size());
  sum.capacity_bytes = b_.breakdown().capacity;
  result_.requests.resize(w_.size());

  std::int64_t idle_steps = 0;
  while (done_ < sum.requests) {
    arrivals();
    if (running_.empty() && waiting_.empty() && swapped_.empty()) continue;
    if (c_.at_step_boundary) c_.at_step_boundary();
    const std::int64_t before = done_;
    run_step();
    // A step that ran nothing and finished nothing, with no arrival left to wait for, cannot
    // change anything the next time either: fail loudly instead of spinning.
    idle_steps = seqs_in_step_ == 0 && done_ == before && next_arrival_ == w_.size() ? idle_steps + 1 : 0;
    if (idle_steps > 1000)
      KVLAB_THROW(Error, "replay stalled: " + std::to_string(waiting_.size()) + " waiting, " +
                             std::to_string(swapped_.size()) + " swapped, nothing can run (a kvlab bug)");
  }

  summarize();
  sum.wall_s = std::chrono::duration<double>(Clock::now() - wall0).count();
  KVLAB_ASSERT(b_.num_sequences() == 0);
  return std::move(result_);
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
  sum.itl = latency_stats(std::vector<double>(itl_.begin(), itl_.end()), c_.percentiles);
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
  // summary's per-request vectors: 512 bytes covers them with room. Per generated token: the
  // float gap, and the double copy latency_stats sorts at the end.
  constexpr std::size_t kPerRequest = 512, kPerToken = sizeof(float) + sizeof(double);
  KeptMemoryEstimate e;
  const std::int64_t chunk = std::max<std::int64_t>(config.max_batched_tokens, 1);
  const std::int64_t samples = std::max(config.samples_per_request, 1);
  for (const Request& r : workload) {
    ++e.requests;
    e.generated_tokens += r.output_tokens * samples;
    if (config.keep_steps) e.steps += r.output_tokens + (r.prompt_tokens + chunk - 1) / chunk;
  }
  e.bytes = static_cast<std::size_t>(e.requests) * kPerRequest +
            static_cast<std::size_t>(e.generated_tokens) * kPerToken +
            static_cast<std::size_t>(e.steps) * sizeof(StepRecord);
  return e;
}

ReplayResult replay(KvBackend& backend, const std::vector<Request>& workload, const ReplayConfig& config,
                    const ProgressCallback& progress) {
  return Replay(backend, workload, config, progress).run();
}

}  // namespace kvlab
