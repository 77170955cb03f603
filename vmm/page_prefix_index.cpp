#include "vmm/page_prefix_index.hpp"

#include <algorithm>

#include "alloc/error.hpp"
#include "paged/prefix_hash.hpp"

namespace kvlab {

PagePrefixIndex::PagePrefixIndex(std::int64_t num_pages, std::int64_t block_tokens, std::int64_t pages_per_block)
    : block_tokens_(block_tokens), pages_per_block_(pages_per_block) {
  KVLAB_EXPECTS(block_tokens > 0 && pages_per_block > 0, "prefix index blocks must be positive");
  page_entry_.assign(static_cast<std::size_t>(num_pages), -1);
}

std::span<const PageId> PagePrefixIndex::pages(std::int32_t entry) const noexcept {
  return {entry_pages_.data() + static_cast<std::size_t>(entry) * static_cast<std::size_t>(pages_per_block_),
          static_cast<std::size_t>(pages_per_block_)};
}

bool PagePrefixIndex::verifies(std::int32_t e, std::span<const std::int32_t> block, std::int32_t parent,
                               std::span<const std::int64_t> extra) const {
  const Entry& x = entries_[static_cast<std::size_t>(e)];
  if (!x.cached || x.parent != parent) return false;
  if (parent >= 0) {
    if (x.parent_gen != entries_[static_cast<std::size_t>(parent)].gen) return false;
  } else if (!std::ranges::equal(x.extra, extra)) {
    return false;
  }
  return std::ranges::equal(x.tokens, block);
}

std::vector<std::int32_t> PagePrefixIndex::match(std::span<const std::int32_t> tokens,
                                                 std::span<const std::int64_t> extra, std::int64_t max_blocks) const {
  std::vector<std::int32_t> out;
  std::uint64_t key = 0;
  std::int32_t parent = -1;
  const auto bt = static_cast<std::size_t>(block_tokens_);
  for (std::int64_t i = 0; i < max_blocks; ++i) {
    const auto blk = tokens.subspan(static_cast<std::size_t>(i) * bt, bt);
    key = hash_block(key, blk, i == 0 ? extra : std::span<const std::int64_t>{});
    const auto it = table_.find(key);
    if (it == table_.end() || !verifies(it->second, blk, parent, extra)) break;
    parent = it->second;
    out.push_back(parent);
  }
  return out;
}

std::int64_t PagePrefixIndex::insert(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                     std::int32_t parent, std::int64_t from, std::int64_t to,
                                     const std::function<void(std::int64_t, std::span<PageId>)>& pages) {
  const auto bt = static_cast<std::size_t>(block_tokens_);
  const auto ppb = static_cast<std::size_t>(pages_per_block_);
  KVLAB_ASSERT((from == 0) == (parent < 0));
  std::uint64_t key = parent >= 0 ? entries_[static_cast<std::size_t>(parent)].key : 0;
  std::vector<PageId> buf(ppb);
  std::int64_t entered = 0;
  for (std::int64_t i = from; i < to; ++i) {
    const auto blk = tokens.subspan(static_cast<std::size_t>(i) * bt, bt);
    const std::span<const std::int64_t> salt = i == 0 ? extra : std::span<const std::int64_t>{};
    key = hash_block(key, blk, salt);
    if (const auto it = table_.find(key); it != table_.end()) {
      if (verifies(it->second, blk, parent, extra)) break;  // already cached elsewhere: keep ours private
      forget(it->second);  // a stale entry (its parent was dropped) or a true 64-bit collision
    }
    pages(i, buf);
    std::int32_t e;
    if (!free_ids_.empty()) {
      e = free_ids_.back();
      free_ids_.pop_back();
    } else {
      e = static_cast<std::int32_t>(entries_.size());
      entries_.emplace_back();
      entry_pages_.resize(entry_pages_.size() + ppb);
    }
    Entry& x = entries_[static_cast<std::size_t>(e)];
    x.cached = true;
    x.key = key;
    x.parent = parent;
    x.parent_gen = parent >= 0 ? entries_[static_cast<std::size_t>(parent)].gen : 0;
    x.tokens.assign(blk.begin(), blk.end());
    x.extra.assign(salt.begin(), salt.end());
    std::copy(buf.begin(), buf.end(), entry_pages_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(e) * ppb));
    for (const PageId p : buf) {
      KVLAB_ASSERT(page_entry_[static_cast<std::size_t>(p)] < 0);
      page_entry_[static_cast<std::size_t>(p)] = e;
    }
    table_.emplace(key, e);
    parent = e;
    ++entered;
  }
  return entered;
}

void PagePrefixIndex::forget(std::int32_t e) {
  Entry& x = entries_[static_cast<std::size_t>(e)];
  KVLAB_ASSERT(x.cached);
  const auto it = table_.find(x.key);
  KVLAB_ASSERT(it != table_.end() && it->second == e);
  table_.erase(it);
  x.cached = false;
  ++x.gen;
  x.tokens.clear();
  x.extra.clear();
  for (const PageId p : pages(e)) {
    page_entry_[static_cast<std::size_t>(p)] = -1;
    if (on_unindex_) on_unindex_(p);
  }
  free_ids_.push_back(e);
}

bool PagePrefixIndex::forget_page(PageId page) {
  const std::int32_t e = page_entry_[static_cast<std::size_t>(page)];
  if (e < 0) return false;
  forget(e);
  return true;
}

}  // namespace kvlab
