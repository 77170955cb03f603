#include "serving/replay/schedule_policy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <span>

#include "alloc/core/error.hpp"
#include "serving/replay/backend_factory.hpp"
#include "serving/replay/replayer.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

TEST(SchedulePolicy, NamesRoundTripAndUnknownOnesFailLoudly) {
  for (SchedulePolicy p : {SchedulePolicy::fcfs, SchedulePolicy::lpm})
    EXPECT_EQ(parse_schedule_policy(to_string(p)), p);
  EXPECT_THROW((void)parse_schedule_policy("sjf"), InvalidArgument);
  EXPECT_THROW((void)parse_schedule_policy(""), InvalidArgument);
}

TEST(SchedulePolicy, LongestPrefixFirstOverdueFirstInQueueOrder) {
  const std::int64_t cached[] = {0, 64, 16, 64, 0, 128};
  const double waited[] = {0.1, 0.2, 9.0, 0.3, 7.0, 0.0};
  // 2 and 4 are overdue (>= 5 s): queue order; then 5 (128), 1 and 3 (64, queue order), 0 (0).
  EXPECT_EQ(lpm_order(cached, waited, 5.0), (std::vector<std::size_t>{2, 4, 5, 1, 3, 0}));
  // A bound of 0 makes everyone overdue: FCFS.
  EXPECT_EQ(lpm_order(cached, waited, 0.0), (std::vector<std::size_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(lpm_order({}, {}, 1.0).empty());
  const double short_list[] = {0.0};
  EXPECT_THROW((void)lpm_order(cached, short_list, 1.0), InvalidArgument);
}

// One request at a time (max_running 1). A runs first; B (nothing cached) and C (A's prompt plus a
// tail) wait behind it. When A finishes, FCFS admits B; lpm admits C, whose prefix A left cached;
// with a fairness bound B has already passed, lpm is FCFS again.
std::vector<Request> three_requests() {
  std::vector<Request> reqs(3);
  for (int i = 0; i < 3; ++i) {
    Request& r = reqs[static_cast<std::size_t>(i)];
    r.id = i;
    r.arrival_s = i == 0 ? 0.0 : 1e-9 * i;
    r.output_tokens = 4;
  }
  for (int t = 0; t < 64; ++t) {
    reqs[0].prompt_token_ids.push_back(1000 + t);
    reqs[1].prompt_token_ids.push_back(5000 + t);
    reqs[2].prompt_token_ids.push_back(1000 + t);
  }
  for (int t = 0; t < 16; ++t) reqs[2].prompt_token_ids.push_back(9000 + t);
  for (Request& r : reqs) r.prompt_tokens = static_cast<std::int64_t>(r.prompt_token_ids.size());
  return reqs;
}

std::vector<double> first_scheduled(const std::string& backend, SchedulePolicyOptions schedule) {
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 4000 * o.model.kv_bytes_per_token();
  o.max_seq_len = 256;
  auto b = make_backend(backend, o);
  ReplayConfig c;
  c.max_running = 1;
  c.schedule = schedule;
  const ReplayResult r = replay(*b, three_requests(), c);
  EXPECT_EQ(r.summary.completed, 3);
  std::vector<double> t;
  for (const RequestRecord& rec : r.requests) t.push_back(rec.first_scheduled_s);
  return t;
}

TEST(SchedulePolicy, LpmAdmitsTheCachedPrefixFirstWithinItsFairnessBound) {
  for (const char* backend : {"paged-16-hash", "paged-16-radix"}) {
    SCOPED_TRACE(backend);
    const auto fcfs = first_scheduled(backend, {});
    EXPECT_LT(fcfs[1], fcfs[2]);  // B before C
    const auto lpm = first_scheduled(backend, {SchedulePolicy::lpm, 128, 1e9});
    EXPECT_LT(lpm[2], lpm[1]);  // C (64 cached tokens) before B
    const auto fair = first_scheduled(backend, {SchedulePolicy::lpm, 128, 0.0});
    EXPECT_EQ(fair, fcfs);  // everyone overdue: queue order
  }
  // Without a prefix cache nothing is cached: lpm keeps the queue order.
  EXPECT_EQ(first_scheduled("paged-16", {SchedulePolicy::lpm, 128, 1e9}), first_scheduled("paged-16", {}));
}

// A custom admission order (the Python package's policies) replaces the policy's: the identity is
// FCFS, C-first is what lpm chose, and the candidates it sees describe the queue.
TEST(SchedulePolicy, ACustomAdmissionOrderIsFollowedAndChecked) {
  std::vector<std::vector<std::int64_t>> seen_ids;
  SchedulePolicyOptions identity;
  identity.admission_order = [&](std::span<const QueuedRequest> q) {
    std::vector<std::int64_t> ids;
    for (const QueuedRequest& r : q) {
      ids.push_back(r.id);
      EXPECT_GE(r.waited_s, 0);
      EXPECT_EQ(r.output_tokens, 4);
    }
    seen_ids.push_back(ids);
    std::vector<std::size_t> order(q.size());
    for (std::size_t i = 0; i < q.size(); ++i) order[i] = i;
    return order;
  };
  EXPECT_EQ(first_scheduled("paged-16-radix", identity), first_scheduled("paged-16-radix", {}));
  ASSERT_FALSE(seen_ids.empty());
  EXPECT_EQ(seen_ids.front(), (std::vector<std::int64_t>{1, 2}));  // A runs; B and C wait, in queue order
  SchedulePolicyOptions most_cached;
  std::int64_t cached_of_c = -1;
  most_cached.admission_order = [&](std::span<const QueuedRequest> q) {
    cached_of_c = std::max(cached_of_c, q.back().cached_tokens);
    return q.back().cached_tokens > q.front().cached_tokens ? std::vector<std::size_t>{1, 0}
                                                            : std::vector<std::size_t>{0, 1};
  };
  const auto custom = first_scheduled("paged-16-radix", most_cached);
  EXPECT_LT(custom[2], custom[1]);  // C before B, as lpm
  EXPECT_EQ(cached_of_c, 64);       // A's prompt, cached once A finished
  for (const std::vector<std::size_t>& bad : {std::vector<std::size_t>{0}, {0, 0}, {0, 2}, {1, 0, 2}}) {
    SchedulePolicyOptions broken;
    broken.admission_order = [&](std::span<const QueuedRequest>) { return bad; };
    BackendOptions o;
    o.model = testing::tiny_model();
    o.capacity_bytes = 4000 * o.model.kv_bytes_per_token();
    o.max_seq_len = 256;
    auto b = make_backend("paged-16", o);
    ReplayConfig c;
    c.max_running = 1;
    c.schedule = broken;
    EXPECT_THROW((void)replay(*b, three_requests(), c), InvalidArgument);
  }
}

}  // namespace
}  // namespace kvlab
