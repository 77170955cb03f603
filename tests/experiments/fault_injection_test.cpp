// Replays under injected faults: device copies (copy-on-write, fork copies, swap) failing at every
// single point in turn, and at random. Every request must end completed, rejected or failed with
// a reason; the backend must end empty with every byte of its memory returned.
#include <gtest/gtest.h>

#include "alloc/core/error.hpp"
#include "alloc/faults/fault_injection.hpp"
#include "alloc/memory/statistics_adaptor.hpp"
#include "serving/replay/backend_factory.hpp"
#include "serving/replay/replayer.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

struct FaultRun {
  ReplaySummary summary;
  std::uint64_t checks = 0, injected = 0;
};

/// A workload that copies a lot: beams fork and reselect (copies on contiguous backends,
/// copy-on-write on paged ones) and memory is tight enough to preempt by swapping.
FaultRun replay_with(const std::string& backend, FaultInjector& faults) {
  SyntheticWorkload w;
  w.num_requests = 24;
  w.rate = 50;
  w.prompt = LengthDistribution::parse("uniform:5:40", "p");
  w.output = LengthDistribution::parse("uniform:2:30", "o");
  w.seed = 7;
  StatisticsAdaptor stats(host_memory_resource());
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 400 * o.model.kv_bytes_per_token();
  o.max_seq_len = 128;
  o.memory = &stats;
  FaultRun run;
  {
    auto b = make_backend(backend, o);
    const std::size_t region = stats.statistics().current_bytes;
    ReplayConfig c;
    c.samples_per_request = 3;
    c.beam_reselect_probability = 0.3;
    c.preemption = PreemptionMode::swap;
    ScopedCopyFaults guard(faults);
    const ReplayResult r = replay(*b, generate(w), c);
    run.summary = r.summary;
    EXPECT_EQ(b->num_sequences(), 0u) << backend;
    EXPECT_EQ(b->breakdown().allocated(), 0u) << backend;
    EXPECT_EQ(stats.statistics().current_bytes, region) << backend << ": swap space or staging leaked";
    for (const RequestRecord& q : r.requests) {
      if (q.status == RequestRecord::Status::failed || q.status == RequestRecord::Status::rejected) {
        EXPECT_FALSE(q.reason.empty());
      }
    }
  }
  EXPECT_EQ(stats.statistics().current_bytes, 0u) << backend;
  const ReplaySummary& s = run.summary;
  EXPECT_EQ(s.completed + s.truncated + s.rejected + s.failed, 24) << backend;
  run.checks = faults.checks();
  run.injected = faults.injected();
  return run;
}

class FaultInjection : public ::testing::TestWithParam<std::string> {};

TEST_P(FaultInjection, EveryCopyFailingInTurnLosesNothing) {
  FaultInjector clean;
  const FaultRun baseline = replay_with(GetParam(), clean);
  ASSERT_GT(baseline.checks, 0u) << "the workload made no device copies; the test would prove nothing";
  EXPECT_EQ(baseline.summary.failed, 0);
  std::int64_t failed_total = 0;
  const std::uint64_t step = 1;  // every single copy site fails once
  for (std::uint64_t n = 1; n <= baseline.checks; n += step) {
    FaultInjector f;
    f.fail_nth(n);
    const FaultRun r = replay_with(GetParam(), f);
    EXPECT_EQ(r.injected, 1u) << "fault " << n;
    failed_total += r.summary.failed;
  }
  RecordProperty("copy_sites", static_cast<int>(baseline.checks));
  RecordProperty("requests_failed_in_total", static_cast<int>(failed_total));
}

TEST_P(FaultInjection, RandomFaultsLoseNothing) {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    FaultInjector f;
    f.fail_randomly(0.05, seed);
    const FaultRun r = replay_with(GetParam(), f);
    EXPECT_GT(r.injected, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(CopyingBackends, FaultInjection,
                         ::testing::Values("contiguous-oracle", "paged-16", "paged-7", "paged-16-hash",
                                           "elastic-16-4k"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(FaultInjector, NthAndRandomPlans) {
  FaultInjector f;
  f.fail_nth(3);
  EXPECT_FALSE(f.should_fail("a"));
  EXPECT_FALSE(f.should_fail("a"));
  EXPECT_TRUE(f.should_fail("b"));
  EXPECT_FALSE(f.should_fail("a"));
  EXPECT_EQ(f.injected(), 1u);
  EXPECT_EQ(f.last_site(), "b");
  FaultInjector r1, r2;
  r1.fail_randomly(0.5, 42);
  r2.fail_randomly(0.5, 42);
  int n = 0;
  for (int i = 0; i < 1000; ++i) {
    const bool a = r1.should_fail("x");
    EXPECT_EQ(a, r2.should_fail("x"));
    n += a;
  }
  EXPECT_GT(n, 400);
  EXPECT_LT(n, 600);
  StatisticsAdaptor stats(host_memory_resource());
  FaultInjector once;
  once.fail_nth(1);
  FaultInjectingAdaptor faulty(stats, once);
  EXPECT_THROW((void)faulty.allocate(100), OutOfMemory);
  EXPECT_EQ(stats.statistics().current_count, 0u);
  void* p = faulty.allocate(100);
  faulty.deallocate(p, 100);
}

}  // namespace
}  // namespace kvlab
