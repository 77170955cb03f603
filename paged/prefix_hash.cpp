#include "paged/prefix_hash.hpp"

#include "alloc/error.hpp"

namespace kvlab {

HashPrefixCache::HashPrefixCache(std::int32_t num_blocks, std::int32_t block_size)
    : index_(num_blocks, block_size, 1) {}

std::vector<BlockId> HashPrefixCache::match(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                            std::int64_t max_blocks) const {
  std::vector<BlockId> out;
  for (const auto e : index_.match(tokens, extra, max_blocks)) out.push_back(index_.units(e).front());
  return out;
}

std::int64_t HashPrefixCache::insert(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                     std::span<const BlockId> blocks, std::int64_t from, std::int64_t to) {
  const ChainedPrefixIndex::EntryId parent = from > 0 ? index_.entry_of(blocks[static_cast<std::size_t>(from - 1)]) : -1;
  KVLAB_ASSERT(from == 0 || parent >= 0);
  return index_.insert(tokens, extra, parent, from, to, [&](std::int64_t i, std::span<BlockId> out) {
    out[0] = blocks[static_cast<std::size_t>(i)];
  });
}

}  // namespace kvlab
