// How many split-KV partitions a GPU decode launch uses (kernels/split_kv.hpp).
#include "kernels/split_kv.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

namespace kvlab {
namespace {

TEST(SplitKv, OneFullWaveWithoutPartitionsShorterThanTheMinimum) {
  // Llama-3-8B decode (8 KV heads) on an H100's 132 SMs, 6 blocks resident per SM: 792 slots.
  const SplitKvPolicy six{.blocks_per_sm = 6};
  EXPECT_EQ(split_kv_partitions(8 * 8, 132, 16384, six), 12);  // 768 blocks
  EXPECT_EQ(split_kv_partitions(32 * 8, 132, 4096, six), 3);   // 768 blocks
  EXPECT_EQ(split_kv_partitions(8 * 8, 132, 1024, six), 4);    // capped: 4 partitions of 256 tokens
  EXPECT_EQ(split_kv_partitions(8 * 8, 132, 300, six), 1);     // too short to split at all
  EXPECT_EQ(split_kv_partitions(1024, 132, 16384, six), 1);    // more than a wave already
  EXPECT_EQ(split_kv_partitions(1, 132, 1 << 20, six), 256);   // one sequence: the policy's maximum
  EXPECT_EQ(split_kv_partitions(7, 132, -1, six), 16);         // the longest sequence unknown
  EXPECT_EQ(split_kv_partitions(64, 132, 16384), 8);           // the default 4 per SM: 512 of 528
  EXPECT_EQ(split_kv_partitions(64, 132, 16384, {.blocks_per_sm = 1}), 2);
  EXPECT_EQ(split_kv_partitions(64, 132, 16384, {.min_tokens = 4096}), 4);
  for (std::int64_t base : {1, 7, 64, 131, 256, 793})  // never more blocks than one wave holds
    EXPECT_LE(base * split_kv_partitions(base, 132, 1 << 20, six), std::max<std::int64_t>(base, 792)) << base;
}

TEST(SplitKv, DegenerateInputsGiveOnePartition) {
  EXPECT_EQ(split_kv_partitions(0, 132, 4096), 1);
  EXPECT_EQ(split_kv_partitions(64, 0, 4096), 1);
  EXPECT_EQ(split_kv_partitions(64, 132, 0), 1);
  EXPECT_EQ(split_kv_partitions(64, 132, 4096, {.blocks_per_sm = 0}), 1);  // occupancy 0: no split
  EXPECT_EQ(split_kv_partitions(1, 132, 4096, {.min_tokens = 0}), 256);    // no minimum: no division by 0
  static_assert(split_kv_partitions(64, 132, 16384) == 8, "usable at compile time");
}

}  // namespace
}  // namespace kvlab
