#include <gtest/gtest.h>

#include <set>

#include "alloc/error.hpp"
#include "paged/block_pool.hpp"

namespace kvlab {
namespace {

TEST(BlockPool, AllocatesEveryBlockOnceThenRunsOut) {
  BlockPool pool(5);
  std::set<BlockId> got;
  for (int i = 0; i < 5; ++i) got.insert(*pool.allocate());
  EXPECT_EQ(got.size(), 5u);
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_TRUE(pool.release(2));
  EXPECT_EQ(*pool.allocate(), 2);  // LIFO reuse
}

TEST(BlockPool, ReferenceCountsDecideWhenABlockIsFree) {
  BlockPool pool(2);
  const BlockId b = *pool.allocate();
  pool.add_ref(b);
  pool.add_ref(b);
  EXPECT_EQ(pool.ref_count(b), 3);
  EXPECT_FALSE(pool.release(b));
  EXPECT_FALSE(pool.release(b));
  EXPECT_TRUE(pool.release(b));
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_THROW(pool.release(b), InvalidArgument);  // double free
  EXPECT_THROW(pool.add_ref(b), InvalidArgument);
  EXPECT_THROW(pool.add_ref(7), InvalidArgument);
  EXPECT_THROW(BlockPool(0), InvalidArgument);
}

}  // namespace
}  // namespace kvlab
