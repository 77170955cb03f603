#pragma once
// Token ids a prefix cache can key on, for a replay (docs/prefix-caching.md, "What the replayer
// gives"): the trace's own prompt ids, or ids derived from Mooncake's chained block hashes, and
// for the tokens a request generates, the ids of its answer where the trace tells them.
#include <cstdint>
#include <vector>

#include "serving/traces/workload.hpp"

namespace kvlab {

// Design note
//
// Rationale. A prefix cache that enters generated blocks (vLLM v1, SGLang) can only reuse an
// answer if the replay knows the answer's token ids. Traces rarely carry them, but a multi-turn
// trace says them implicitly: Mooncake's conversation trace gives each turn the chained hash ids
// of the whole conversation so far, so the next turn's prompt holds this turn's prompt and
// answer. Equal hash ids at block i mean equal first (i + 1) x B tokens.
//
// Approach. A request c *continues* request r when r came first, r has at least two full hash
// blocks (one shared block is a system prompt every request starts with, not a conversation), c's
// hash ids start with all of r's full blocks, c's prompt is at least r's prompt plus r's answer
// long, and no other earlier request qualifies at the same depth (an ambiguous match is no
// match). Each request is continued at most once (by its first continuer). Token t of r, from its
// last full hash block on, then has the id of token t of c (recursively: c's own tail takes its
// continuer's ids), which covers r's partial last prompt block and its answer with the ids the
// next turn's prompt has there.
//
// Limitations. Prompt ids from the trace (LLMServingSim) say nothing about answers: the ShareGPT
// file's next prompts do not contain the recorded outputs, so no continuation is inferred for
// them. A request with no continuer gets fresh ids for its answer from the caller (unique: only
// the request itself, recomputed after preemption, can hit them).
class TraceTokenIds {
 public:
  explicit TraceTokenIds(const std::vector<Request>& workload);

  /// The ids of the first `n` tokens of request `i`, or empty when the trace gives no ids. Positions
  /// past what the trace determines (an answer with no continuer) are left out: the result may be
  /// shorter than `n` but never shorter than min(n, prompt) when it is not empty.
  [[nodiscard]] std::vector<std::int32_t> ids(std::size_t i, std::int64_t n) const;
  /// The request continuing `i` (see the design note), or -1.
  [[nodiscard]] std::int64_t continuation(std::size_t i) const { return next_[i]; }
  /// Requests with a continuation.
  [[nodiscard]] std::int64_t continued() const noexcept { return continued_; }

 private:
  [[nodiscard]] std::int32_t derived_id(const Request& r, std::int64_t t) const;

  const std::vector<Request>* w_;
  std::vector<std::int64_t> next_;  // [request] its continuation or -1
  std::int64_t continued_ = 0;
};

}  // namespace kvlab
