#pragma once
// A contiguous KV cache copied into a block pool whose blocks lie in a seeded shuffled order: the
// paged layout the attention benchmarks, `kvlab calibrate` and scripts/attention_ab.sh measure (a
// sequence's blocks anywhere in the pool, as after a serving system's allocations and frees), so
// the paged/contiguous ratios they report come from the same placement.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/huge_pages.hpp"
#include "kernels/kv_view.hpp"

namespace kvlab {

template <class T>
struct ShuffledBlockPool {
  std::vector<T, HugePageAllocator<T>> k, v;  ///< [pool block][block_size][row]
  std::vector<std::int32_t> table;            ///< [sequence][block index] -> pool block
  int blocks_per_seq = 0;
  int block_size = 0;
  std::int64_t row = 0;  ///< elements per token (every KV head)

  /// `k_seq[s]` and `v_seq[s]`: sequence s's `context` tokens of `row` elements each.
  ShuffledBlockPool(const T* const* k_seq, const T* const* v_seq, int batch, int context, std::int64_t token_row,
                    int tokens_per_block, std::uint64_t seed = 7)
      : blocks_per_seq((context + tokens_per_block - 1) / tokens_per_block), block_size(tokens_per_block),
        row(token_row) {
    table.resize(static_cast<std::size_t>(blocks_per_seq) * static_cast<std::size_t>(batch));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937_64(seed));
    k.resize(table.size() * static_cast<std::size_t>(block_stride()));
    v.resize(k.size());
    for (int s = 0; s < batch; ++s)
      for (int t = 0; t < context; ++t) {
        const auto dst = static_cast<std::size_t>(
            table[static_cast<std::size_t>(s) * blocks_per_seq + t / block_size] * block_stride() + (t % block_size) * row);
        std::copy_n(k_seq[s] + t * row, row, &k[dst]);
        std::copy_n(v_seq[s] + t * row, row, &v[dst]);
      }
  }

  [[nodiscard]] std::int64_t block_stride() const { return block_size * row; }

  /// The view of this pool's host memory (heads `head_dim` apart within a token's row).
  [[nodiscard]] PagedKv<T> view(int head_dim) {
    return {k.data(), v.data(), table.data(), blocks_per_seq, block_size, block_stride(), row, head_dim};
  }
};

}  // namespace kvlab
