#include "serving/replay/step_plan.hpp"

#include <fmt/format.h>

namespace kvlab {

const char* to_string(PlanEvent::Kind kind) noexcept {
  switch (kind) {
    case PlanEvent::Kind::admitted:
      return "admitted";
    case PlanEvent::Kind::swapped_in:
      return "swapped in";
    case PlanEvent::Kind::preempted_swap:
      return "preempted (swap)";
    case PlanEvent::Kind::preempted_recompute:
      return "preempted (recompute)";
    case PlanEvent::Kind::rejected:
      return "rejected";
    case PlanEvent::Kind::failed:
      return "failed";
  }
  return "?";
}

std::int64_t StepPlan::prefill_tokens() const noexcept {
  std::int64_t n = 0;
  for (const PlannedWork& w : work) n += w.prefill ? w.tokens : 0;
  return n;
}

std::int64_t StepPlan::decode_tokens() const noexcept {
  std::int64_t n = 0;
  for (const PlannedWork& w : work) n += w.prefill ? 0 : w.tokens;
  return n;
}

std::string format_plan(const StepPlan& plan) {
  std::string s =
      plan.runs()
          ? fmt::format("step {} at {:.6f} s: {}{} sequences (prefill {} tokens, decode {}), {} paused, {} waiting\n",
                        plan.step, plan.at_s, plan.prompt_step ? "prompt step, " : "", plan.sequences(),
                        plan.prefill_tokens(), plan.decode_tokens(), plan.paused, plan.waiting)
          : fmt::format("before step {} at {:.6f} s: nothing runs, {} waiting\n", plan.step, plan.at_s, plan.waiting);
  for (const PlanEvent& e : plan.events) {
    s += fmt::format("  {} request {}", to_string(e.kind), e.request);
    if (e.kind == PlanEvent::Kind::admitted) s += fmt::format(" ({} cached)", e.tokens);
    if (!e.reason.empty()) s += ": " + e.reason;
    s += '\n';
  }
  for (const PlannedWork& w : plan.work) {
    if (w.prefill) {
      s += fmt::format("  prefill request {} seq {} tokens {}..{}\n", w.request, w.seq, w.kv_from, w.kv_after());
    } else {
      s += fmt::format("  decode request {} seq {} token {}\n", w.request, w.seq, w.kv_from);
    }
  }
  return s;
}

}  // namespace kvlab
