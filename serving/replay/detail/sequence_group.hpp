#pragma once
// The scheduler's books on one request in flight, and its one catch ladder for backend calls.
// Internal to serving/replay/ (the scheduler and the executor).
#include <cstdint>
#include <string>
#include <vector>

#include "alloc/backend/kv_backend.hpp"
#include "alloc/core/error.hpp"

namespace kvlab::detail {

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
  mutable std::vector<std::uint64_t> tags;  // integrity tags of the prompt tokens (verify_kv)
  [[nodiscard]] bool prefilling() const noexcept { return prefilled < prompt; }
};

}  // namespace kvlab::detail
