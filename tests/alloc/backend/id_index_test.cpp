#include "alloc/backend/id_index.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <unordered_map>
#include <vector>

namespace kvlab {
namespace {

TEST(IdIndex, AnEmptyIndexFindsNothingAndErasesNothing) {
  IdIndex<int> index;
  EXPECT_EQ(index.find(0), nullptr);
  EXPECT_EQ(index.find(IdIndex<int>::kEmpty), nullptr);
  EXPECT_FALSE(index.erase(0));
  EXPECT_EQ(index.size(), 0U);
}

TEST(IdIndex, FindsWhatWasInsertedAndForgetsWhatWasErased) {
  std::vector<int> values(100);
  IdIndex<int> index;
  for (int i = 0; i < 100; ++i) index.insert(i * 7 - 300, &values[static_cast<std::size_t>(i)]);
  EXPECT_EQ(index.size(), 100U);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(index.find(i * 7 - 300), &values[static_cast<std::size_t>(i)]) << i;
  EXPECT_EQ(index.find(2), nullptr);  // 2 = 7k - 300 has no integer k
  EXPECT_EQ(index.find(IdIndex<int>::kEmpty), nullptr);
  EXPECT_FALSE(index.erase(IdIndex<int>::kEmpty));
  for (int i = 0; i < 100; i += 2) EXPECT_TRUE(index.erase(i * 7 - 300));
  EXPECT_FALSE(index.erase(-300));
  EXPECT_EQ(index.size(), 50U);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(index.find(i * 7 - 300), i % 2 == 0 ? nullptr : &values[static_cast<std::size_t>(i)]) << i;
}

/// Ids that share a home slot and wrap around the table's end: every erase must leave each
/// remaining id reachable (a backward shift that moved an entry before its home, or left a gap
/// between an entry and its home, loses ids here).
TEST(IdIndex, EraseKeepsEveryRunReachableAgainstAMapModel) {
  std::mt19937_64 rng(20261129);
  std::vector<int> storage(1);
  IdIndex<int> index;
  std::unordered_map<std::int64_t, int*> model;
  // Few distinct ids (so collisions, reinsertions and wrapped runs are common), and extremes.
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < 48; ++i) ids.push_back(i * 1024);  // many share the low bits
  ids.push_back(std::numeric_limits<std::int64_t>::max());
  ids.push_back(IdIndex<int>::kEmpty + 1);
  ids.push_back(-1);
  for (int step = 0; step < 20000; ++step) {
    const std::int64_t id = ids[rng() % ids.size()];
    if (model.contains(id)) {
      ASSERT_TRUE(index.erase(id));
      model.erase(id);
    } else {
      index.insert(id, storage.data());
      model[id] = storage.data();
    }
    ASSERT_EQ(index.size(), model.size());
    for (const std::int64_t probe : ids) ASSERT_EQ(index.find(probe) != nullptr, model.contains(probe)) << step;
  }
}

TEST(IdIndex, GrowingKeepsEveryEntry) {
  std::vector<std::int64_t> values(5000);
  IdIndex<std::int64_t> index;
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<std::int64_t>(i) * 977;
    index.insert(values[i], &values[i]);
  }
  for (std::size_t i = 0; i < values.size(); ++i) ASSERT_EQ(index.find(values[i]), &values[i]);
}

}  // namespace
}  // namespace kvlab
