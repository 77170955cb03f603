#include "paged/block_pool.hpp"

#include <algorithm>
#include <string>

#include "alloc/core/error.hpp"

namespace kvlab {

BlockPool::BlockPool(std::int32_t num_blocks, FreeOrder order, std::int32_t region_blocks)
    : order_(order), region_blocks_(region_blocks) {
  KVLAB_EXPECTS(num_blocks >= 1, "a block pool needs at least one block (got " + std::to_string(num_blocks) + ")");
  KVLAB_EXPECTS(region_blocks >= 1,
                "a block pool's regions need at least one block (got " + std::to_string(region_blocks) + ")");
  refs_.assign(static_cast<std::size_t>(num_blocks), 0);
  cached_.assign(refs_.size(), 0);
  if (order_ == FreeOrder::region) {
    region_free_.assign(static_cast<std::size_t>((num_blocks - 1) / region_blocks_ + 1), 0);
    for (BlockId b = 0; b < num_blocks; ++b) push_free(b);
  } else if (order_ == FreeOrder::lifo) {
    free_.reserve(static_cast<std::size_t>(num_blocks));
    for (BlockId b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
    num_free_ = num_blocks;
  } else {
    prev_.assign(refs_.size(), -1);
    next_.assign(refs_.size(), -1);
    for (BlockId b = 0; b < num_blocks; ++b) push_free(b);  // low ids handed out first
  }
}

void BlockPool::push_free(BlockId b) {
  if (order_ == FreeOrder::region) region_insert(b);  // first: the one step that can throw
  ++num_free_;
  num_free_cached_ += cached_[static_cast<std::size_t>(b)];
  if (order_ == FreeOrder::lifo) {
    free_.push_back(b);  // within the capacity reserved for every block: never reallocates
    return;
  }
  if (order_ == FreeOrder::region) return;
  const auto i = static_cast<std::size_t>(b);
  prev_[i] = tail_;
  next_[i] = -1;
  if (tail_ >= 0)
    next_[static_cast<std::size_t>(tail_)] = b;
  else
    head_ = b;
  tail_ = b;
}

void BlockPool::unlink(BlockId b) {
  const auto i = static_cast<std::size_t>(b);
  if (prev_[i] >= 0)
    next_[static_cast<std::size_t>(prev_[i])] = next_[i];
  else
    head_ = next_[i];
  if (next_[i] >= 0)
    prev_[static_cast<std::size_t>(next_[i])] = prev_[i];
  else
    tail_ = prev_[i];
  prev_[i] = next_[i] = -1;
  --num_free_;
  num_free_cached_ -= cached_[i];
}

void BlockPool::region_insert(BlockId b) {
  // Strong guarantee: the only allocations (a free-set node, and a node for a region that had no
  // free block) come before anything changes or are undone; re-keying a region moves its node.
  const std::int32_t r = b / region_blocks_;
  std::int32_t& n = region_free_[static_cast<std::size_t>(r)];
  const auto [at, inserted] = free_set_.insert(b);
  KVLAB_ASSERT(inserted);
  if (n == 0) {
    try {
      regions_.insert({-1, r});
    } catch (...) {
      free_set_.erase(at);
      throw;
    }
  } else {
    auto node = regions_.extract({-n, r});
    node.value().first = -(n + 1);
    regions_.insert(std::move(node));
  }
  ++n;
}

void BlockPool::region_erase(BlockId b) {
  const std::int32_t r = b / region_blocks_;
  std::int32_t& n = region_free_[static_cast<std::size_t>(r)];
  auto node = regions_.extract({-n, r});  // re-keyed in place: no allocation
  if (--n > 0) {
    node.value().first = -n;
    regions_.insert(std::move(node));
  }
  free_set_.erase(b);
  --num_free_;
  num_free_cached_ -= cached_[static_cast<std::size_t>(b)];
}

BlockId BlockPool::region_pick(BlockId near) const {
  if (near >= 0) {
    const auto end = static_cast<BlockId>(
        std::min<std::int64_t>(num_blocks(), (static_cast<std::int64_t>(near) / region_blocks_ + 1) * region_blocks_));
    if (const auto it = free_set_.upper_bound(near); it != free_set_.end() && *it < end) return *it;
  }
  // The region with the most free blocks (the lowest such region), its lowest free block.
  return *free_set_.lower_bound(regions_.begin()->second * region_blocks_);
}

std::optional<BlockId> BlockPool::peek() const noexcept {
  if (num_free_ == 0) return std::nullopt;
  if (order_ == FreeOrder::region) return region_pick(-1);
  return order_ == FreeOrder::lifo ? free_.back() : head_;
}

std::optional<BlockId> BlockPool::allocate(BlockId near) {
  KVLAB_EXPECTS(near >= -1 && near < num_blocks(), "block " + std::to_string(near) + " is out of range");
  if (num_free_ == 0) return std::nullopt;
  BlockId b;
  if (order_ == FreeOrder::region) {
    b = region_pick(near);
    region_erase(b);
  } else if (order_ == FreeOrder::lifo) {
    b = free_.back();
    free_.pop_back();
    --num_free_;
    num_free_cached_ -= cached_[static_cast<std::size_t>(b)];
  } else {
    b = head_;
    unlink(b);
  }
  refs_[static_cast<std::size_t>(b)] = 1;
  return b;
}

void BlockPool::take(BlockId b) {
  KVLAB_EXPECTS(order_ == FreeOrder::lru, "take() needs the lru free order");
  KVLAB_EXPECTS(b >= 0 && b < num_blocks(), "block " + std::to_string(b) + " is out of range");
  KVLAB_EXPECTS(refs_[static_cast<std::size_t>(b)] == 0, "block " + std::to_string(b) + " is not free");
  unlink(b);
  refs_[static_cast<std::size_t>(b)] = 1;
}

void BlockPool::set_cached(BlockId b, bool cached) {
  KVLAB_EXPECTS(b >= 0 && b < num_blocks(), "block " + std::to_string(b) + " is out of range");
  const auto i = static_cast<std::size_t>(b);
  const auto mark = static_cast<std::uint8_t>(cached ? 1 : 0);
  if (cached_[i] == mark) return;
  if (refs_[i] == 0) num_free_cached_ += cached ? 1 : -1;
  cached_[i] = mark;
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
  std::int32_t& refs = refs_[static_cast<std::size_t>(b)];
  if (refs > 1) {
    --refs;
    return false;
  }
  push_free(b);  // region order may throw (out of memory) here, and then nothing has changed
  refs = 0;
  return true;
}

std::int32_t BlockPool::ref_count(BlockId b) const {
  KVLAB_EXPECTS(b >= 0 && b < num_blocks(), "block " + std::to_string(b) + " is out of range");
  return refs_[static_cast<std::size_t>(b)];
}

std::vector<BlockId> BlockPool::free_list() const {
  std::vector<BlockId> out;
  out.reserve(static_cast<std::size_t>(num_free_));
  if (order_ == FreeOrder::lifo) {
    out.assign(free_.rbegin(), free_.rend());
  } else if (order_ == FreeOrder::region) {
    for (const BlockId b : free_set_) out.push_back(b);
  } else {
    for (BlockId b = head_; b >= 0; b = next_[static_cast<std::size_t>(b)]) out.push_back(b);
  }
  return out;
}

}  // namespace kvlab
