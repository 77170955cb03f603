#include "serving/replay/scheduler.hpp"

#include <algorithm>
#include <utility>

#include "alloc/core/error.hpp"

namespace kvlab {

using detail::attempt;
using detail::Outcome;

namespace {

/// A request preempted more often than this is rejected (with the reason) rather than cycling.
constexpr int kMaxPreemptions = 64;

SequenceSpec spec_of(const detail::Group& g) {
  SequenceSpec s{g.prompt, g.prompt + g.output - 1};
  if (static_cast<std::int64_t>(g.ids.size()) >= g.prompt) s.prompt_token_ids = g.ids;
  return s;
}

}  // namespace

Scheduler::Scheduler(KvBackend& backend, const std::vector<Request>& workload, const ReplayConfig& config,
                     ReplayResult& result, const double& clock, KvIntegrity* integrity,
                     const ProgressCallback& progress)
    : b_(backend),
      w_(workload),
      c_(config),
      result_(result),
      now_(clock),
      integrity_(integrity),
      progress_(progress),
      token_ids_(workload) {
  beam_rng_.seed(c_.seed);
}

std::optional<double> Scheduler::next_arrival_s() const {
  if (next_arrival_ >= w_.size()) return std::nullopt;
  return w_[next_arrival_].arrival_s;
}

void Scheduler::event(PlanEvent::Kind kind, const Group& g, std::int64_t tokens, std::string reason) {
  plan_.events.push_back({kind, static_cast<std::int64_t>(g.req), tokens, std::move(reason)});
}

void Scheduler::release_seq(SeqId id) {
  b_.release(id);
  if (integrity_) integrity_->forget(id);
}

void Scheduler::fork_seq(SeqId parent, SeqId child) {
  b_.fork(parent, child);
  if (integrity_) integrity_->fork(parent, child);
}

void Scheduler::token_out(Group& g) {
  if (g.last_token_s >= 0) itl_.push_back(static_cast<float>(now_ - g.last_token_s));
  g.last_token_s = now_;
}

StepPlan Scheduler::plan_step() {
  ++step_;
  budget_ = c_.max_batched_tokens;
  seqs_in_step_ = 0;
  paused_ = 0;
  blocked_.reset();
  plan_.work.clear();
  const bool prompts_only = prompt_step();
  if (!prompts_only) {
    claim_running();
    swap_in_groups();
    if (c_.prefill_steps == PrefillSteps::mixed) admit_waiting();
  }
  plan_.step = steps_run_ + 1;
  plan_.at_s = now_;
  const bool runs = settle();
  steps_run_ += runs;
  plan_.prompt_step = runs && prompts_only;
  plan_.paused = runs ? paused_ : 0;
  plan_.waiting = static_cast<int>(waiting_.size() + swapped_.size());
  return std::exchange(plan_, StepPlan{});
}

/// The plan's work, in the batch's order: each running group's prefill chunk, or a decode token
/// for each of its sequences that claimed a slot.
void Scheduler::fill_work() {
  for (const Group& g : running_) {
    if (!g.in_step) continue;
    const auto req = static_cast<std::int64_t>(g.req);
    if (g.chunk > 0) {
      plan_.work.push_back({req, g.seqs[0].id, true, g.prefilled, g.chunk, g.prefilled + g.chunk == g.prompt});
      continue;
    }
    for (const Seq& q : g.seqs)
      if (q.has_slot) plan_.work.push_back({req, q.id, false, b_.length(q.id) - 1, 1, q.produced + 1 < g.output});
  }
}

void Scheduler::fail_step(const std::string& error) {
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
}

void Scheduler::finish(Group& g, RequestRecord::Status status, const std::string& reason) {
  RequestRecord& r = result_.requests[g.req];
  ReplaySummary& s = result_.summary;
  for (Seq& q : g.seqs)
    if (b_.contains(q.id)) release_seq(q.id);
  r.status = status;
  if (status == RequestRecord::Status::rejected || status == RequestRecord::Status::failed) {
    event(status == RequestRecord::Status::rejected ? PlanEvent::Kind::rejected : PlanEvent::Kind::failed, g, 0,
          reason);
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

void Scheduler::take_arrivals() {
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

std::size_t Scheduler::latest_running() const {
  std::size_t best = 0;
  for (std::size_t i = 1; i < running_.size(); ++i)
    if (running_[i].req > running_[best].req) best = i;
  return best;
}

/// The custom preemption choice among running_[first..] (those that have not claimed this step).
std::size_t Scheduler::chosen_victim(std::size_t first) const {
  std::vector<RunningRequest> candidates;
  for (std::size_t k = first; k < running_.size(); ++k) {
    const Group& g = running_[k];
    candidates.push_back({static_cast<std::int64_t>(g.req), w_[g.req].arrival_s, g.prompt, g.prefilled, g.output,
                          static_cast<int>(g.seqs.size()), result_.requests[g.req].preemptions});
  }
  const std::size_t pick = c_.schedule.preemption_victim(candidates);
  if (pick >= candidates.size())
    throw InvalidArgument("preemption choice: the policy must return an index below " +
                          std::to_string(candidates.size()) + " (got " + std::to_string(pick) + ")");
  return first + pick;
}

/// Takes running_[pos] off the device: swapped out when the mode and the backend allow,
/// otherwise released and requeued to recompute.
void Scheduler::preempt(std::size_t pos) {
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
    event(PlanEvent::Kind::preempted_swap, g);
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
  event(PlanEvent::Kind::preempted_recompute, g);
  requeue(std::move(g));
}

/// Back to the waiting queue, in arrival order, to prefill again from its prompt.
void Scheduler::requeue(Group g) {
  g.seqs.clear();
  g.prefilled = 0;
  g.in_step = false;
  const auto at = std::find_if(waiting_.begin(), waiting_.end(), [&](const Group& o) { return o.req > g.req; });
  waiting_.insert(at, std::move(g));
}

/// Claims this step's KV for a running group: the next prefill chunk, or the forks of parallel
/// sampling and one decode slot per unfinished sequence. All or nothing for the group.
bool Scheduler::claim_slots(Group& g) {
  g.in_step = false;
  g.chunk = 0;
  if (g.prefilling()) {
    const std::int64_t chunk = c_.chunked_prefill ? std::min(g.prompt - g.prefilled, budget_) : g.prompt - g.prefilled;
    if (chunk <= 0) return true;  // no budget left: wait for the next step
    if (!b_.try_grow(g.seqs[0].id, chunk)) return false;
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
      if (!b_.try_grow(q.id, 1)) return false;
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

void Scheduler::swap_in_groups() {
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
    event(PlanEvent::Kind::swapped_in, g);
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

namespace {

/// A custom admission order's answer, checked: a permutation of 0..n-1.
std::vector<std::size_t> checked_order(std::vector<std::size_t> order, std::size_t n) {
  std::vector<bool> seen(n, false);
  bool ok = order.size() == n;
  for (std::size_t i : order) {
    ok = ok && i < n && !seen[i];
    if (i < n) seen[i] = true;
  }
  if (!ok)
    throw InvalidArgument("admission order: the policy must return each of the " + std::to_string(n) + " indices 0.." +
                          std::to_string(n - 1) + " once (got " + std::to_string(order.size()) + " indices)");
  return order;
}

}  // namespace

/// The waiting requests at the head of the queue, as a custom admission order sees them.
std::vector<QueuedRequest> Scheduler::queued_head(std::size_t n) const {
  std::vector<QueuedRequest> head(n);
  for (std::size_t i = 0; i < n; ++i) {
    const Group& g = waiting_[i];
    head[i] = {static_cast<std::int64_t>(g.req),
               w_[g.req].arrival_s,
               now_ - w_[g.req].arrival_s,
               g.prompt,
               g.output,
               g.ids.empty() ? 0 : b_.cached_prefix_tokens(spec_of(g)),
               result_.requests[g.req].preemptions};
  }
  return head;
}

/// Longest prefix match (the head of the queue reordered by cached prompt tokens, overdue first), or
/// the custom admission order.
void Scheduler::order_waiting() {
  const std::size_t n = std::min(waiting_.size(), c_.schedule.window);
  if (n < 2) return;
  const std::vector<QueuedRequest> queued = queued_head(n);
  std::vector<std::size_t> order;
  if (c_.schedule.admission_order) {
    order = checked_order(c_.schedule.admission_order(queued), n);
  } else {
    std::vector<std::int64_t> cached(n);
    std::vector<double> waited(n);
    for (std::size_t i = 0; i < n; ++i) {
      cached[i] = queued[i].cached_tokens;
      waited[i] = queued[i].waited_s;
    }
    order = lpm_order(cached, waited, c_.schedule.max_wait_s);
  }
  std::vector<Group> head;
  head.reserve(n);
  for (std::size_t i : order) head.push_back(std::move(waiting_[i]));
  std::move(head.begin(), head.end(), waiting_.begin());
}

void Scheduler::admit_waiting() {
  if (c_.admissions_held) return;  // a tenant of higher priority waits for memory
  if ((c_.schedule.policy == SchedulePolicy::lpm || c_.schedule.admission_order) && swapped_.empty()) order_waiting();
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
      // Nothing will ever free memory for it: nothing here runs, and no other replay shares the
      // memory (or it needs more than all of it).
      const bool fits_whole = static_cast<std::size_t>(chunk) * b_.model().kv_bytes_per_token() <= capacity_bytes();
      const bool others_may_free = c_.shared_memory && !c_.memory_stalled && fits_whole;
      if (running_.empty() && swapped_.empty() && !others_may_free) {
        ++result_.summary.out_of_memory;
        Group dead = std::move(g);
        waiting_.pop_front();
        finish(dead, RequestRecord::Status::rejected,
               c_.shared_memory && fits_whole ? "does not fit the KV memory the other tenants leave"
                                              : "does not fit the KV capacity");
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
    event(PlanEvent::Kind::admitted, g, cached);
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

/// Integrity tags of a group's tokens: chained over token ids when known (so cached blocks carry
/// the same tags as the KV another request, or this one before a preemption, wrote), else by
/// request and position. Covers the prompt, and the answer when its ids are known.
const std::vector<std::uint64_t>& Scheduler::prompt_tags(Group& g) const {
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

template <class F>
void Scheduler::for_each_computed(F&& f) {
  for (Group& g : running_) {
    if (g.in_step && g.chunk > 0) {
      f(g, g.seqs[0], g.prefilled, g.chunk);  // a prompt chunk
    } else if (g.in_step) {
      for (const Seq& q : g.seqs)
        if (q.has_slot) f(g, q, b_.length(q.id) - 1, std::int64_t{1});  // the slot claimed for this step's token
    }
  }
}

std::vector<ComputedTokens> Scheduler::computed_tokens() {
  std::vector<ComputedTokens> out;
  for_each_computed([&](Group&, const Seq& q, std::int64_t from, std::int64_t count) {
    out.push_back({q.id, from, count});
  });
  return out;
}

/// Writes the pattern of every token computed this step, then reads back every resident sequence.
void Scheduler::write_and_verify_kv() {
  for_each_computed([&](Group& g, const Seq& q, std::int64_t from, std::int64_t count) {
    const auto& tags = prompt_tags(g);
    if (g.chunk > 0) {
      integrity_->write(q.id, from,
                        std::span(tags).subspan(static_cast<std::size_t>(from), static_cast<std::size_t>(count)));
      return;
    }
    // A group's only sequence generates the answer whose ids are known: its chained tag.
    const std::uint64_t tag = g.seqs.size() == 1 && c_.samples_per_request == 1 &&
                                      from < static_cast<std::int64_t>(tags.size()) &&
                                      static_cast<std::int64_t>(g.ids.size()) >= g.prompt
                                  ? tags[static_cast<std::size_t>(from)]
                                  : KvIntegrity::positional(static_cast<std::uint64_t>(q.id), from);
    integrity_->write(q.id, from, {&tag, 1});
  });
  std::vector<SeqId> resident;
  for (const Group& g : running_)
    for (const Seq& q : g.seqs)
      if (!q.done && b_.contains(q.id) && !b_.is_swapped(q.id)) resident.push_back(q.id);
  integrity_->verify(resident);
}

/// Beam search stand-in: a beam may continue from another beam's sequence instead of its own. The
/// fork comes first, so a fork that finds no memory changes nothing (it is counted and skipped).
void Scheduler::reselect_beams(Group& g) {
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

bool Scheduler::try_claim(Group& g, bool& failed, std::string& error) {
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
void Scheduler::claim_running() {
  ReplaySummary& sum = result_.summary;
  // Usually still in order from the last step (admissions append the latest arrival): sorting
  // Groups moves their vectors, so only a swap-in or a re-admission pays for it.
  const auto by_arrival = [](const Group& a, const Group& b) { return a.req < b.req; };
  if (!std::is_sorted(running_.begin(), running_.end(), by_arrival))
    std::sort(running_.begin(), running_.end(), by_arrival);
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
    if (running_.size() == 1 && swapped_.empty() && (!c_.shared_memory || c_.memory_stalled)) {
      Group g = std::move(running_[0]);
      running_.clear();
      finish(g, RequestRecord::Status::rejected,
             c_.shared_memory ? "outgrew the KV memory the other tenants leave while running alone"
                              : "outgrew the KV capacity while running alone");
      break;
    }
    // Groups are processed in arrival order, so the latest arrival has not claimed anything yet
    // this step (or is the one failing): preempting it gives back only memory it held before.
    const std::size_t victim = c_.schedule.preemption_victim ? chosen_victim(i) : latest_running();
    KVLAB_ASSERT(victim >= i);
    preempt(victim);
  }
}

/// Phase 2, after swap-ins and admissions: the plan's work is what really runs (a group preempted after a
/// partial claim took its slots with it). False when nothing can run; then a swapped group that
/// cannot come back (forks return unshared, so a group can need more memory than it held) falls
/// back to recomputing from its prompt.
bool Scheduler::settle() {
  fill_work();
  seqs_in_step_ = plan_.sequences();
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
    ++result_.summary.out_of_memory;
    event(PlanEvent::Kind::preempted_recompute, g);
    requeue(std::move(g));
  }
  return false;
}

/// Every sequence that worked produces a token; finished requests leave.
void Scheduler::complete_step() {
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
bool Scheduler::prompt_step() {
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

}  // namespace kvlab
