// How many split-KV partitions a GPU decode launch uses (kernels/split_kv.hpp).
#include "kernels/split_kv.hpp"

#include <gtest/gtest.h>

namespace kvlab {
namespace {

TEST(SplitKv, FillsEverySmWithoutPartitionsShorterThanTheMinimum) {
  // Llama-3-8B decode on an H100 (132 SMs): 8 KV heads.
  EXPECT_EQ(split_kv_partitions(8 * 8, 132, 16384), 9);  // 576 blocks for 528 wanted
  EXPECT_EQ(split_kv_partitions(32 * 8, 132, 4096), 3);  // 768 blocks
  EXPECT_EQ(split_kv_partitions(8 * 8, 132, 1024), 4);   // capped: 4 partitions of 256 tokens
  EXPECT_EQ(split_kv_partitions(8 * 8, 132, 300), 1);    // too short to split at all
  EXPECT_EQ(split_kv_partitions(1024, 132, 16384), 1);   // the grid is already full
  EXPECT_EQ(split_kv_partitions(1, 132, 1 << 20), 256);  // one sequence: the policy's maximum
  EXPECT_EQ(split_kv_partitions(7, 132, -1), 16);        // the longest sequence unknown
  EXPECT_EQ(split_kv_partitions(64, 132, 16384, {.blocks_per_sm = 1}), 3);
  EXPECT_EQ(split_kv_partitions(64, 132, 16384, {.min_tokens = 4096}), 4);
}

TEST(SplitKv, DegenerateInputsGiveOnePartition) {
  EXPECT_EQ(split_kv_partitions(0, 132, 4096), 1);
  EXPECT_EQ(split_kv_partitions(64, 0, 4096), 1);
  EXPECT_EQ(split_kv_partitions(64, 132, 0), 1);
  static_assert(split_kv_partitions(64, 132, 16384) == 9, "usable at compile time");
}

}  // namespace
}  // namespace kvlab
