#pragma once
// How many split-KV partitions (flash-decoding) a GPU attention launch uses. Without a split, a
// decode launch has batch x KV heads CUDA blocks: 64 for Llama-3-8B at batch 8, fewer than the
// 132 SMs of an H100, so most of the GPU would idle and one block per SM cannot keep enough loads
// in flight to approach HBM bandwidth. Splitting each sequence's tokens into P pieces multiplies
// the blocks by P at the price of a merge pass over P partial rows per query head. P is chosen so
// that the grid is one full wave: every SM holds as many blocks as fit on it at once (the
// kernel's occupancy), and no block waits for a second wave.
#include <cstdint>

namespace kvlab {

struct SplitKvPolicy {
  int blocks_per_sm = 4;  ///< blocks resident per SM (cuda_attention asks the occupancy API)
  int min_tokens = 256;   ///< no partition shorter than this many tokens of the longest sequence
  int max_unknown = 16;   ///< the most partitions when the longest sequence is not known
  int max_partitions = 256;
};

/// Partitions for a launch of `blocks_without_split` CUDA blocks (batch x KV heads x row blocks)
/// on `sm_count` SMs: the most that still fit in one wave of policy.blocks_per_sm blocks per SM,
/// but none shorter than policy.min_tokens of the longest sequence (max_kv_len; negative when
/// unknown, then at most policy.max_unknown). Always at least 1.
[[nodiscard]] constexpr int split_kv_partitions(std::int64_t blocks_without_split, int sm_count,
                                                std::int64_t max_kv_len, const SplitKvPolicy& policy = {}) {
  if (blocks_without_split < 1 || sm_count < 1) return 1;
  const std::int64_t want = static_cast<std::int64_t>(sm_count) * policy.blocks_per_sm;
  std::int64_t p = want / blocks_without_split;
  const std::int64_t cap =
      max_kv_len < 0 ? policy.max_unknown : max_kv_len / (policy.min_tokens < 1 ? 1 : policy.min_tokens);
  if (p > cap) p = cap;
  if (p > policy.max_partitions) p = policy.max_partitions;
  return p < 1 ? 1 : static_cast<int>(p);
}

}  // namespace kvlab
