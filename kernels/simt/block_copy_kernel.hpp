#pragma once
// Batched KV block copy written against the SIMT execution interface: copy-on-write (source and
// destination pool the same) and swap (different pools) copy a list of (src_block, dst_block)
// pairs in one launch. Grid: any 1-D grid (blocks stride over the pairs); block: any 1-D size.
// Each CUDA block copies whole KV blocks, its threads striding over Word-sized pieces; the
// launcher picks the widest Word (16, 8, 4 or 1 bytes) that the pools, strides and size allow.
// Destination blocks must be distinct and must not be sources in the same call (no ordering
// between pairs is promised).
#include <cstdint>
#include <initializer_list>

#include "kernels/platform.hpp"
#include "kernels/simt/exec.hpp"

namespace kvlab::simt {

struct BlockCopyParams {
  const void* src_pool = nullptr;            ///< block b starts at src_pool + b * src_block_stride bytes
  void* dst_pool = nullptr;                  ///< block b starts at dst_pool + b * dst_block_stride bytes
  const std::int32_t* src_blocks = nullptr;  ///< [num_pairs]
  const std::int32_t* dst_blocks = nullptr;  ///< [num_pairs]
  std::int64_t num_pairs = 0;
  std::int64_t block_bytes = 0;       ///< bytes copied per pair
  std::int64_t src_block_stride = 0;  ///< bytes; 0 means block_bytes
  std::int64_t dst_block_stride = 0;  ///< bytes; 0 means block_bytes
};

struct alignas(16) Copy16 {
  std::uint64_t lo, hi;
};
struct alignas(8) Copy8 {
  std::uint64_t v;
};

/// The widest copy word (bytes) allowed by the pools' addresses, strides and block size.
[[nodiscard]] inline int block_copy_word_bytes(const BlockCopyParams& c) {
  const std::uint64_t bits = reinterpret_cast<std::uintptr_t>(c.src_pool) |
                             reinterpret_cast<std::uintptr_t>(c.dst_pool) | static_cast<std::uint64_t>(c.block_bytes) |
                             static_cast<std::uint64_t>(c.src_block_stride) |
                             static_cast<std::uint64_t>(c.dst_block_stride);
  for (int w : {16, 8, 4})
    if (bits % static_cast<std::uint64_t>(w) == 0) return w;
  return 1;
}

template <class Word, class Exec>
KVLAB_HD void block_copy_kernel(Exec& ex, const BlockCopyParams& c) {
  const std::int64_t words = c.block_bytes / static_cast<std::int64_t>(sizeof(Word));
  const std::int64_t src_stride = c.src_block_stride ? c.src_block_stride : c.block_bytes;
  const std::int64_t dst_stride = c.dst_block_stride ? c.dst_block_stride : c.block_bytes;
  const std::int64_t tid = ex.thread_idx().x, nthreads = ex.block_dim().x;
  for (std::int64_t i = ex.block_idx().x; i < c.num_pairs; i += ex.grid_dim().x) {
    const Word* src =
        reinterpret_cast<const Word*>(static_cast<const unsigned char*>(c.src_pool) + c.src_blocks[i] * src_stride);
    Word* dst = reinterpret_cast<Word*>(static_cast<unsigned char*>(c.dst_pool) + c.dst_blocks[i] * dst_stride);
    for (std::int64_t w = tid; w < words; w += nthreads) dst[w] = src[w];
  }
}

}  // namespace kvlab::simt
