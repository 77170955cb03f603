#pragma once
// The vmm backend's prefix-cache index: which physical pages hold the KV of which prompt prefix
// (docs/vmm.md, "Page-granular prefix sharing").
#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "vmm/page_pool.hpp"

namespace kvlab {

// Design note
//
// Rationale. The paged backend's hash mode (paged/prefix_hash.hpp, vLLM v1) keys each full block
// of a prompt by a chained hash of its token ids. The vmm backend can share the same way, at page
// granularity: a "block" here is the smallest run of whole page rows that holds whole tokens
// (`block_tokens` tokens, `pages_per_block` pages: G rows x T tensors), and an entry names the
// physical pages that hold it. A page sits at the same (row, tensor) position in every slot that
// maps it, so an entry's pages can be mapped into any other slot at the same offsets.
//
// Approach. Same key and the same exact verification as HashPrefixCache (the hash is
// paged/prefix_hash's hash_block): key_i = H(key_{i-1}, ids of block i), extra keys mixed into
// block 0; a candidate is accepted only if its stored ids equal the block's and its parent is the
// entry matched one step earlier in the same generation (bumped when an entry is dropped), so a
// 64-bit collision or a stale child never shares wrong KV. Entries are numbered by the index
// (recycled ids); page -> entry is kept per page, so the backend can drop the entry of a page it
// is about to overwrite (forget_page) in O(1). A page is in at most one entry.
//
// Limitations. Not thread-safe (the backend's mutex guards it). Only whole blocks are indexed.
class PagePrefixIndex {
 public:
  PagePrefixIndex(std::int64_t num_pages, std::int64_t block_tokens, std::int64_t pages_per_block);

  /// Entry ids of the longest verified chain over the first `max_blocks` blocks of `tokens` (which
  /// holds at least max_blocks * block_tokens ids). No side effects.
  [[nodiscard]] std::vector<std::int32_t> match(std::span<const std::int32_t> tokens,
                                                std::span<const std::int64_t> extra, std::int64_t max_blocks) const;
  /// Enters blocks [from, to) of a sequence whose block from-1 is entry `parent` (-1 when from is
  /// 0). `pages(i, out)` fills block i's pages (pages_per_block of them, none indexed). Stops at
  /// the first block whose content is already cached under another entry (those pages stay
  /// private). Returns the number of blocks entered.
  std::int64_t insert(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra, std::int32_t parent,
                      std::int64_t from, std::int64_t to,
                      const std::function<void(std::int64_t, std::span<PageId>)>& pages);
  /// Drops the entry holding `page`, if any (its bytes are about to change). True when it had one.
  bool forget_page(PageId page);

  [[nodiscard]] std::int32_t entry_of(PageId page) const noexcept { return page_entry_[static_cast<std::size_t>(page)]; }
  [[nodiscard]] std::span<const PageId> pages(std::int32_t entry) const noexcept;
  [[nodiscard]] std::int64_t block_tokens() const noexcept { return block_tokens_; }
  [[nodiscard]] std::int64_t pages_per_block() const noexcept { return pages_per_block_; }
  [[nodiscard]] std::size_t num_entries() const noexcept { return table_.size(); }
  /// Called with every page that loses its entry (forget_page or a stale entry dropped by insert).
  void set_on_unindex(std::function<void(PageId)> hook) { on_unindex_ = std::move(hook); }

 private:
  struct Entry {
    bool cached = false;
    std::uint64_t key = 0;
    std::uint32_t gen = 0;
    std::int32_t parent = -1;
    std::uint32_t parent_gen = 0;
    std::vector<std::int32_t> tokens;
    std::vector<std::int64_t> extra;  // first blocks only
  };
  [[nodiscard]] bool verifies(std::int32_t e, std::span<const std::int32_t> block, std::int32_t parent,
                              std::span<const std::int64_t> extra) const;
  void forget(std::int32_t e);

  std::int64_t block_tokens_, pages_per_block_;
  std::vector<Entry> entries_;
  std::vector<PageId> entry_pages_;  // [entry][pages_per_block]
  std::vector<std::int32_t> free_ids_;
  std::unordered_map<std::uint64_t, std::int32_t> table_;
  std::vector<std::int32_t> page_entry_;  // [page] -> entry or -1
  std::function<void(PageId)> on_unindex_;
};

}  // namespace kvlab
