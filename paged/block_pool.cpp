#include "paged/block_pool.hpp"

#include <string>

#include "alloc/error.hpp"

namespace kvlab {

BlockPool::BlockPool(std::int32_t num_blocks) {
  KVLAB_EXPECTS(num_blocks >= 1, "a block pool needs at least one block (got " + std::to_string(num_blocks) + ")");
  refs_.assign(static_cast<std::size_t>(num_blocks), 0);
  free_.reserve(static_cast<std::size_t>(num_blocks));
  for (BlockId b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<BlockId> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  const BlockId b = free_.back();
  free_.pop_back();
  refs_[static_cast<std::size_t>(b)] = 1;
  return b;
}

void BlockPool::check(BlockId b) const {
  KVLAB_EXPECTS(b >= 0 && b < num_blocks(), "block " + std::to_string(b) + " is out of range");
  KVLAB_EXPECTS(refs_[static_cast<std::size_t>(b)] > 0, "block " + std::to_string(b) + " is not allocated");
}

void BlockPool::add_ref(BlockId b) {
  check(b);
  ++refs_[static_cast<std::size_t>(b)];
}

bool BlockPool::release(BlockId b) {
  check(b);
  if (--refs_[static_cast<std::size_t>(b)] > 0) return false;
  free_.push_back(b);
  return true;
}

std::int32_t BlockPool::ref_count(BlockId b) const {
  KVLAB_EXPECTS(b >= 0 && b < num_blocks(), "block " + std::to_string(b) + " is out of range");
  return refs_[static_cast<std::size_t>(b)];
}

}  // namespace kvlab
