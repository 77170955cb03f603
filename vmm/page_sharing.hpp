#pragma once
// Page-granular prefix sharing for the vmm backend: which mapped pages running sequences need
// (pins), and which pages hold the KV of which prompt prefix (docs/vmm.md, "Page-granular prefix
// sharing").
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "alloc/backend/chained_prefix_index.hpp"
#include "alloc/backend/kv_backend.hpp"
#include "vmm/slot_arena.hpp"

namespace kvlab {

// Design note
//
// Rationale. vAttention gives every sequence its own slot, so sharing a prompt prefix cannot
// mean pointing two block tables at one block; it means mapping one physical page at the same
// (row, tensor) position of several slots. The arena counts those mappings; what it cannot know
// is which of them a *running* sequence needs (the rest can be unmapped to reclaim memory) and
// which pages still hold a prefix some later prompt may hit. This class keeps those two books.
//
// Approach.
//  * Pins: a page's pin count is the number of running sequences whose length needs it. Needed
//    pages (pinned at least once) can never be reclaimed; shared_excess (the sum of pins - 1)
//    is what sharing saves, so the accounting counts a shared page's token states once. Without
//    the prefix cache no page is ever in two slots and a row of T pages is simply counted.
//  * The index: a block is the fewest whole rows that hold whole tokens (lcm(page, token bytes)
//    bytes: G rows, 1 whenever a token divides the page); the chained prefix index
//    (alloc/backend/chained_prefix_index.hpp) names the G x T pages holding each cached block. A block is
//    entered as soon as it is complete and its token ids are known (vLLM v1's rule): the prompt's
//    at admit, then whatever growth completes (later prefill chunks; decode when the spec's ids
//    cover the generated tokens). Only whole rows below every holder's length are entered, and
//    nobody writes into them again, so sharing needs no copy-on-write. Each slot keeps a copy of
//    its sequence's ids and how many leading blocks are cached.
//  * A free page keeps its entry until the pool (LRU order) hands it out again (allocate_fresh
//    drops it: an eviction); a hit on a free page takes it back out of the pool (take_for_mapping).
//    free_indexed counts free pages that still hold an entry, kept exact through the arena's
//    page-freed hook and the index's unindex hook.
//
// Limitations. Not thread-safe (the backend's mutex guards it). Shares whole blocks only; a
// partial last block is always recomputed. A forked child enters nothing (its own tokens are
// unknown), and a sequence stops entering at a block whose content another entry already holds.
// Must not outlive the arena.
class PageSharing {
 public:
  using EntryId = ChainedPrefixIndex::EntryId;

  /// `prefix_cache` false: pins only count needed pages; nothing is indexed. `token_bytes`: one
  /// token in one tensor.
  PageSharing(SlotArena& arena, bool prefix_cache, std::size_t token_bytes);
  PageSharing(const PageSharing&) = delete;
  PageSharing& operator=(const PageSharing&) = delete;

  [[nodiscard]] bool enabled() const noexcept { return index_ != nullptr; }

  // --- pins: the pages running sequences need ---

  /// The sequence in `slot` needed rows [0, from) and now needs rows [0, to) (mapped in every tensor).
  void set_needed_rows(int slot, std::int64_t from, std::int64_t to) noexcept;
  /// Distinct pages running sequences need.
  [[nodiscard]] std::int64_t needed_pages() const noexcept { return needed_pages_; }
  /// Running sequences needing `page` (prefix cache only).
  [[nodiscard]] std::int32_t pins(PageId page) const noexcept { return pins_[static_cast<std::size_t>(page)]; }
  /// Sum over pages of max(0, pins - 1): pages sharing saved.
  [[nodiscard]] std::int64_t shared_excess() const noexcept { return shared_excess_; }
  /// Pages two or more running sequences need.
  [[nodiscard]] std::int64_t shared_pages() const noexcept;

  // --- the prefix index ---

