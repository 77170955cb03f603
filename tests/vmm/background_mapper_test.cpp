// BackgroundMapper on its own: steps run under the owner's mutex, wait() drains the queue, a
// step's exception reaches wait() once, and destruction stops a job between two steps.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "vmm/background_mapper.hpp"

namespace kvlab {
namespace {

TEST(BackgroundMapper, RunsEveryJobToTheEndInOrder) {
  std::mutex mutex;
  std::vector<std::int64_t> mapped(4, 0);  // per slot, guarded by `mutex`
  std::vector<int> order;                  // slots in the order their steps ran
  BackgroundMapper mapper(mutex, [&](const PrefetchJob& job) {
    order.push_back(job.slot);
    auto& rows = mapped[static_cast<std::size_t>(job.slot)];
    if (rows >= job.rows) return false;
    ++rows;
    return true;
  });
  {
    std::lock_guard lock(mutex);
    mapper.push(lock, PrefetchJob{1, 0, 5});
    mapper.push(lock, PrefetchJob{3, 0, 2});
  }
  mapper.notify();
  mapper.wait();
  std::lock_guard lock(mutex);
  EXPECT_EQ(mapped, (std::vector<std::int64_t>{0, 5, 0, 2}));
  EXPECT_EQ(order, (std::vector<int>{1, 1, 1, 1, 1, 1, 3, 3, 3}));  // FIFO; each job ends on a false step
}

TEST(BackgroundMapper, AStepErrorReachesWaitOnceAndEndsOnlyItsJob) {
  std::mutex mutex;
  int steps = 0;
  BackgroundMapper mapper(mutex, [&](const PrefetchJob& job) -> bool {
    ++steps;
    if (job.slot == 0) throw std::runtime_error("map failed");
    return false;
  });
  {
    std::lock_guard lock(mutex);
    mapper.push(lock, PrefetchJob{0, 0, 1});
    mapper.push(lock, PrefetchJob{1, 0, 1});
  }
  mapper.notify();
  EXPECT_THROW(mapper.wait(), std::runtime_error);
  EXPECT_NO_THROW(mapper.wait());
  std::lock_guard lock(mutex);
  EXPECT_EQ(steps, 2) << "the job after the failing one still ran";
}

TEST(BackgroundMapper, DestructionStopsAnEndlessJob) {
  std::mutex mutex;
  std::atomic<int> steps{0};
  {
    BackgroundMapper mapper(mutex, [&](const PrefetchJob&) {
      ++steps;
      return true;  // never finishes on its own
    });
    {
      std::lock_guard lock(mutex);
      mapper.push(lock, PrefetchJob{0, 0, 1});
    }
    mapper.notify();
    while (steps.load() < 3) std::this_thread::yield();
  }
  EXPECT_GE(steps.load(), 3);
}

}  // namespace
}  // namespace kvlab
