// The scheduler alone: its plans for small workloads worked out by hand, with no clock and no
// kernels (the test moves the time itself), and the plan's text.
#include <gtest/gtest.h>

#include <span>

#include "alloc/core/error.hpp"
#include "serving/replay/backend_factory.hpp"
#include "serving/replay/scheduler.hpp"
#include "serving/replay/step_plan.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

using Kind = PlanEvent::Kind;

std::unique_ptr<KvBackend> backend(const std::string& name, std::int64_t tokens) {
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = static_cast<std::size_t>(tokens) * o.model.kv_bytes_per_token();
  o.max_seq_len = 64;
  o.memory = &host_memory_resource();
  return make_backend(name, o);
}

/// A scheduler over its own records, with a clock the test sets.
struct Bench {
  std::unique_ptr<KvBackend> b;
  std::vector<Request> workload;
  ReplayConfig config;
  ReplayResult result;
  double now = 0;
  ProgressCallback progress;
  std::optional<Scheduler> s;

  Bench(const std::string& name, std::int64_t tokens, std::vector<Request> w, ReplayConfig c = {})
      : b(backend(name, tokens)), workload(std::move(w)), config(std::move(c)) {
    result.requests.resize(workload.size());
    s.emplace(*b, workload, config, result, now, nullptr, progress);
  }
  /// Arrivals due now, then the next plan.
  StepPlan next() {
    s->take_arrivals();
    return s->plan_step();
  }
};

PlannedWork prefill(std::int64_t req, SeqId seq, std::int64_t from, std::int64_t tokens, bool next = true) {
  return {req, seq, true, from, tokens, next};
}
PlannedWork decode(std::int64_t req, SeqId seq, std::int64_t at, bool next = true) {
  return {req, seq, false, at, 1, next};
}

TEST(Scheduler, PlansOneRequestByHand) {
  // P = 4, O = 3: a prefill of 4 tokens (which samples the first output token), then two decodes
  // at positions 4 and 5; the last one produces the third token and decodes no more.
  Bench t("contiguous-oracle", 100, {{0, 0.0, 4, 3}});
  StepPlan p = t.next();
  EXPECT_EQ(p.step, 1);
  EXPECT_EQ(p.events, (std::vector<PlanEvent>{{Kind::admitted, 0, 0, ""}}));
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{prefill(0, 0, 0, 4)}));
  EXPECT_EQ(p.prefill_tokens(), 4);
  EXPECT_EQ(p.waiting, 0);
  t.s->complete_step();
  p = t.next();
  EXPECT_TRUE(p.events.empty());
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{decode(0, 0, 4)}));
  t.s->complete_step();
  p = t.next();
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{decode(0, 0, 5, false)}));
  EXPECT_EQ(p.decode_tokens(), 1);
  t.s->complete_step();
  EXPECT_EQ(t.s->ended(), 1);
  EXPECT_TRUE(t.s->idle());
  EXPECT_EQ(t.result.requests[0].status, RequestRecord::Status::completed);
  EXPECT_EQ(t.b->num_sequences(), 0u);
}

TEST(Scheduler, PreemptsTheLatestArrivalWhenAGrowthDoesNotFit) {
  // 10 tokens of KV in blocks of one token. A and B (P = 4, O = 4) are admitted together (8
  // tokens) and both decode at 4 (10). At step 3 A needs an 11th token: B, the later arrival, is
  // preempted (recompute) and cannot come back while A holds 6 and B's prompt is now 6 (4 + the 2
  // tokens it produced).
  Bench t("paged-1", 10, {{0, 0.0, 4, 4}, {1, 0.0, 4, 4}});
  StepPlan p = t.next();
  EXPECT_EQ(p.events, (std::vector<PlanEvent>{{Kind::admitted, 0, 0, ""}, {Kind::admitted, 1, 0, ""}}));
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{prefill(0, 0, 0, 4), prefill(1, 1, 0, 4)}));
  t.s->complete_step();
  p = t.next();
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{decode(0, 0, 4), decode(1, 1, 4)}));
  t.s->complete_step();
  p = t.next();
  EXPECT_EQ(p.events, (std::vector<PlanEvent>{{Kind::preempted_recompute, 1, 0, ""}}));
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{decode(0, 0, 5)}));
  EXPECT_EQ(p.waiting, 1);
  ASSERT_TRUE(t.s->blocked().has_value());  // B's admission was refused, and the breakdown is told
  EXPECT_EQ(t.s->blocked()->prompt_tokens, 6);
  t.s->complete_step();
  p = t.next();
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{decode(0, 0, 6, false)}));
  t.s->complete_step();  // A is done and leaves: B comes back and prefills its 6 tokens again
  p = t.next();
  EXPECT_EQ(p.events, (std::vector<PlanEvent>{{Kind::admitted, 1, 0, ""}}));
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{prefill(1, 2, 0, 6)}));
  EXPECT_EQ(t.result.requests[1].preemptions, 1);
}