  /// Tokens and page rows of one block (0 without the prefix cache).
  [[nodiscard]] std::int64_t block_tokens() const noexcept { return block_tokens_; }
  [[nodiscard]] std::int64_t block_rows() const noexcept { return block_rows_; }
  /// Entries of the longest cached prefix an admission of `spec` with `initial_tokens` can use:
  /// whole blocks of the first min(prompt, initial) - 1 tokens (the last prompt token is always
  /// computed). Empty without the prefix cache or token ids. No side effects.
  [[nodiscard]] std::vector<EntryId> cached_prefix(const SequenceSpec& spec, std::int64_t initial_tokens) const;
  /// The pages of `hit`'s entries, [row * tensors + tensor].
  [[nodiscard]] std::vector<PageId> pages_of(std::span<const EntryId> hit) const;
  /// Whether `page` holds an index entry.
  [[nodiscard]] bool indexed(PageId page) const noexcept { return index_ && index_->entry_of(page) >= 0; }
  /// After an admission of `spec` into `slot` that hit `hit`: keeps the spec's token ids for the
  /// slot, enters the complete blocks of the first `initial_tokens` after the hit (their KV is
  /// written by this step) and counts the lookup.
  void enter_prompt(const SequenceSpec& spec, std::int64_t initial_tokens, std::span<const EntryId> hit, int slot,
                    std::int64_t lookup_ns);
  /// The sequence in `slot` now holds `length` tokens: enters the blocks that became complete.
  void grew(int slot, std::int64_t length);
  /// The sequence in `slot` ended (or the slot starts a fork): it enters nothing more.
  void end_sequence(int slot);
  /// A page from the pool for new KV (whatever prefix it cached is gone: an eviction); kNoPage
  /// when none is free. Inline, like the pool's allocate_page(): called once per page mapped.
  [[nodiscard]] PageId allocate_fresh() {
    const PageId page = arena_->pool().allocate_page();
    if (page != kNoPage && index_ && index_->forget_unit(page)) ++stats_.evictions;  // reused: its prefix is gone
    return page;
  }
  /// allocate_fresh() for each of `out` (the same pages, in order): false, with nothing taken,
  /// when the pool holds fewer.
  [[nodiscard]] bool allocate_fresh(std::span<PageId> out) {
    if (!arena_->pool().allocate_pages(out)) return false;
    if (index_)
      for (const PageId page : out) stats_.evictions += index_->forget_unit(page) ? 1 : 0;
    return true;
  }
  /// `page`, which holds KV, is about to be mapped again: a free one leaves the pool.
  void take_for_mapping(PageId page);
  [[nodiscard]] const PrefixCacheStats& stats() const noexcept { return stats_; }
  /// Free pages that still hold an index entry (KV a later prompt may hit).
  [[nodiscard]] std::int64_t free_indexed() const noexcept { return free_indexed_; }

 private:
  void pin(PageId page) noexcept;
  void unpin(PageId page) noexcept;
  /// Enters the complete blocks of the first `length` tokens of `slot` from its frontier on.
  void enter_complete(int slot, std::int64_t length);

  struct SlotCache {                  // what a running sequence can still enter
    std::vector<std::int32_t> ids;    // its known token ids (prompt, then generated where given)
    std::vector<std::int64_t> extra;  // its extra keys
    std::int64_t entered = 0;         // leading blocks cached (hit or entered)
    bool caching = false;
  };

  SlotArena* arena_;
  std::vector<std::int32_t> pins_;  // [page] running sequences needing it (prefix cache only)
  std::int64_t needed_pages_ = 0;
  std::int64_t shared_excess_ = 0;
  std::int64_t free_indexed_ = 0;
  std::int64_t block_tokens_ = 0, block_rows_ = 0;
  std::unique_ptr<ChainedPrefixIndex> index_;
  std::vector<SlotCache> slot_cache_;  // [slot], prefix cache only
  PrefixCacheStats stats_;
};

}  // namespace kvlab
