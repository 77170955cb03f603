#include "experiments/replayer.hpp"

#include <algorithm>
#include <deque>

#include "alloc/error.hpp"

namespace kvlab {

namespace {

struct Live {
  std::size_t index;           // into the workload / records
  std::int64_t prompt = 0;     // possibly truncated
  std::int64_t output = 0;
  std::int64_t produced = 0;   // output tokens sampled so far
  bool prefilled = false;
};

SequenceSpec spec_of(const Live& l) { return {l.prompt, l.prompt + l.output - 1}; }

}  // namespace

ReplayResult replay(KvBackend& backend, const std::vector<Request>& workload, const ReplayConfig& config,
                    const ProgressCallback& progress) {
  KVLAB_EXPECTS(backend.num_sequences() == 0, "replay needs an empty backend");
  KVLAB_EXPECTS(config.max_running >= 1, "max_running must be at least 1");
  KVLAB_EXPECTS(config.max_prefill_tokens >= 1, "max_prefill_tokens must be at least 1");
  for (std::size_t i = 1; i < workload.size(); ++i)
    KVLAB_EXPECTS(workload[i].arrival_s >= workload[i - 1].arrival_s, "workload must be sorted by arrival");

  ReplayResult result;
  ReplaySummary& sum = result.summary;
  sum.backend = backend.name();
  sum.requests = static_cast<std::int64_t>(workload.size());
  sum.capacity_bytes = backend.breakdown().capacity;
  result.requests.resize(workload.size());

  std::deque<Live> waiting;  // arrived, FCFS (preempted requests go back to the front)
  std::vector<Live> running;
  std::size_t next_arrival = 0;
  std::int64_t done = 0;
  double now = 0, weighted_batch = 0, busy = 0;
  const std::int64_t max_len = backend.max_seq_len();

  const auto finish_record = [&](std::size_t i) {
    ++done;
    if (progress && (done % 256 == 0 || done == sum.requests)) progress(done, sum.requests);
    (void)i;
  };

  while (done < sum.requests) {
    // Arrivals up to now (jump the clock when idle).
    if (running.empty() && waiting.empty() && next_arrival < workload.size())
      now = std::max(now, workload[next_arrival].arrival_s);
    while (next_arrival < workload.size() && workload[next_arrival].arrival_s <= now) {
      const Request& r = workload[next_arrival];
      RequestRecord& rec = result.requests[next_arrival];
      rec.id = r.id;
      rec.arrival_s = r.arrival_s;
      rec.prompt_tokens = r.prompt_tokens;
      rec.output_tokens = r.output_tokens;
      Live l{next_arrival, r.prompt_tokens, std::max<std::int64_t>(r.output_tokens, 1)};
      const bool too_long = l.prompt + l.output - 1 > max_len;
      if (l.prompt < 1) {
        rec.status = RequestRecord::Status::rejected;
        rec.reason = "empty prompt";
        ++sum.rejected;
        finish_record(next_arrival);
      } else if (too_long && config.long_requests == LongRequestPolicy::reject) {
        rec.status = RequestRecord::Status::rejected;
        rec.reason = "longer than max_seq_len " + std::to_string(max_len);
        ++sum.rejected;
        finish_record(next_arrival);
      } else {
        if (too_long) {  // keep the prompt's head, then as much output as fits
          l.prompt = std::min(l.prompt, max_len);
          l.output = std::max<std::int64_t>(1, max_len - l.prompt + 1);
          rec.status = RequestRecord::Status::truncated_completed;
        }
        waiting.push_back(l);
      }
      ++next_arrival;
    }
    if (running.empty() && waiting.empty()) continue;

    // Admission, FCFS, under the prefill budget.
    std::int64_t prefill_budget = config.max_prefill_tokens;
    std::optional<SequenceSpec> blocked;
    std::vector<std::size_t> admitted;  // positions in `running`
    while (!waiting.empty() && static_cast<int>(running.size()) < config.max_running) {
      Live& l = waiting.front();
      if (!admitted.empty() && l.prompt > prefill_budget) break;
      const SequenceSpec spec = spec_of(l);
      if (!backend.can_admit(spec, l.prompt)) {
        blocked = spec;
        if (running.empty()) {
          // Nothing will ever free memory for it: it cannot fit this backend at all.
          RequestRecord& rec = result.requests[l.index];
          rec.status = RequestRecord::Status::rejected;
          rec.reason = "does not fit the KV capacity";
          ++sum.rejected;
          ++sum.out_of_memory;
          finish_record(l.index);
          waiting.pop_front();
          blocked.reset();
          continue;
        }
        break;
      }
      backend.admit(static_cast<SeqId>(l.index), spec, l.prompt);
      prefill_budget -= l.prompt;
      RequestRecord& rec = result.requests[l.index];
      if (rec.first_scheduled_s < 0) rec.first_scheduled_s = now;
      admitted.push_back(running.size());
      running.push_back(l);
      waiting.pop_front();
    }

    // Decode slots for sequences already prefilled; preempt the latest arrival when memory is short.
    StepWork work;
    for (std::size_t i = 0; i < running.size();) {
      Live& l = running[i];
      if (!l.prefilled) {
        ++i;
        continue;
      }
      const SeqId id = static_cast<SeqId>(l.index);
      if (backend.can_grow(id, 1)) {
        backend.grow(id, 1);
        ++i;
        continue;
      }
      ++sum.out_of_memory;
      if (running.size() == 1) {
        // Alone and still out of memory: this request can never finish on this backend.
        RequestRecord& rec = result.requests[l.index];
        backend.release(id);
        rec.status = RequestRecord::Status::rejected;
        rec.reason = "outgrew the KV capacity while running alone";
        ++sum.rejected;
        finish_record(l.index);
        running.clear();
        break;
      }
      // Victim: the latest-arrived running request (largest index, since arrivals are sorted).
      auto victim = std::max_element(running.begin(), running.end(),
                                     [](const Live& a, const Live& b) { return a.index < b.index; });
      const std::size_t vpos = static_cast<std::size_t>(victim - running.begin());
      backend.release(static_cast<SeqId>(victim->index));
      ++result.requests[victim->index].preemptions;
      result.requests[victim->index].generated_tokens += victim->produced;
      ++sum.preemptions;
      Live requeued = *victim;
      requeued.prefilled = false;
      requeued.prompt = requeued.prompt + requeued.produced;  // recompute: prompt plus what was generated
      requeued.output -= requeued.produced;
      requeued.produced = 0;
      waiting.push_front(requeued);
      running.erase(victim);
      if (vpos < i) --i;  // (vpos == i: retry the same position, now holding the next sequence)
    }

    // Work of the step.
    for (Live& l : running) {
      const std::int64_t len = backend.length(static_cast<SeqId>(l.index));
      if (!l.prefilled) {
        work.prefill_tokens += l.prompt;
        work.kv_tokens_read += len;
        work.attention_pairs += l.prompt * (l.prompt + 1) / 2;
      } else {
        ++work.decode_tokens;
        work.kv_tokens_read += len;
        work.attention_pairs += len;
      }
    }
    const double dt = step_seconds(backend.model(), config.device, work);
    const MemoryBreakdown mem = backend.breakdown(blocked ? &*blocked : nullptr);
    now += dt;
    StepRecord rec;
    rec.time_s = now;
    rec.duration_s = dt;
    rec.running = static_cast<int>(running.size());
    rec.waiting = static_cast<int>(waiting.size());
    rec.fractions = MemoryFractions::of(mem);
    rec.allocated_bytes = mem.allocated();
    result.steps.push_back(rec);
    sum.mean_fractions.add_scaled(rec.fractions, dt);
    busy += dt;
    weighted_batch += dt * rec.running;
    sum.max_batch = std::max(sum.max_batch, rec.running);
    sum.peak_allocated_bytes = std::max(sum.peak_allocated_bytes, mem.allocated());
    ++sum.steps;

    // Sample one token per running sequence; retire the finished.
    for (std::size_t i = 0; i < running.size();) {
      Live& l = running[i];
      RequestRecord& r = result.requests[l.index];
      if (!l.prefilled) {
        l.prefilled = true;
        sum.prompt_tokens += l.prompt;
        if (r.first_token_s < 0) r.first_token_s = now;
      }
      ++l.produced;
      ++sum.generated_tokens;
      if (l.produced >= l.output) {
        backend.release(static_cast<SeqId>(l.index));
        r.finish_s = now;
        r.generated_tokens = l.produced + (r.generated_tokens);
        ++(r.status == RequestRecord::Status::truncated_completed ? sum.truncated : sum.completed);
        finish_record(l.index);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }

  sum.makespan_s = now;
  if (busy > 0) {  // averages over the time steps ran; idle gaps between arrivals are left out
    MemoryFractions m;
    sum.mean_fractions = m.add_scaled(sum.mean_fractions, 1.0 / busy);
    sum.mean_batch = weighted_batch / busy;
  }
  std::int64_t n = 0, n_tpot = 0;
  for (const RequestRecord& r : result.requests) {
    if (r.finish_s < 0) continue;
    ++n;
    sum.mean_ttft_s += r.first_token_s - r.arrival_s;
    sum.mean_e2e_s += r.finish_s - r.arrival_s;
    if (r.generated_tokens > 1) {
      sum.mean_tpot_s += (r.finish_s - r.first_token_s) / static_cast<double>(r.generated_tokens - 1);
      ++n_tpot;
    }
  }
  if (n > 0) {
    sum.mean_ttft_s /= static_cast<double>(n);
    sum.mean_e2e_s /= static_cast<double>(n);
  }
  if (n_tpot > 0) sum.mean_tpot_s /= static_cast<double>(n_tpot);
  KVLAB_ASSERT(backend.num_sequences() == 0);
  return result;
}

}  // namespace kvlab
