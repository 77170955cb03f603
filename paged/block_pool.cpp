#include "paged/block_pool.hpp"

#include <algorithm>
#include <string>

#include "alloc/core/error.hpp"

namespace kvlab {

BlockPool::BlockPool(std::int32_t num_blocks, FreeOrder order, std::int32_t region_blocks, PagePlacement placement)
    : order_(order), region_blocks_(region_blocks), placement_(placement) {
  KVLAB_EXPECTS(placement == PagePlacement::fullest || order == FreeOrder::pages,
                "local and spread placement need the page-aware order");
  KVLAB_EXPECTS(num_blocks >= 1, "a block pool needs at least one block (got " + std::to_string(num_blocks) + ")");
  KVLAB_EXPECTS(region_blocks >= 1,
                "a block pool's regions need at least one block (got " + std::to_string(region_blocks) + ")");
  refs_.assign(static_cast<std::size_t>(num_blocks), 0);
  cached_.assign(refs_.size(), 0);
  if (page_order()) {
    KVLAB_EXPECTS(num_blocks % region_blocks == 0, "a paged pool over pages needs whole page groups (" +
                                                       std::to_string(num_blocks) + " blocks, " +
                                                       std::to_string(region_blocks) + " a group)");
    const auto regions = static_cast<std::size_t>(num_blocks / region_blocks);
    region_free_.assign(regions, region_blocks);  // every region closed, so all free
    open_.assign(regions, 0);
    listed_.assign(regions, 0);
    emptied_.reserve(regions);  // one entry per region at most: push_back never reallocates
    if (order_ == FreeOrder::pages_lifo) {
      prev_.assign(refs_.size(), -1);
      next_.assign(refs_.size(), -1);
    } else {
      rhead_.assign(regions, -1);
      rnext_.assign(refs_.size(), -1);
      bhead_.assign(static_cast<std::size_t>(region_blocks) + 1, -1);
      bprev_.assign(regions, -1);
      bnext_.assign(regions, -1);
    }
    num_free_ = num_blocks;
  } else if (order_ == FreeOrder::region) {
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
  if (!page_order()) {
    list_insert(b);
    return;
  }
  const std::int32_t r = region_of(b);
  KVLAB_ASSERT(open_[static_cast<std::size_t>(r)] != 0);  // a closed region's blocks are never handed out
  std::int32_t& n = region_free_[static_cast<std::size_t>(r)];
  if (order_ == FreeOrder::pages_lifo) {
    list_insert(b);
  } else {
    rnext_[static_cast<std::size_t>(b)] = rhead_[static_cast<std::size_t>(r)];
    rhead_[static_cast<std::size_t>(r)] = b;
    rebucket(r, n, n + 1);
  }
  ++n;
  ++num_open_free_;
  if (region_free_[static_cast<std::size_t>(r)] == region_blocks_) {
    ++num_open_empty_;
    if (listed_[static_cast<std::size_t>(r)] == 0) {
      emptied_.push_back(r);  // within the capacity reserved for every region
      listed_[static_cast<std::size_t>(r)] = 1;
    }
  }
}

void BlockPool::list_insert(BlockId b) {
  const auto i = static_cast<std::size_t>(b);
  if (order_ == FreeOrder::pages_lifo) {  // at the head: handed out next
    prev_[i] = -1;
    next_[i] = head_;
    if (head_ >= 0)
      prev_[static_cast<std::size_t>(head_)] = b;
    else
      tail_ = b;
    head_ = b;
    return;
  }
  prev_[i] = tail_;
  next_[i] = -1;
  if (tail_ >= 0)
    next_[static_cast<std::size_t>(tail_)] = b;
  else
    head_ = b;
  tail_ = b;
}

void BlockPool::list_remove(BlockId b) {
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
}

void BlockPool::unlink(BlockId b) {
  list_remove(b);
  --num_free_;
  num_free_cached_ -= cached_[static_cast<std::size_t>(b)];
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
      regions_.insert({region_key(1), r});
    } catch (...) {
      free_set_.erase(at);
      throw;
    }
  } else {
    auto node = regions_.extract({region_key(n), r});
    node.value().first = region_key(n + 1);
    regions_.insert(std::move(node));
  }
  ++n;
}

