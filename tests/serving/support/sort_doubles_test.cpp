#include "serving/support/sort_doubles.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace kvlab {
namespace {

/// Bit for bit the vector std::sort leaves, but for the order of -0.0 and +0.0 among equal zeros.
void expect_as_std_sort(std::vector<double> v) {
  std::vector<double> want = v;
  std::sort(want.begin(), want.end());
  sort_doubles(v);
  ASSERT_EQ(v.size(), want.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (want[i] == 0.0) {
      EXPECT_EQ(v[i], 0.0) << i;
    } else {
      EXPECT_EQ(std::bit_cast<std::uint64_t>(v[i]), std::bit_cast<std::uint64_t>(want[i])) << i << ": " << v[i];
    }
  }
}

TEST(SortDoubles, LargeVectorsComeOutAsStdSortLeavesThem) {
  // Above the radix threshold: latencies of every scale, negatives, duplicates, zeros, infinities,
  // denormals, in a seeded random order.
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> gap(-4.0, 2.0);
  std::vector<double> v;
  for (int i = 0; i < 50000; ++i) v.push_back(gap(rng));
  for (int i = 0; i < 2000; ++i) v.push_back(-gap(rng));
  for (int i = 0; i < 3000; ++i) v.push_back(v[static_cast<std::size_t>(i) * 7]);  // duplicates
  for (const double x :
       {0.0, -0.0, 0.0, std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
        std::numeric_limits<double>::denorm_min(), -std::numeric_limits<double>::denorm_min(),
        std::numeric_limits<double>::max(), std::numeric_limits<double>::lowest(), 1.0, -1.0})
    v.push_back(x);
  std::shuffle(v.begin(), v.end(), rng);
  expect_as_std_sort(v);
}

TEST(SortDoubles, SmallSortedReversedAndConstantVectors) {
  expect_as_std_sort({});
  expect_as_std_sort({3.0, -1.0, 2.0});
  std::vector<double> up(10000), down(10000), same(10000, 0.125);
  for (std::size_t i = 0; i < up.size(); ++i) {
    up[i] = static_cast<double>(i) * 1e-3;
    down[i] = 1e3 - static_cast<double>(i);
  }
  expect_as_std_sort(up);
  expect_as_std_sort(down);
  expect_as_std_sort(same);  // every pass skipped: nothing to move
}

}  // namespace
}  // namespace kvlab
