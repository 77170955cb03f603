#include "vmm/page_sharing.hpp"

#include <algorithm>
#include <numeric>

namespace kvlab {

PageSharing::PageSharing(SlotArena& arena, bool prefix_cache, std::size_t token_bytes) : arena_(&arena) {
  if (!prefix_cache) return;
  const std::int64_t num_pages = arena.pool().num_pages();
  pins_.assign(static_cast<std::size_t>(num_pages), 0);
  const std::size_t unit = std::lcm(arena.page_bytes(), token_bytes);
  block_rows_ = static_cast<std::int64_t>(unit / arena.page_bytes());
  block_tokens_ = static_cast<std::int64_t>(unit / token_bytes);
  index_ = std::make_unique<ChainedPrefixIndex>(num_pages, block_tokens_, block_rows_ * arena.num_tensors());
  slot_cache_.resize(static_cast<std::size_t>(arena.num_slots()));
  index_->set_on_unindex([this](PageId p) {
    if (arena_->mappings(p) == 0) --free_indexed_;  // a free (or just allocated) page lost its entry
  });
  arena.set_on_page_freed([this](PageId p) {
    if (index_->entry_of(p) >= 0) ++free_indexed_;  // it keeps its entry until handed out again
  });
}

void PageSharing::pin(PageId page) noexcept {
  if (pins_[static_cast<std::size_t>(page)]++ == 0) {
    ++needed_pages_;
  } else {
    ++shared_excess_;
  }
}

void PageSharing::unpin(PageId page) noexcept {
  if (--pins_[static_cast<std::size_t>(page)] == 0) {
    --needed_pages_;
  } else {
    --shared_excess_;
  }
}

void PageSharing::set_needed_rows(int slot, std::int64_t from, std::int64_t to) noexcept {
  if (!enabled()) {  // no page is ever in two slots: T pages a row
    needed_pages_ += static_cast<std::int64_t>(arena_->num_tensors()) * (to - from);
    return;
  }
  for (int t = 0; t < arena_->num_tensors(); ++t) {
    const PageColumn pages = arena_->pages(slot, t);
    for (std::int64_t r = from; r < to; ++r) pin(pages[static_cast<std::size_t>(r)]);
    for (std::int64_t r = to; r < from; ++r) unpin(pages[static_cast<std::size_t>(r)]);
  }
}

std::int64_t PageSharing::shared_pages() const noexcept {
  std::int64_t n = 0;
  for (const std::int32_t p : pins_) n += p > 1;
  return n;
}

std::vector<PageSharing::EntryId> PageSharing::cached_prefix(const SequenceSpec& spec,
                                                             std::int64_t initial_tokens) const {
  if (!index_ || spec.prompt_token_ids.empty()) return {};
  const std::int64_t n = std::min(spec.prompt_tokens, initial_tokens);
  // At least the last prompt token is computed: whole blocks of the first n - 1 tokens.
  const std::int64_t max_blocks = n > 0 ? (n - 1) / block_tokens_ : 0;
  if (max_blocks == 0) return {};
  return index_->match(spec.prompt_token_ids.first(static_cast<std::size_t>(n)), spec.extra_keys, max_blocks);
}

std::vector<PageId> PageSharing::pages_of(std::span<const EntryId> hit) const {
  std::vector<PageId> pages;
  for (const EntryId e : hit) {
    const auto units = index_->units(e);
    pages.insert(pages.end(), units.begin(), units.end());
  }
  return pages;
}

void PageSharing::enter_prompt(const SequenceSpec& spec, std::int64_t initial_tokens, std::span<const EntryId> hit,
                               int slot, std::int64_t lookup_ns) {
  if (!index_) return;
  SlotCache& c = slot_cache_[static_cast<std::size_t>(slot)];
  c = SlotCache{};
  if (spec.prompt_token_ids.empty()) return;
  c.ids.assign(spec.prompt_token_ids.begin(), spec.prompt_token_ids.end());
  c.extra.assign(spec.extra_keys.begin(), spec.extra_keys.end());
  c.entered = static_cast<std::int64_t>(hit.size());
  c.caching = true;
  enter_complete(slot, initial_tokens);
  const std::int64_t n = std::min(spec.prompt_tokens, initial_tokens);
  const auto hit_blocks = static_cast<std::int64_t>(hit.size());
  ++stats_.lookups;
  stats_.queries += n;
  stats_.hit_blocks += hit_blocks;
  stats_.hits += hit_blocks * block_tokens_;
  stats_.lookup_ns += lookup_ns;
}

void PageSharing::grew(int slot, std::int64_t length) {
  if (index_) enter_complete(slot, length);
}

void PageSharing::end_sequence(int slot) {
  if (index_) slot_cache_[static_cast<std::size_t>(slot)] = SlotCache{};
}

void PageSharing::enter_complete(int slot, std::int64_t length) {
  SlotCache& c = slot_cache_[static_cast<std::size_t>(slot)];
  if (!c.caching) return;
  const std::int64_t complete = std::min(length, static_cast<std::int64_t>(c.ids.size())) / block_tokens_;
  if (complete <= c.entered) return;
  const int tensors = arena_->num_tensors();
  // Block entered - 1 is the parent: its first page names the entry (a hit maps the entry's pages).
  const EntryId parent =
      c.entered > 0 ? index_->entry_of(arena_->pages(slot, 0)[static_cast<std::size_t>((c.entered - 1) * block_rows_)])
                    : -1;
  if (c.entered > 0 && parent < 0) {
    c.caching = false;
    return;
  }
  const std::int64_t got =
      index_->insert(c.ids, c.extra, parent, c.entered, complete, [&](std::int64_t block, std::span<PageId> out) {
        for (std::int64_t g = 0; g < block_rows_; ++g)
          for (int t = 0; t < tensors; ++t)
            out[static_cast<std::size_t>(g * tensors + t)] =
                arena_->pages(slot, t)[static_cast<std::size_t>(block * block_rows_ + g)];
      });
  stats_.inserted_blocks += got;
  c.entered += got;
  if (c.entered < complete) c.caching = false;  // already cached elsewhere: the rest stays private
}

void PageSharing::take_for_mapping(PageId page) {
  if (arena_->mappings(page) != 0) return;  // mapped elsewhere: already out of the pool
  arena_->pool().take(page);                // a free page that still holds its prefix: revive it
  if (indexed(page)) --free_indexed_;
}

}  // namespace kvlab