// A custom preemption choice (the Python package's policies) picks among the requests that have
// not claimed this step, in arrival order: here A, which did not fit, and B; choosing A (index 0)
// preempts A instead of vLLM's latest arrival.
TEST(Scheduler, ACustomPreemptionChoicePicksTheVictim) {
  std::vector<std::vector<std::int64_t>> seen;
  ReplayConfig c;
  c.schedule.preemption_victim = [&](std::span<const RunningRequest> running) {
    std::vector<std::int64_t> ids;
    for (const RunningRequest& r : running) ids.push_back(r.id);
    seen.push_back(ids);
    return std::size_t{0};
  };
  Bench t("paged-1", 10, {{0, 0.0, 4, 4}, {1, 0.0, 4, 4}}, c);
  for (int step = 0; step < 2; ++step) {
    (void)t.next();
    t.s->complete_step();
  }
  const StepPlan p = t.next();
  EXPECT_EQ(p.events, (std::vector<PlanEvent>{{Kind::preempted_recompute, 0, 0, ""}}));
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{decode(1, 1, 5)}));
  EXPECT_EQ(seen, (std::vector<std::vector<std::int64_t>>{{0, 1}}));
  ReplayConfig out_of_range;
  out_of_range.schedule.preemption_victim = [](std::span<const RunningRequest> running) { return running.size(); };
  Bench bad("paged-1", 10, {{0, 0.0, 4, 4}, {1, 0.0, 4, 4}}, out_of_range);
  for (int step = 0; step < 2; ++step) {
    (void)bad.next();
    bad.s->complete_step();
  }
  EXPECT_THROW((void)bad.next(), InvalidArgument);
}

TEST(Scheduler, SwapsOutAndBackInsteadWhenAskedTo) {
  ReplayConfig c;
  c.preemption = PreemptionMode::swap;
  Bench t("paged-1", 10, {{0, 0.0, 4, 4}, {1, 0.0, 4, 4}}, c);
  for (int i = 0; i < 2; ++i) {
    (void)t.next();
    t.s->complete_step();
  }
  StepPlan p = t.next();
  EXPECT_EQ(p.events, (std::vector<PlanEvent>{{Kind::preempted_swap, 1, 0, ""}}));
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{decode(0, 0, 5)}));
  EXPECT_EQ(t.s->swapped(), 1u);
  t.s->complete_step();
  (void)t.next();
  t.s->complete_step();  // A leaves; B's 5 tokens come back from the host and it decodes on
  p = t.next();
  EXPECT_EQ(p.events, (std::vector<PlanEvent>{{Kind::swapped_in, 1, 0, ""}}));
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{decode(1, 1, 5)}));
}

TEST(Scheduler, SeparatePrefillStepsPauseTheDecoders) {
  // vLLM v0: B arrives while A decodes; the next step runs only B's prompt, and A sits it out.
  ReplayConfig c;
  c.prefill_steps = PrefillSteps::separate;
  Bench t("paged-4", 100, {{0, 0.0, 5, 10}, {1, 1.0, 3, 10}}, c);
  StepPlan p = t.next();
  EXPECT_TRUE(p.prompt_step);  // a prompt step with no decoder to pause
  EXPECT_EQ(p.paused, 0);
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{prefill(0, 0, 0, 5)}));
  t.s->complete_step();
  t.now = 0.5;
  p = t.next();
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{decode(0, 0, 5)}));
  t.s->complete_step();
  t.now = 1.0;
  p = t.next();
  EXPECT_TRUE(p.prompt_step);
  EXPECT_EQ(p.paused, 1);
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{prefill(1, 1, 0, 3)}));
  t.s->complete_step();
  p = t.next();
  EXPECT_FALSE(p.prompt_step);
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{decode(0, 0, 6), decode(1, 1, 3)}));
}

