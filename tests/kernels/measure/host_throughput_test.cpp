#include "kernels/measure/host_throughput.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "alloc/core/error.hpp"
#include "kernels/thread_pool.hpp"

namespace kvlab {
namespace {

void expect_rates(const std::vector<double>& s, std::size_t reps) {
  ASSERT_EQ(s.size(), reps);
  for (const double r : s) {
    EXPECT_TRUE(std::isfinite(r)) << r;
    EXPECT_GT(r, 0.0);
  }
}

TEST(ReadBandwidthProbe, ReadsTheSameBufferOnEveryCall) {
  ThreadPool pool(2);
  ReadBandwidthProbe probe(pool, std::size_t{4} << 20);
  EXPECT_EQ(probe.bytes(), std::size_t{4} << 20);
  for (int call = 0; call < 3; ++call) expect_rates(probe.samples(2), 2);
  const double best = probe.best(3);
  EXPECT_TRUE(std::isfinite(best));
  EXPECT_GT(best, 0.0);
}

TEST(ReadBandwidthProbe, RoundsDownToWholeGroupsAndSplitsFewerGroupsThanChunks) {
  // 3 groups of 512 bytes over 2 threads x 8 chunks: most chunks read nothing, none reads past the
  // end (ASan build), and the rate counts only the bytes read.
  ThreadPool pool(2);
  ReadBandwidthProbe probe(pool, 3 * 512 + 100);
  EXPECT_EQ(probe.bytes(), std::size_t{3 * 512});
  expect_rates(probe.samples(4), 4);
}

TEST(ReadBandwidthProbe, RejectsABufferUnderOneGroup) {
  ThreadPool pool(1);
  EXPECT_THROW(ReadBandwidthProbe(pool, 511), InvalidArgument);
  EXPECT_THROW(ReadBandwidthProbe(pool, 0), InvalidArgument);
}

TEST(MeasureReadBandwidth, BestIsTheLargestSample) {
  ThreadPool pool(1);
  const std::vector<double> s = measure_read_bandwidth_samples(pool, std::size_t{1} << 20, 3);
  expect_rates(s, 3);
  // A fresh buffer each call: only positivity carries over between the two calls.
  EXPECT_GT(measure_read_bandwidth(pool, std::size_t{1} << 20, 2), 0.0);
}

TEST(MeasureDecodeArithmetic, EveryRowCountGivesOneRatePerRun) {
  ThreadPool pool(2);
  for (const int rows : {1, 2, 4, 8, 16}) {
    SCOPED_TRACE(rows);
    // 1000 elements per thread: not a whole group of any row count (each chunk rounds up to whole
    // groups inside its L1 buffer, never past it: the ASan build checks).
    expect_rates(measure_decode_arithmetic_samples(pool, rows, 1000, 3), 3);
  }
  expect_rates(measure_decode_arithmetic_samples(pool, 4, 1, 1), 1);
}

TEST(MeasureDecodeArithmetic, RejectsRowCountsTheKernelNeverUsesAndEmptyRuns) {
  ThreadPool pool(1);
  for (const int rows : {0, 3, 5, 32, -4})
    EXPECT_THROW((void)measure_decode_arithmetic_samples(pool, rows, 1000, 1), InvalidArgument) << rows;
  EXPECT_THROW((void)measure_decode_arithmetic_samples(pool, 4, 0, 1), InvalidArgument);
  EXPECT_THROW((void)measure_decode_arithmetic_samples(pool, 4, -1, 1), InvalidArgument);
}

}  // namespace
}  // namespace kvlab
