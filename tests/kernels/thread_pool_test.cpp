#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "kernels/thread_pool.hpp"

namespace kvlab {
namespace {

TEST(ThreadPool, RunsEveryIndexExactlyOnce) {
  ThreadPool pool(4);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::atomic<int>> hits(1000);
    pool.parallel_for(1000, [&](std::int64_t i) { hits[static_cast<std::size_t>(i)].fetch_add(1); });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, RethrowsTheFirstExceptionAndStaysUsable) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(100,
                                 [](std::int64_t i) {
                                   if (i == 37) throw std::runtime_error("task failed");
                                 }),
               std::runtime_error);
  std::atomic<int> n{0};
  pool.parallel_for(10, [&](std::int64_t) { ++n; });
  EXPECT_EQ(n.load(), 10);
}

TEST(ThreadPool, SingleThreadAndEmptyRanges) {
  ThreadPool pool(1);
  EXPECT_EQ(pool.size(), 1u);
  int n = 0;
  pool.parallel_for(5, [&](std::int64_t) { ++n; });
  pool.parallel_for(0, [&](std::int64_t) { ++n; });
  EXPECT_EQ(n, 5);
}

}  // namespace
}  // namespace kvlab