void BlockPool::region_erase(BlockId b) {
  const std::int32_t r = b / region_blocks_;
  std::int32_t& n = region_free_[static_cast<std::size_t>(r)];
  auto node = regions_.extract({region_key(n), r});  // re-keyed in place: no allocation
  if (--n > 0) {
    node.value().first = region_key(n);
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

void BlockPool::rebucket(std::int32_t r, std::int32_t from, std::int32_t to) noexcept {
  const auto i = static_cast<std::size_t>(r);
  if (from > 0) {  // unlink from bucket `from`
    if (bprev_[i] >= 0)
      bnext_[static_cast<std::size_t>(bprev_[i])] = bnext_[i];
    else
      bhead_[static_cast<std::size_t>(from)] = bnext_[i];
    if (bnext_[i] >= 0) bprev_[static_cast<std::size_t>(bnext_[i])] = bprev_[i];
  }
  bprev_[i] = bnext_[i] = -1;
  if (to > 0) {  // at the head of bucket `to`
    const std::int32_t head = bhead_[static_cast<std::size_t>(to)];
    bnext_[i] = head;
    if (head >= 0) bprev_[static_cast<std::size_t>(head)] = r;
    bhead_[static_cast<std::size_t>(to)] = r;
    bmin_ = std::min(bmin_, to);
  }
}

std::int32_t BlockPool::fullest_region() const noexcept {
  if (num_open_free_ == 0) return -1;
  while (bhead_[static_cast<std::size_t>(bmin_)] < 0) ++bmin_;  // some bucket holds a region
  return bhead_[static_cast<std::size_t>(bmin_)];
}

std::int32_t BlockPool::fullest_region_with(std::int32_t n) const noexcept {
  for (std::int32_t k = std::max(n, 1); k <= region_blocks_; ++k)
    if (bhead_[static_cast<std::size_t>(k)] >= 0) return bhead_[static_cast<std::size_t>(k)];
  return -1;
}

std::int32_t BlockPool::emptiest_region() const noexcept {
  if (num_open_free_ == 0) return -1;
  for (std::int32_t k = region_blocks_; k >= 1; --k)
    if (bhead_[static_cast<std::size_t>(k)] >= 0) return bhead_[static_cast<std::size_t>(k)];
  return -1;
}

std::int32_t BlockPool::placed_region(BlockId near, std::int32_t run) const noexcept {
  if (run > 0) return fullest_region_with(run);  // none holds the whole run: the fullest
  if (near >= 0) {
    const auto r = static_cast<std::size_t>(region_of(near));
    if (open_[r] != 0 && region_free_[r] > 0) return static_cast<std::int32_t>(r);
  }
  return placement_ == PagePlacement::spread && near >= 0 ? emptiest_region() : -1;
}

std::optional<BlockId> BlockPool::peek() const noexcept {
  if (order_ == FreeOrder::pages) {
    const std::int32_t r = fullest_region();
    if (r < 0) return std::nullopt;
    return rhead_[static_cast<std::size_t>(r)];
  }
  if (order_ == FreeOrder::pages_lifo) return head_ >= 0 ? std::optional<BlockId>(head_) : std::nullopt;
  if (num_free_ == 0) return std::nullopt;
  if (order_ == FreeOrder::region) return region_pick(-1);
  return order_ == FreeOrder::lifo ? free_.back() : head_;
}

std::optional<BlockId> BlockPool::allocate_in(std::int32_t r) {
  KVLAB_EXPECTS(order_ == FreeOrder::pages, "allocate_in() needs the page-aware order");
  KVLAB_EXPECTS(r >= 0 && r < num_regions(), "region " + std::to_string(r) + " is out of range");
  if (open_[static_cast<std::size_t>(r)] == 0 || region_free_[static_cast<std::size_t>(r)] == 0) return std::nullopt;
  return take_page_block(rhead_[static_cast<std::size_t>(r)]);
}

BlockId BlockPool::take_page_block(BlockId b) {
  const auto r = static_cast<std::size_t>(region_of(b));
  if (region_free_[r] == region_blocks_) --num_open_empty_;
  if (order_ == FreeOrder::pages) {
    rhead_[r] = rnext_[static_cast<std::size_t>(b)];
    rebucket(static_cast<std::int32_t>(r), region_free_[r], region_free_[r] - 1);
    --num_free_;
    num_free_cached_ -= cached_[static_cast<std::size_t>(b)];
  } else {
    unlink(b);
  }
  --region_free_[r];
  --num_open_free_;
  refs_[static_cast<std::size_t>(b)] = 1;
  return b;
}

std::optional<BlockId> BlockPool::allocate(BlockId near, std::int32_t run) {
  KVLAB_EXPECTS(near >= -1 && near < num_blocks(), "block " + std::to_string(near) + " is out of range");
  KVLAB_EXPECTS(run >= 0, "a run of " + std::to_string(run) + " blocks");
  if (placement_ != PagePlacement::fullest && num_open_free_ > 0)
    if (const std::int32_t r = placed_region(near, run); r >= 0)
      return take_page_block(rhead_[static_cast<std::size_t>(r)]);
  if (page_order()) {
    const std::optional<BlockId> pick = peek();
    if (!pick) return std::nullopt;
    return take_page_block(*pick);
  }
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

void BlockPool::open_region(std::int32_t r) {
  KVLAB_EXPECTS(page_order(), "open_region() needs a page order");
  KVLAB_EXPECTS(r >= 0 && r < num_regions(), "region " + std::to_string(r) + " is out of range");
  KVLAB_EXPECTS(open_[static_cast<std::size_t>(r)] == 0, "region " + std::to_string(r) + " is open already");
  const BlockId first = r * region_blocks_, end = first + region_blocks_;
  if (order_ == FreeOrder::pages) {
    for (BlockId b = end - 1; b >= first; --b) {  // the lowest on top
      rnext_[static_cast<std::size_t>(b)] = rhead_[static_cast<std::size_t>(r)];
      rhead_[static_cast<std::size_t>(r)] = b;
    }
    rebucket(r, 0, region_blocks_);
  } else {
    for (BlockId b = end - 1; b >= first; --b) list_insert(b);  // the lowest at the head
  }
  open_[static_cast<std::size_t>(r)] = 1;
  ++num_open_;
  ++num_open_empty_;
  num_open_free_ += region_blocks_;
}

void BlockPool::close_region(std::int32_t r) {
  KVLAB_EXPECTS(page_order(), "close_region() needs a page order");
  KVLAB_EXPECTS(r >= 0 && r < num_regions() && open_[static_cast<std::size_t>(r)] != 0,
                "region " + std::to_string(r) + " is not open");
  KVLAB_EXPECTS(region_free_[static_cast<std::size_t>(r)] == region_blocks_,
                "region " + std::to_string(r) + " still has blocks in use");
  const BlockId first = r * region_blocks_, end = first + region_blocks_;
  if (order_ == FreeOrder::pages) {
    rebucket(r, region_blocks_, 0);
    rhead_[static_cast<std::size_t>(r)] = -1;
  } else {
    for (BlockId b = first; b < end; ++b) list_remove(b);
  }
  open_[static_cast<std::size_t>(r)] = 0;
  --num_open_;
  --num_open_empty_;
  num_open_free_ -= region_blocks_;
}

std::vector<std::int32_t> BlockPool::take_emptied() {
  std::vector<std::int32_t> out;
  for (const std::int32_t r : emptied_) {
    const auto i = static_cast<std::size_t>(r);
    listed_[i] = 0;
    if (open_[i] != 0 && region_free_[i] == region_blocks_) out.push_back(r);
  }
  emptied_.clear();
  return out;
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
  } else if (order_ == FreeOrder::pages) {  // ascending: the order depends on the regions' counts
    for (std::size_t r = 0; r < rhead_.size(); ++r)
      for (BlockId b = rhead_[r]; b >= 0; b = rnext_[static_cast<std::size_t>(b)]) out.push_back(b);
    std::sort(out.begin(), out.end());
  } else {
    for (BlockId b = head_; b >= 0; b = next_[static_cast<std::size_t>(b)]) out.push_back(b);
  }
  return out;
}

}  // namespace kvlab
