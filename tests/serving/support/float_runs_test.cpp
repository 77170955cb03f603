#include "serving/support/float_runs.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace kvlab {
namespace {

/// The values of `r`, run by run, as doubles.
std::vector<double> expanded(const FloatRuns& r) {
  std::vector<double> out;
  r.for_each([&](double x, std::int64_t count) { out.insert(out.end(), static_cast<std::size_t>(count), x); });
  return out;
}

TEST(FloatRuns, KeepsEqualNeighboursAsOneRunInArrivalOrder) {
  FloatRuns r;
  EXPECT_TRUE(r.empty());
  for (const float x : {0.5f, 0.5f, 0.5f, 0.25f, 0.5f, 0.5f, 0.0f, -0.0f, -0.0f}) r.push_back(x);
  EXPECT_EQ(r.size(), 9);
  ASSERT_EQ(r.runs(), 5u);  // 0.0 and -0.0 compare equal but are different bits: two runs
  const std::vector<std::pair<double, std::int64_t>> want = {{0.5, 3}, {0.25, 1}, {0.5, 2}, {0.0, 1}, {-0.0, 2}};
  for (std::size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(std::bit_cast<std::uint64_t>(r.run(k).value), std::bit_cast<std::uint64_t>(want[k].first)) << k;
    EXPECT_EQ(r.run(k).count, want[k].second) << k;
  }
}

TEST(FloatRuns, SortOrdersTheValuesAsStdSortOrdersTheirDoubles) {
  // Below and above the radix sort's threshold (in runs), negatives, zeros of both signs,
  // infinities, denormals and the extremes; then more values after the sort, sorted again.
  std::mt19937_64 rng(5);
  std::lognormal_distribution<float> gap(-4.0f, 2.0f);
  for (const int n : {0, 1, 3, 2000, 4096, 50000}) {
    FloatRuns r;
    std::vector<float> f;
    for (int i = 0; i < n; ++i) {
      const float x = i % 9 == 8 ? -gap(rng) : gap(rng);
      for (std::uint64_t k = 1 + rng() % 3; k-- > 0;) f.push_back(x);
    }
    if (n > 3)
      for (const float x :
           {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
            std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
            std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest()})
        f.insert(f.begin() + static_cast<std::ptrdiff_t>(rng() % f.size()), x);
    for (const float x : f) r.push_back(x);
    EXPECT_GE(r.runs(), static_cast<std::size_t>(n)) << "below and above the radix threshold in runs";
    r.sort();
    for (const float x : {3.0f, -1.0f, 3.0f}) {
      f.push_back(x);
      r.push_back(x);
    }
    r.sort();
    std::vector<double> want(f.begin(), f.end());
    std::sort(want.begin(), want.end());
    const std::vector<double> got = expanded(r);
    ASSERT_EQ(got.size(), want.size()) << n;
    EXPECT_EQ(r.size(), static_cast<std::int64_t>(want.size()));
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (want[i] == 0.0) {
        EXPECT_EQ(got[i], 0.0) << n << ": " << i;  // -0.0 and +0.0 in either order, as std::sort
      } else {
        ASSERT_EQ(std::bit_cast<std::uint64_t>(got[i]), std::bit_cast<std::uint64_t>(want[i])) << n << ": " << i;
      }
    }
    for (std::size_t k = 1; k < r.runs(); ++k) EXPECT_LE(r.run(k - 1).value, r.run(k).value) << n << ": " << k;
  }
}

}  // namespace
}  // namespace kvlab