TEST(Scheduler, RejectionsAtArrivalReachTheNextPlan) {
  // max_seq_len 64: a request of 60 + 10 tokens cannot ever run.
  Bench t("paged-4", 100, {{0, 0.0, 60, 10}, {1, 0.0, 3, 2}});
  const StepPlan p = t.next();
  ASSERT_EQ(p.events.size(), 2u);
  EXPECT_EQ(p.events[0].kind, Kind::rejected);
  EXPECT_EQ(p.events[0].request, 0);
  EXPECT_EQ(p.events[0].reason, "longer than max_seq_len 64");
  EXPECT_EQ(p.events[1], (PlanEvent{Kind::admitted, 1, 0, ""}));
  EXPECT_EQ(p.step, 1);
  EXPECT_EQ(p.work, (std::vector<PlannedWork>{prefill(1, 0, 0, 3)}));
}

TEST(StepPlan, PrintsWhatTheStepDoes) {
  StepPlan p;
  p.step = 7;
  p.at_s = 1.25;
  p.waiting = 4;
  p.events = {{Kind::admitted, 5, 16, ""}, {Kind::preempted_recompute, 3, 0, ""}, {Kind::rejected, 9, 0, "too long"}};
  p.work = {prefill(5, 9, 16, 104), decode(1, 2, 57)};
  EXPECT_EQ(format_plan(p),
            "step 7 at 1.250000 s: 2 sequences (prefill 104 tokens, decode 1), 0 paused, 4 waiting\n"
            "  admitted request 5 (16 cached)\n"
            "  preempted (recompute) request 3\n"
            "  rejected request 9: too long\n"
            "  prefill request 5 seq 9 tokens 16..120\n"
            "  decode request 1 seq 2 token 57\n");
  p.prompt_step = true;
  p.paused = 3;
  EXPECT_NE(format_plan(p).find("prompt step, 2 sequences"), std::string::npos);
  EXPECT_NE(format_plan(p).find("3 paused"), std::string::npos);
  p.work.clear();
  EXPECT_EQ(format_plan(p).substr(0, format_plan(p).find('\n')),
            "before step 7 at 1.250000 s: nothing runs, 4 waiting");
}

/// The replay hands every plan to on_plan before running it, and its steps are exactly the plans
/// that run: their work is the step's tokens.
TEST(Scheduler, TheReplaysStepsAreItsPlans) {
  auto b = backend("paged-4", 40);
  std::vector<Request> w;
  for (int i = 0; i < 11; ++i) w.push_back({i, 0.001 * i, 5 + (3 * i) % 17, 8 + (5 * i) % 9});
  ReplayConfig c;
  std::vector<StepPlan> plans;
  c.on_plan = [&](const StepPlan& p) { plans.push_back(p); };
  const ReplayResult r = replay(*b, w, c);
  std::vector<const StepPlan*> ran;
  for (const StepPlan& p : plans)
    if (p.runs()) ran.push_back(&p);
  ASSERT_EQ(ran.size(), r.steps.size());
  std::int64_t preempted = 0;
  for (std::size_t i = 0; i < ran.size(); ++i) {
    EXPECT_EQ(ran[i]->prefill_tokens(), r.steps[i].prefill_tokens);
    EXPECT_EQ(ran[i]->decode_tokens(), r.steps[i].decode_tokens);
    EXPECT_EQ(ran[i]->sequences() + ran[i]->paused, r.steps[i].running);
  }
  for (const StepPlan& p : plans)
    for (const PlanEvent& e : p.events) preempted += e.kind == Kind::preempted_recompute;
  EXPECT_EQ(preempted, r.summary.preemptions);
  EXPECT_GT(preempted, 0);  // 40 tokens of KV for 11 requests: the workload does preempt
}

}  // namespace
}  // namespace kvlab
