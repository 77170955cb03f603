#pragma once
// A contiguous KV cache copied into a block pool, in one of two placements:
//  * shuffled (the default): the blocks in a seeded shuffled order over a pool of exactly the
//    blocks needed, a sequence's blocks anywhere in it as after a serving system's allocations and
//    frees. The paged layout the attention benchmarks, `kvlab calibrate` and
//    scripts/attention_ab.sh measure, so the paged/contiguous ratios they report come from the
//    same placement;
//  * a given block table over a pool of a given size (blocks the table does not name stay unused,
//    as blocks other sequences hold): e.g. what paged/block_pool.hpp's region order hands out.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "alloc/memory/huge_pages.hpp"
#include "kernels/kv_view.hpp"

namespace kvlab {

template <class T>
struct BlockPoolCopy {
  std::vector<T, HugePageAllocator<T>> k, v;  ///< [pool block][block_size][row]
  std::vector<std::int32_t> table;            ///< [sequence][block index] -> pool block
  int blocks_per_seq = 0;
  int block_size = 0;
  std::int64_t row = 0;  ///< elements per token (every KV head)

  /// `k_seq[s]` and `v_seq[s]`: sequence s's `context` tokens of `row` elements each.
  BlockPoolCopy(const T* const* k_seq, const T* const* v_seq, int batch, int context, std::int64_t token_row,
                int tokens_per_block, std::uint64_t seed = 7)
      : BlockPoolCopy(k_seq, v_seq, batch, context, token_row, tokens_per_block,
                      shuffled(batch * ((context + tokens_per_block - 1) / tokens_per_block), seed), -1) {}

  /// The same with sequence s's block j at pool block `placed[s * blocks_per_seq + j]`, in a pool
  /// of `pool_blocks` blocks (-1: as many as the table names). Throws std::invalid_argument when
  /// the table has the wrong size, names a block outside the pool or names one twice.
  BlockPoolCopy(const T* const* k_seq, const T* const* v_seq, int batch, int context, std::int64_t token_row,
                int tokens_per_block, std::vector<std::int32_t> placed, std::int32_t pool_blocks)
      : table(std::move(placed)),
        blocks_per_seq((context + tokens_per_block - 1) / tokens_per_block),
        block_size(tokens_per_block),
        row(token_row) {
    const auto n = static_cast<std::int64_t>(table.size());
    if (pool_blocks < 0) pool_blocks = static_cast<std::int32_t>(n);
    if (n != static_cast<std::int64_t>(batch) * blocks_per_seq)
      throw std::invalid_argument("block table of the wrong size");
    std::vector<bool> seen(static_cast<std::size_t>(pool_blocks));
    for (const std::int32_t b : table) {
      if (b < 0 || b >= pool_blocks || seen[static_cast<std::size_t>(b)])
        throw std::invalid_argument("block table names block " + std::to_string(b) + " outside the pool or twice");
      seen[static_cast<std::size_t>(b)] = true;
    }
    k.resize(static_cast<std::size_t>(pool_blocks) * static_cast<std::size_t>(block_stride()));
    v.resize(k.size());
    for (int s = 0; s < batch; ++s)
      for (int t = 0; t < context; ++t) {
        const auto dst = static_cast<std::size_t>(table[static_cast<std::size_t>(s) * blocks_per_seq + t / block_size] *
                                                      block_stride() +
                                                  (t % block_size) * row);
        std::copy_n(k_seq[s] + t * row, row, &k[dst]);
        std::copy_n(v_seq[s] + t * row, row, &v[dst]);
      }
  }

  [[nodiscard]] std::int64_t block_stride() const { return block_size * row; }

  /// 0 .. n-1 in a seeded shuffled order.
  static std::vector<std::int32_t> shuffled(int n, std::uint64_t seed) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
    return ids;
  }

  /// The view of this pool's host memory (heads `head_dim` apart within a token's row).
  [[nodiscard]] PagedKv<T> view(int head_dim) {
    return {k.data(), v.data(), table.data(), blocks_per_seq, block_size, block_stride(), row, head_dim};
  }
};

}  // namespace kvlab
