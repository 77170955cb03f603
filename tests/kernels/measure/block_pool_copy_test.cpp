#include "kernels/measure/block_pool_copy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace kvlab {
namespace {

// Every token of every sequence reads back through the pool's paged view exactly as it was stored
// contiguously, and the block table is a permutation of the pool (no block shared, none lost).
TEST(BlockPoolCopy, EveryTokenReadsBackThroughThePagedView) {
  constexpr int kBatch = 3, kContext = 23, kHeads = 2, kHeadDim = 5;
  constexpr std::int64_t kRowElems = kHeads * kHeadDim;
  std::vector<float> k(static_cast<std::size_t>(kBatch) * kContext * kRowElems), v(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i) + 0.25f;
    v[i] = -static_cast<float>(i) - 0.5f;
  }
  std::vector<const float*> ks, vs;
  for (int s = 0; s < kBatch; ++s) {
    ks.push_back(k.data() + static_cast<std::size_t>(s) * kContext * kRowElems);
    vs.push_back(v.data() + static_cast<std::size_t>(s) * kContext * kRowElems);
  }
  for (const int block_size : {1, 3, 7, 16, 17, 64}) {
    BlockPoolCopy<float> pool(ks.data(), vs.data(), kBatch, kContext, kRowElems, block_size);
    const PagedKv<float> view = pool.view(kHeadDim);
    const int per_seq = (kContext + block_size - 1) / block_size;
    ASSERT_EQ(view.block_table_stride, per_seq);
    std::vector<std::int32_t> sorted = pool.table;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], static_cast<std::int32_t>(i)) << block_size;
    EXPECT_FALSE(std::is_sorted(pool.table.begin(), pool.table.end())) << "block " << block_size << " not shuffled";
    for (int s = 0; s < kBatch; ++s)
      for (int t = 0; t < kContext; ++t)
        for (int h = 0; h < kHeads; ++h)
          for (int d = 0; d < kHeadDim; ++d) {
            const std::int64_t src = (static_cast<std::int64_t>(s) * kContext + t) * kRowElems + h * kHeadDim + d;
            ASSERT_EQ(view.k(s, t, h)[d], k[static_cast<std::size_t>(src)]) << block_size << " " << s << " " << t;
            ASSERT_EQ(view.v(s, t, h)[d], v[static_cast<std::size_t>(src)]) << block_size << " " << s << " " << t;
          }
  }
}

// A given placement: the blocks the table names in a larger pool (every third block left to
// others), each sequence's blocks in descending order; bad tables are refused.
TEST(BlockPoolCopy, AGivenTableInALargerPoolReadsBack) {
  constexpr int kBatch = 2, kContext = 10, kBlock = 3, kRowElems = 4, kPerSeq = 4;
  std::vector<float> k(static_cast<std::size_t>(kBatch) * kContext * kRowElems), v(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i) * 1.5f + 1.f;
    v[i] = static_cast<float>(i) * -0.5f - 2.f;
  }
  const std::vector<const float*> ks{k.data(), k.data() + kContext * kRowElems};
  const std::vector<const float*> vs{v.data(), v.data() + kContext * kRowElems};
  std::vector<std::int32_t> table;
  for (int s = 0; s < kBatch; ++s)
    for (int j = kPerSeq - 1; j >= 0; --j)
      table.push_back(static_cast<std::int32_t>((s * kPerSeq + j) / 2 * 3 + (s * kPerSeq + j) % 2));
  BlockPoolCopy<float> pool(ks.data(), vs.data(), kBatch, kContext, kRowElems, kBlock, table, 12);
  EXPECT_EQ(pool.table, table);
  EXPECT_EQ(pool.k.size(), 12u * kBlock * kRowElems);
  const PagedKv<float> view = pool.view(2);
  for (int s = 0; s < kBatch; ++s)
    for (int t = 0; t < kContext; ++t)
      for (int e = 0; e < kRowElems; ++e) {
        const auto src = static_cast<std::size_t>((s * kContext + t) * kRowElems + e);
        ASSERT_EQ(view.k(s, t, e / 2)[e % 2], k[src]) << s << " " << t;
        ASSERT_EQ(view.v(s, t, e / 2)[e % 2], v[src]) << s << " " << t;
      }
  auto twice = table;
  twice[1] = twice[0];
  EXPECT_THROW(BlockPoolCopy<float>(ks.data(), vs.data(), kBatch, kContext, kRowElems, kBlock, twice, 12),
               std::invalid_argument);
  EXPECT_THROW(BlockPoolCopy<float>(ks.data(), vs.data(), kBatch, kContext, kRowElems, kBlock, table, 10),
               std::invalid_argument);
  table.pop_back();
  EXPECT_THROW(BlockPoolCopy<float>(ks.data(), vs.data(), kBatch, kContext, kRowElems, kBlock, table, 12),
               std::invalid_argument);
}

}  // namespace
}  // namespace kvlab
