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

TEST(BlockPool, CountsTheFreeBlocksMarkedCached) {
  for (const FreeOrder order : {FreeOrder::lifo, FreeOrder::lru}) {
    BlockPool pool(4, order);
    const BlockId a = *pool.allocate(), b = *pool.allocate();
    pool.set_cached(a, true);
    pool.set_cached(b, true);
    pool.set_cached(b, true);  // marking twice changes nothing
    EXPECT_EQ(pool.num_free_cached(), 0);  // held blocks are not free
    EXPECT_TRUE(pool.release(a));
    EXPECT_EQ(pool.num_free_cached(), 1);
    pool.set_cached(3, true);  // a free block gains an entry
    EXPECT_EQ(pool.num_free_cached(), 2);
    if (order == FreeOrder::lru) {
      pool.take(a);  // a prefix hit revives it
      EXPECT_EQ(pool.num_free_cached(), 1);
      EXPECT_TRUE(pool.release(a));
    }
    pool.set_cached(3, false);  // a free block loses its entry
    EXPECT_EQ(pool.num_free_cached(), 1);
    while (pool.allocate().has_value()) {
    }
    EXPECT_EQ(pool.num_free_cached(), 0);
    EXPECT_TRUE(pool.is_cached(a));
  }
}

}  // namespace
}  // namespace kvlab
