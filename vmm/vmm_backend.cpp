#include "vmm/vmm_backend.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <string>

#include "alloc/transfer/copy.hpp"
#include "alloc/core/error.hpp"

namespace kvlab {

namespace {
constexpr std::size_t kKiB = 1024, kMiB = kKiB * 1024;

/// The config with max_seq_len resolved, checked before anything is reserved.
VmmConfig checked(VmmConfig c, std::int64_t max_seq_len) {
  c.max_seq_len = max_seq_len;
  KVLAB_EXPECTS(c.max_batch >= 1, "max_batch must be at least 1");
  KVLAB_EXPECTS(c.eager_tokens >= 0, "eager_tokens must not be negative");
  KVLAB_EXPECTS(c.page_bytes > 0 && c.page_bytes % (4 * kKiB) == 0,
                "vmm page size must be a positive multiple of 4 KiB (got " + std::to_string(c.page_bytes) + " bytes)");
  if (c.driver) {
    KVLAB_EXPECTS(c.page_bytes % c.driver->granularity() == 0,
                  "vmm page size " + page_size_name(c.page_bytes) + " is not a multiple of the " + c.driver->name() +
                      " driver's granularity (" + page_size_name(c.driver->granularity()) + "): use vmm-" +
                      page_size_name(c.driver->granularity()) +
                      " or a multiple of it (smaller pages need vAttention's "
                      "modified driver)");
    KVLAB_EXPECTS(c.driver->device() == Device::host || c.memory != nullptr,
                  "a vmm backend on device memory needs a memory resource for its per-batch arrays");
  }
  return c;
}

/// Bytes of one token in one tensor: one layer's K (or V) per_layer, every layer's for megacache.
std::size_t token_bytes_for(const VmmConfig& c) {
  const ModelGeometry& m = c.model;
  const std::size_t row = static_cast<std::size_t>(m.num_kv_heads) * m.head_dim * size_of(m.kv_dtype);
  return c.layout == VmmLayout::per_layer ? row : row * static_cast<std::size_t>(m.num_layers);
}

ArenaShape shape_for(const VmmConfig& c, std::size_t token_bytes) {
  ArenaShape s;
  s.tensors = c.layout == VmmLayout::per_layer ? 2 * c.model.num_layers : 2;
  s.slots = c.max_batch;
  s.page_bytes = c.page_bytes;
  s.slot_bytes =
      (static_cast<std::size_t>(c.max_seq_len) * token_bytes + c.page_bytes - 1) / c.page_bytes * c.page_bytes;
  // Whole rows of pages: every page can then serve a whole row of tensors.
  s.num_pages = static_cast<std::int64_t>(c.capacity_bytes / c.page_bytes) / s.tensors * s.tensors;
  KVLAB_EXPECTS(s.num_pages >= s.tensors,
                "KV capacity " + std::to_string(c.capacity_bytes) + " bytes is below one " +
                    page_size_name(c.page_bytes) + " page for each of the " + std::to_string(s.tensors) +
                    " KV tensors (" + std::to_string(static_cast<std::size_t>(s.tensors) * c.page_bytes) + " bytes)");
  KVLAB_EXPECTS(s.num_pages <= INT32_MAX, "too many pages for 32-bit page ids");
  return s;
}
}  // namespace

VmmBackend::VmmBackend(VmmConfig config)
    : TableBackend(config.model, config.max_seq_len),
      config_(checked(std::move(config), max_seq_len())),
      token_bytes_(token_bytes_for(config_)),
      page_shift_(std::has_single_bit(config_.page_bytes) ? std::countr_zero(config_.page_bytes) : -1),
      // With the prefix cache free pages keep their entries, so the pool hands out the oldest first.
      arena_(config_.driver.get(), shape_for(config_, token_bytes_),
             config_.prefix_cache ? PageFreeOrder::lru : PageFreeOrder::lifo),
      sharing_(arena_, config_.prefix_cache, token_bytes_),
      slots_(static_cast<std::size_t>(config_.max_batch)) {
  if (config_.overlap)
    mapper_ = std::make_unique<BackgroundMapper>(mutex_, [this](const PrefetchJob& job) { return prefetch_page(job); });
}

// Members go in reverse order: the mapper stops first, the arena unmaps everything and frees the
// reservation last.
VmmBackend::~VmmBackend() = default;

std::string VmmBackend::do_name() const {
  // Every option the factory parses, in one canonical order, so that variants never share a name
  // (a row of a comparison, a result folder): make_backend(name()) builds the same backend.
  std::string n = "vmm-" + page_size_name(config_.page_bytes);
  if (config_.layout == VmmLayout::megacache) n += "-mega";
  if (config_.overlap) n += "-overlap";
  if (config_.eager_tokens > 0) n += "-eager" + std::to_string(config_.eager_tokens);
  if (!config_.deferred_reclamation) n += "-nodefer";  // the factory's default is deferred reclamation
  if (config_.prefix_cache) n += "-prefix";
  return n;
}

Device VmmBackend::do_device() const noexcept { return config_.driver ? config_.driver->device() : Device::host; }

std::int64_t VmmBackend::free_pages() const {
  const auto lock = guard();
  return arena_.pool().num_free();
}

VmmStats VmmBackend::stats() const {
  const auto lock = guard();
  VmmStats s;
  const DriverActivity& critical = arena_.activity(MapOrigin::critical);
  const DriverActivity& background = arena_.activity(MapOrigin::background);
  s.critical_maps = critical.maps;
  s.critical_unmaps = critical.unmaps;
  s.critical_map_seconds = critical.map_seconds;
  s.critical_unmap_seconds = critical.unmap_seconds;
  s.background_maps = background.maps;
  s.background_unmaps = background.unmaps;
  s.background_map_seconds = background.map_seconds;
  s.background_unmap_seconds = background.unmap_seconds;
  s.synchronizations = arena_.synchronizations();
  s.reclaimed_pages = counters_.reclaimed_pages;
  s.reused_pages = counters_.reused_pages;
  s.prefetch_shortfalls = counters_.prefetch_shortfalls;
  s.prefetch_wait_seconds = counters_.prefetch_wait_seconds;
  s.lock_wait_seconds = lock_wait_seconds_;
  s.shared_maps = counters_.shared_maps;
  s.truncated_pages = counters_.truncated_pages;
  s.mapped_pages = arena_.pool().num_used();
  for (int i = 0; i < arena_.num_slots(); ++i) {
    if (!slots_[static_cast<std::size_t>(i)].live) s.cached_pages += arena_.held(i);
    s.mappings += arena_.held(i);
  }
  s.shared_pages = sharing_.shared_pages();
  s.virtual_bytes = arena_.reserved_bytes();
  return s;
}

PrefixCacheStats VmmBackend::do_prefix_cache_stats() const {
  const auto lock = guard();
  return sharing_.stats();
}

PageId VmmBackend::page_at(SeqId id, int tensor, std::int64_t row) const {
  const int slot = at(id).slot;
  KVLAB_EXPECTS(tensor >= 0 && tensor < num_tensors(), "tensor out of range");
  const auto lock = guard();
  const PageColumn pages = arena_.pages(slot, tensor);
  KVLAB_EXPECTS(row >= 0 && row < static_cast<std::int64_t>(pages.size()),
                "row " + std::to_string(row) + " is not mapped");
  return pages[static_cast<std::size_t>(row)];
}

int VmmBackend::page_mappings(PageId page) const {
  KVLAB_EXPECTS(page >= 0 && page < num_pages(), "page out of range");
  const auto lock = guard();
  return arena_.mappings(page);
}

int VmmBackend::slot_of(SeqId id) const { return at(id).slot; }

std::int64_t VmmBackend::mapped_pages(SeqId id) const {
  const int slot = at(id).slot;
  const auto lock = guard();
  return arena_.held(slot);
}

std::int64_t VmmBackend::rows_for(std::int64_t tokens) const noexcept {
  // A shift for power-of-two pages: can_grow and grow ask for every sequence every step.
  const std::size_t bytes = static_cast<std::size_t>(tokens) * token_bytes_ + config_.page_bytes - 1;
  return static_cast<std::int64_t>(page_shift_ >= 0 ? bytes >> page_shift_ : bytes / config_.page_bytes);
}

std::int64_t VmmBackend::target_rows(std::int64_t tokens) const noexcept {
  return rows_for(std::min(tokens + config_.eager_tokens, config_.max_seq_len));
}

// ---------------------------------------------------------------------------------------------
// Placement and page bookkeeping (under guard())

std::int64_t VmmBackend::reclaimable_from_others(int slot) const noexcept {
  // Every mapped page no running sequence needs can be freed by unmapping it everywhere, except
  // those `slot` maps (it is never reclaimed from while it is being served). A running slot's
  // pages beyond its needed rows are its own (eager or prefetched pages are never shared); a free
  // slot's pages are all counted as its own (some may be pinned by others: an overestimate that
  // only makes the answer conservative; place() counts them exactly).
  const std::int64_t everywhere = arena_.pool().num_used() - sharing_.needed_pages();
  return everywhere - (arena_.held(slot) -
                       static_cast<std::int64_t>(num_tensors()) * slots_[static_cast<std::size_t>(slot)].needed_rows);
}

bool VmmBackend::feasible(int slot, std::int64_t rows) const noexcept {
  // Nothing missing is the common case (a sequence grows into a row it has): answered in O(1).
  const std::int64_t missing = arena_.missing_pages(slot, rows);
  return missing == 0 || missing <= arena_.pool().num_free() + reclaimable_from_others(slot);
}

int VmmBackend::choose_slot(std::int64_t rows) const noexcept {
  // A free slot whose cached pages (deferred reclamation) cover `rows` with the least to spare;
  // else the one with the most cached rows; ties to the lowest index.
  // Slots never occupied all look alike (nothing mapped): the first of them stands for the rest.
  int best = -1;
  bool best_covers = false;
  std::int64_t best_key = 0;
  for (int i = 0; i < std::min(arena_.num_slots(), touched_slots_ + 1); ++i) {
    if (slots_[static_cast<std::size_t>(i)].live) continue;
    const std::int64_t held = arena_.held(i);
    const std::int64_t have = held == 0 ? 0 : arena_.complete_rows(i);
    const bool covers = have >= rows;
    if (covers && held == static_cast<std::int64_t>(num_tensors()) * rows) return i;  // exact fit
    const std::int64_t key = covers ? -held : have;                                   // larger is better
    if (best < 0 || (covers && !best_covers) || (covers == best_covers && key > best_key)) {
      best = i;
      best_covers = covers;
      best_key = key;
    }
  }
  return best;
}

int VmmBackend::slot_holding_prefix(const std::vector<PageId>& share, std::int64_t share_rows) const noexcept {
  // A sequence coming back to the slot its prefix was left in maps nothing.
  const auto T = static_cast<std::size_t>(num_tensors());
  int best = -1;
  std::int64_t best_same = 0;
  for (int i = 0; i < touched_slots_; ++i) {
    if (slots_[static_cast<std::size_t>(i)].live) continue;
    std::int64_t same = 0;
    for (; same < share_rows; ++same) {
      bool all = true;
      for (std::size_t t = 0; t < T && all; ++t) {
        const PageColumn pages = arena_.pages(i, static_cast<int>(t));
        all = static_cast<std::int64_t>(pages.size()) > same &&
              pages[static_cast<std::size_t>(same)] == share[static_cast<std::size_t>(same) * T + t];
      }
      if (!all) break;
    }
    if (same > best_same) {
      best_same = same;
      best = i;
    }
  }
  return best;
}

std::int64_t VmmBackend::first_row_to_cut(const Placement& p) const noexcept {
  // Rows of the slot that cannot stay: below share_rows, a page other than the shared one; from
  // share_rows on (the sequence will write there), a page another slot maps or the index holds.
  if (!config_.prefix_cache) return INT64_MAX;
  const auto T = static_cast<std::size_t>(num_tensors());
  const std::int64_t top = arena_.top_rows(p.slot);
  for (std::int64_t r = 0; r < top; ++r)
    for (std::size_t t = 0; t < T; ++t) {
      const PageColumn pages = arena_.pages(p.slot, static_cast<int>(t));
      if (static_cast<std::int64_t>(pages.size()) <= r) continue;
      const PageId page = pages[static_cast<std::size_t>(r)];
      const bool cannot_stay = r < p.share_rows ? page != p.share[static_cast<std::size_t>(r) * T + t]
                                                : arena_.mappings(page) > 1 || sharing_.indexed(page);
      if (cannot_stay) return r;
    }
  return INT64_MAX;
}

VmmBackend::Placement VmmBackend::place(std::int64_t rows, std::vector<PageId> share, std::int64_t share_rows) const {
  Placement p;
  p.rows = rows;
  p.share_rows = share_rows;
  p.share = std::move(share);
  if (share_rows > 0) p.slot = slot_holding_prefix(p.share, share_rows);
  if (p.slot < 0) p.slot = choose_slot(rows);
  if (p.slot < 0) return p;
  p.cut = first_row_to_cut(p);
  const auto T = static_cast<std::size_t>(num_tensors());
  for (std::size_t t = 0; t < T; ++t) {
    const PageColumn pages = arena_.pages(p.slot, static_cast<int>(t));
    const std::int64_t kept = std::min<std::int64_t>(static_cast<std::int64_t>(pages.size()), p.cut);
    p.fresh += std::max<std::int64_t>(0, rows - std::max(kept, share_rows));
    p.reused += std::min(kept, rows);
    if (!config_.prefix_cache) {
      p.own += kept;  // a free slot's pages are its own
      continue;
    }
    for (std::int64_t r = 0; r < kept; ++r) p.own += sharing_.pins(pages[static_cast<std::size_t>(r)]) == 0;
    for (std::int64_t r = kept; r < share_rows; ++r)
      p.own += sharing_.pins(p.share[static_cast<std::size_t>(r) * T + t]) == 0;
  }
  // Everything the running sequences need, plus what this slot keeps or takes, plus the fresh
  // pages, must fit: every other mapped page can be unmapped (reclaimed) to make room.
  p.fits = p.fresh + sharing_.needed_pages() + p.own <= arena_.pool().num_pages();
  return p;
}

VmmBackend::Placement VmmBackend::place_admission(const std::vector<PageSharing::EntryId>& hit,
                                                  std::int64_t rows) const {
  return place(rows, sharing_.pages_of(hit), static_cast<std::int64_t>(hit.size()) * sharing_.block_rows());
}

void VmmBackend::truncate(int slot, std::int64_t rows) {
  bool synced = false;
  for (int t = num_tensors() - 1; t >= 0; --t)
    while (static_cast<std::int64_t>(arena_.pages(slot, t).size()) > rows) {
      if (!synced) {
        arena_.synchronize(MapOrigin::critical);  // a kernel may still read what a finished sequence left behind
        synced = true;
      }
      arena_.unmap_tail(slot, t, MapOrigin::critical);
      ++counters_.truncated_pages;
    }
}

void VmmBackend::apply(MapTransaction& txn, const Placement& p) {
  touched_slots_ = std::max(touched_slots_, p.slot + 1);  // before any map: a failed rollback leaves pages here
  if (p.cut != INT64_MAX) truncate(p.slot, p.cut);
  const auto T = static_cast<std::size_t>(num_tensors());
  for (std::size_t t = 0; t < T; ++t)
    for (auto r = static_cast<std::int64_t>(arena_.pages(p.slot, static_cast<int>(t)).size()); r < p.share_rows; ++r) {
      if (!map_shared(p.slot, static_cast<int>(t), p.share[static_cast<std::size_t>(r) * T + t], MapOrigin::critical)) {
        KVLAB_THROW(OutOfMemory, "mapping a shared page into slot " + std::to_string(p.slot) + ": out of memory");
      }
      txn.record(p.slot, static_cast<int>(t));
    }
  map_rows(txn, p.slot, p.rows, true, MapOrigin::critical);
}

void VmmBackend::occupy(int slot, std::int64_t rows) noexcept {
  SlotState& s = slots_[static_cast<std::size_t>(slot)];
  s.live = true;
  ++s.generation;
  set_needed_rows(slot, rows);
}

void VmmBackend::set_needed_rows(int slot, std::int64_t rows) noexcept {
  SlotState& s = slots_[static_cast<std::size_t>(slot)];
  sharing_.set_needed_rows(slot, s.needed_rows, rows);
  s.needed_rows = rows;
}

bool VmmBackend::map_fresh(int slot, int tensor, MapOrigin origin) {
  const PageId page = sharing_.allocate_fresh();
  return page != kNoPage && arena_.map_tail(slot, tensor, page, origin);
}

bool VmmBackend::map_fresh_row(int slot, MapOrigin origin) {
  // Accounting only, a whole row at once when the pool has it: the same pages, in the same order,
  // as map_fresh() tensor by tensor, with the books moved once per row.
  const auto T = static_cast<std::size_t>(num_tensors());
  if (has_storage() || !arena_.whole_rows(slot)) return false;
  row_pages_.resize(T);
  if (!sharing_.allocate_fresh(row_pages_)) return false;
  arena_.map_row(slot, row_pages_, origin);
  return true;
}

bool VmmBackend::map_shared(int slot, int tensor, PageId page, MapOrigin origin) {
  sharing_.take_for_mapping(page);
  if (!arena_.map_tail(slot, tensor, page, origin)) return false;
  ++counters_.shared_maps;
  return true;
}

void VmmBackend::reclaim_rows_above(int slot, std::int64_t floor_rows, std::int64_t pages, std::int64_t& got,
                                    bool& synced, MapOrigin origin) {
  const std::int64_t T = num_tensors();
  while (got < pages) {
    const std::int64_t top = arena_.top_rows(slot);
    if (top <= floor_rows) return;
    if (arena_.whole_rows(slot) && pages - got >= T) {  // a whole row frees at most T pages: never too many
      if (!synced) {
        arena_.synchronize(origin);
        synced = true;
      }
      const std::int64_t freed = arena_.unmap_row(slot, origin);
      got += freed;
      counters_.reclaimed_pages += freed;
      continue;
    }
    for (int t = num_tensors() - 1; t >= 0 && got < pages; --t) {
      if (static_cast<std::int64_t>(arena_.pages(slot, t).size()) != top) continue;
      if (!synced) {
        arena_.synchronize(origin);  // a kernel may still read what a finished sequence left behind
        synced = true;
      }
      if (arena_.unmap_tail(slot, t, origin)) {  // a shared page is freed by its last unmap
        ++got;
        ++counters_.reclaimed_pages;
      }
    }
  }
}

std::int64_t VmmBackend::reclaim(std::int64_t pages, int exclude, bool live_too, MapOrigin origin) {
  std::int64_t got = 0;
  bool synced = false;
  const auto cached_in_free_slot = [&](int si) {
    return si != exclude && !slots_[static_cast<std::size_t>(si)].live && arena_.held(si) > 0;
  };
  if (config_.prefix_cache) {
    // Free slots least recently released first (their prefixes are the least likely to return).
    std::vector<int> order;
    for (int si = 0; si < touched_slots_; ++si)
      if (cached_in_free_slot(si)) order.push_back(si);
    std::ranges::sort(order, [&](int a, int b) {
      return slots_[static_cast<std::size_t>(a)].released < slots_[static_cast<std::size_t>(b)].released;
    });
    for (std::size_t k = 0; k < order.size() && got < pages; ++k)
      reclaim_rows_above(order[k], 0, pages, got, synced, origin);
  } else {
    for (int si = touched_slots_ - 1; si >= 0 && got < pages; --si)
      if (cached_in_free_slot(si)) reclaim_rows_above(si, 0, pages, got, synced, origin);
  }
  if (live_too) {
    for (int si = touched_slots_ - 1; si >= 0 && got < pages; --si) {
      const SlotState& s = slots_[static_cast<std::size_t>(si)];
      if (si != exclude && s.live && arena_.held(si) > static_cast<std::int64_t>(num_tensors()) * s.needed_rows)
        reclaim_rows_above(si, s.needed_rows, pages, got, synced, origin);
    }
  }
  return got;
}

void VmmBackend::map_rows(MapTransaction& txn, int slot, std::int64_t rows, bool required, MapOrigin origin) {
  rows = std::min(rows, arena_.rows_per_slot());
  const std::int64_t need = arena_.missing_pages(slot, rows);
  if (need == 0) return;
  // Speculative pages (eager) only take free pages: no unmapping on the critical path for them.
  const std::int64_t free = arena_.pool().num_free();
  if (required && free < need) reclaim(need - free, slot, true, origin);
  for (std::int64_t i = arena_.complete_rows(slot); i < rows; ++i) {
    if (map_fresh_row(slot, origin)) {
      txn.record_row(slot);
      continue;
    }
    for (int t = 0; t < num_tensors(); ++t) {
      if (static_cast<std::int64_t>(arena_.pages(slot, t).size()) != i) continue;
      if (!map_fresh(slot, t, origin)) {
        if (!required) return;
        KVLAB_THROW(OutOfMemory, "mapping page " + std::to_string(i) + " of tensor " + std::to_string(t) + " in slot " +
                                     std::to_string(slot) + ": out of memory (" +
                                     std::to_string(arena_.pool().num_free()) + " free pages)");
      }
      txn.record(slot, t);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// KvBackend

std::int64_t VmmBackend::do_cached_prefix_tokens(const SequenceSpec& spec) const {
  const auto lock = guard();
  return static_cast<std::int64_t>(sharing_.cached_prefix(spec, spec.prompt_tokens).size()) * sharing_.block_tokens();
}

bool VmmBackend::do_can_admit(const SequenceSpec& spec, std::int64_t initial_tokens) const {
  const auto lock = guard();
  const std::int64_t rows = rows_for(initial_tokens);
  if (!config_.prefix_cache) {
    const int slot = choose_slot(rows);
    return slot >= 0 && feasible(slot, rows);
  }
  const Placement p = place_admission(sharing_.cached_prefix(spec, initial_tokens), rows);
  return p.slot >= 0 && p.fits;
}

void VmmBackend::do_admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens) {
  const auto lock = guard();
  const std::int64_t rows = rows_for(initial_tokens);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<PageSharing::EntryId> hit = sharing_.cached_prefix(spec, initial_tokens);
  std::vector<PageId> share = sharing_.pages_of(hit);
  const auto lookup_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  const Placement p = place(rows, std::move(share), static_cast<std::int64_t>(hit.size()) * sharing_.block_rows());
  if (p.slot < 0) {
    KVLAB_THROW(OutOfMemory, "admitting sequence " + std::to_string(id) + ": all " + std::to_string(config_.max_batch) +
                                 " slots hold sequences (max_batch)");
  }
  if (!p.fits) {
    KVLAB_THROW(OutOfMemory, "admitting " + std::to_string(initial_tokens) + " tokens needs " +
                                 std::to_string(p.fresh) + " fresh pages and keeps " + std::to_string(p.own) +
                                 " more, " + std::to_string(arena_.pool().num_pages() - sharing_.needed_pages()) +
                                 " are not needed by running sequences");
  }
  MapTransaction txn(arena_);
  apply(txn, p);
  if (config_.eager_tokens > 0) map_rows(txn, p.slot, target_rows(initial_tokens), false, MapOrigin::critical);
  txn.commit();
  occupy(p.slot, rows);
  counters_.reused_pages += p.reused;
  sharing_.enter_prompt(spec, initial_tokens, hit, p.slot, lookup_ns);
  Sequence seq;
  seq.slot = p.slot;
  seq.length = initial_tokens;
  seq.final_tokens = spec.final_tokens;
  seq.cached_tokens = static_cast<std::int64_t>(hit.size()) * sharing_.block_tokens();
  seqs_.insert(id, seq);
}

bool VmmBackend::do_can_grow(SeqId id, std::int64_t n) const {
  const Sequence& s = at(id);
  if (s.length + n > config_.max_seq_len) return false;
  const auto lock = guard();
  return feasible(s.slot, rows_for(s.length + n));
}

void VmmBackend::do_grow(SeqId id, std::int64_t n) {
  if (do_try_grow(id, n)) return;
  const Sequence& s = at(id);
  if (s.length + n > config_.max_seq_len) {
    KVLAB_THROW(OutOfMemory, "sequence " + std::to_string(id) + " would grow to " + std::to_string(s.length + n) +
                                 " tokens past max_seq_len " + std::to_string(config_.max_seq_len));
  }
  const auto lock = guard();
  const std::int64_t rows = rows_for(s.length + n);
  KVLAB_THROW(OutOfMemory, "growing sequence " + std::to_string(id) + " by " + std::to_string(n) + " tokens needs " +
                               std::to_string(arena_.missing_pages(s.slot, rows)) + " pages, " +
                               std::to_string(arena_.pool().num_free()) + " free and " +
                               std::to_string(reclaimable_from_others(s.slot)) + " reclaimable");
}

bool VmmBackend::do_try_grow(SeqId id, std::int64_t n) {
  Sequence& s = at(id);
  if (s.length + n > config_.max_seq_len) return false;
  const auto lock = guard();
  const std::int64_t rows = rows_for(s.length + n);
  if (!feasible(s.slot, rows)) return false;
  if (n > 0) grow_checked(s, n, rows);
  return true;
}

void VmmBackend::grow_checked(Sequence& s, std::int64_t n, std::int64_t rows) {
  // A running slot's rows from needed_rows on are its own (never shared, never indexed): growth
  // writes only there, so it never needs a copy.
  MapTransaction txn(arena_);
  map_rows(txn, s.slot, rows, true, MapOrigin::critical);
  if (config_.eager_tokens > 0) map_rows(txn, s.slot, target_rows(s.length + n), false, MapOrigin::critical);
  txn.commit();
  set_needed_rows(s.slot, rows);
  s.length += n;
  sharing_.grew(s.slot, s.length);  // prefix cache: blocks this growth completed
}

void VmmBackend::do_fork(SeqId parent, SeqId child) {
  const Sequence p = at(parent);
  const auto lock = guard();
  const std::int64_t rows = rows_for(p.length);
  // With the prefix cache the child maps the parent's full rows (nobody writes there again) and
  // gets a copy of the partial last row only; without, a copy of every written token.
  std::int64_t full = 0;
  std::vector<PageId> share;
  if (config_.prefix_cache) {
    full = static_cast<std::int64_t>(static_cast<std::size_t>(p.length) * token_bytes_ / config_.page_bytes);
    const int T = num_tensors();
    share.resize(static_cast<std::size_t>(full) * static_cast<std::size_t>(T));
    for (std::int64_t r = 0; r < full; ++r)
      for (int t = 0; t < T; ++t)
        share[static_cast<std::size_t>(r * T + t)] = arena_.pages(p.slot, t)[static_cast<std::size_t>(r)];
  }
  const Placement pl = place(rows, std::move(share), full);
  if (pl.slot < 0) {
    KVLAB_THROW(OutOfMemory, "forking sequence " + std::to_string(parent) + ": all " +
                                 std::to_string(config_.max_batch) + " slots hold sequences (max_batch)");
  }
  if (!pl.fits) {
    KVLAB_THROW(OutOfMemory, "forking sequence " + std::to_string(parent) + " needs " + std::to_string(pl.fresh) +
                                 " pages, " + std::to_string(arena_.pool().num_free()) + " free");
  }
  MapTransaction txn(arena_);
  apply(txn, pl);
  if (config_.eager_tokens > 0) map_rows(txn, pl.slot, target_rows(p.length), false, MapOrigin::critical);
  const std::size_t from = static_cast<std::size_t>(full) * config_.page_bytes;
  const std::size_t to = static_cast<std::size_t>(p.length) * token_bytes_;
  if (has_storage() && to > from) {
    for (int t = 0; t < num_tensors(); ++t)
      copy_bytes(device(), slot_base(t, pl.slot) + from, slot_base(t, p.slot) + from, to - from);
  }
  txn.commit();
  occupy(pl.slot, rows);
  Sequence c;
  c.slot = pl.slot;
  c.length = p.length;
  c.final_tokens = p.final_tokens;
  seqs_.insert(child, c);
}

void VmmBackend::do_release(SeqId id) {
  const Sequence s = at(id);
  seqs_.erase(id);
  const auto lock = guard();
  SlotState& slot = slots_[static_cast<std::size_t>(s.slot)];
  slot.live = false;
  ++slot.generation;
  slot.released = ++tick_;
  set_needed_rows(s.slot, 0);
  sharing_.end_sequence(s.slot);
  if (!config_.deferred_reclamation) arena_.unmap_slot(s.slot, MapOrigin::critical);
}

PreparedBatch VmmBackend::do_prepare_batch(std::span<const SeqId> seqs) {
  const int batch = static_cast<int>(seqs.size());
  const ModelGeometry& m = model();
  const std::int64_t row = static_cast<std::int64_t>(m.num_kv_heads) * m.head_dim;
  const std::size_t layer_offset = static_cast<std::size_t>(row) * size_of(m.kv_dtype);
  batch_views_.begin_contiguous(batch, config_.layout == VmmLayout::per_layer ? row : row * m.num_layers);
  for (int b = 0; b < batch; ++b) {
    const Sequence& s = at(seqs[static_cast<std::size_t>(b)]);
    batch_views_.set_length(b, s.length);
    if (!has_storage()) continue;
    for (int layer = 0; layer < m.num_layers; ++layer) {
      if (config_.layout == VmmLayout::per_layer) {
        batch_views_.set_bases(b, layer, slot_base(2 * layer, s.slot), slot_base(2 * layer + 1, s.slot));
      } else {
        const std::size_t at_layer = static_cast<std::size_t>(layer) * layer_offset;
        batch_views_.set_bases(b, layer, slot_base(0, s.slot) + at_layer, slot_base(1, s.slot) + at_layer);
      }
    }
  }
  return batch_views_.finish(device(), config_.memory);
}

StepCosts VmmBackend::do_total_costs() const {
  // Without the lock: everything read here is written only by the owner's thread (critical driver
  // activity, the waits guard() and begin_step() time), never by the mapper. Taking it would make
  // begin_step() wait for a mapping page (std::mutex is not fair: for several) before the step's
  // costs start counting, a wait then counted in no step (OverlapOrder.ABeginStepWait... failed
  // on it twice, once in a release build, with 6.3 of 16 ms counted).
  const DriverActivity& critical = arena_.activity(MapOrigin::critical);
  StepCosts c;
  c.mapping_s = critical.map_seconds + critical.unmap_seconds + counters_.prefetch_wait_seconds + lock_wait_seconds_;
  c.maps = critical.maps;
  c.unmaps = critical.unmaps;
  return c;
}

BackendCounters VmmBackend::do_counters() const {
  const VmmStats st = stats();
  return {{"critical_maps", static_cast<double>(st.critical_maps)},
          {"critical_unmaps", static_cast<double>(st.critical_unmaps)},
          {"critical_map_s", st.critical_map_seconds},
          {"critical_unmap_s", st.critical_unmap_seconds},
          {"background_maps", static_cast<double>(st.background_maps)},
          {"background_unmaps", static_cast<double>(st.background_unmaps)},
          {"background_map_s", st.background_map_seconds},
          {"background_unmap_s", st.background_unmap_seconds},
          {"synchronizations", static_cast<double>(st.synchronizations)},
          {"reclaimed_pages", static_cast<double>(st.reclaimed_pages)},
          {"reused_pages", static_cast<double>(st.reused_pages)},
          {"prefetch_shortfalls", static_cast<double>(st.prefetch_shortfalls)},
          {"prefetch_wait_s", st.prefetch_wait_seconds},
          {"lock_wait_s", st.lock_wait_seconds},
          {"mapped_pages", static_cast<double>(st.mapped_pages)},
          {"cached_pages", static_cast<double>(st.cached_pages)},
          {"mappings", static_cast<double>(st.mappings)},
          {"shared_maps", static_cast<double>(st.shared_maps)},
          {"shared_pages", static_cast<double>(st.shared_pages)},
          {"truncated_pages", static_cast<double>(st.truncated_pages)},
          {"virtual_bytes", static_cast<double>(st.virtual_bytes)}};
}

MemoryBreakdown VmmBackend::do_breakdown(const SequenceSpec*) const {
  const auto lock = guard();
  MemoryBreakdown m;
  m.capacity = static_cast<std::size_t>(arena_.pool().num_pages()) * config_.page_bytes;
  for (const auto& [id, s] : seqs_) {
    const std::size_t held = static_cast<std::size_t>(s.length) * token_bytes_;
    const std::int64_t eventually =
        std::max(s.final_tokens, s.length);  // final <= max_seq_len: the front door checks it
    const std::size_t will_hold = static_cast<std::size_t>(eventually) * token_bytes_;
    const auto T = static_cast<std::size_t>(num_tensors());
    const std::size_t mapped_all = static_cast<std::size_t>(arena_.held(s.slot)) * config_.page_bytes;
    // Per tensor, min(will_hold, mapped) bytes will be filled. When every tensor maps at least
    // will_hold (the common case), or none maps more, the sum needs no walk over the tensors.
    std::size_t filled_eventually = 0;
    if (will_hold <= static_cast<std::size_t>(arena_.complete_rows(s.slot)) * config_.page_bytes) {
      filled_eventually = T * will_hold;
    } else if (will_hold >= static_cast<std::size_t>(arena_.top_rows(s.slot)) * config_.page_bytes) {
      filled_eventually = mapped_all;
    } else {
      for (std::size_t t = 0; t < T; ++t)
        filled_eventually += std::min(will_hold, arena_.pages(s.slot, static_cast<int>(t)).size() * config_.page_bytes);
    }
    m.token_states += T * held;
    m.reserved += filled_eventually - T * held;
    m.internal_fragmentation += mapped_all - filled_eventually;
  }
  // A page several running sequences map is full of token states for each of them (only whole
  // rows below every holder's length are shared): count it once.
  const std::size_t excess = static_cast<std::size_t>(sharing_.shared_excess()) * config_.page_bytes;
  m.token_states -= excess;
  m.shared_savings = excess;
  // Cached pages of free slots count as free (see the design note); no external fragmentation:
  // any page serves any slot. `cached` (informational): pages no running sequence maps that hold
  // KV a later sequence may take: mapped only in free slots, or free with a prefix-index entry.
  if (sharing_.enabled()) {
    std::int64_t live_excess = 0;
    for (int i = 0; i < arena_.num_slots(); ++i) {
      const SlotState& s = slots_[static_cast<std::size_t>(i)];
      if (s.live) live_excess += arena_.held(i) - static_cast<std::int64_t>(num_tensors()) * s.needed_rows;
    }
    const std::int64_t cached =
        arena_.pool().num_used() - sharing_.needed_pages() - live_excess + sharing_.free_indexed();
    m.cached = static_cast<std::size_t>(std::max<std::int64_t>(0, cached)) * config_.page_bytes;
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// Overlap: jobs for the background mapper

void VmmBackend::do_prefetch(std::span<const SeqId> ids, std::int64_t growth) {
  if (!mapper_) return;
  std::vector<std::pair<int, std::int64_t>> wanted;  // (slot, rows); unknown ids throw before anything is queued
  wanted.reserve(ids.size());
  for (SeqId id : ids) {
    const Sequence& s = at(id);
    wanted.emplace_back(s.slot, target_rows(std::min(s.length + growth, config_.max_seq_len)));
  }
  {
    std::lock_guard lock(mutex_);
    for (const auto& [slot, rows] : wanted)
      if (arena_.missing_pages(slot, rows) > 0)
        mapper_->push(lock, PrefetchJob{slot, slots_[static_cast<std::size_t>(slot)].generation, rows});
  }
  mapper_->notify();
}

void VmmBackend::do_begin_step() {
  if (!mapper_) return;
  const auto t0 = std::chrono::steady_clock::now();
  const auto count = [&] {  // what the mapper did not finish in time delays the caller
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard lock(mutex_);
    counters_.prefetch_wait_seconds += waited;
  };
  bool blocked = false;
  try {
    blocked = mapper_->wait();
  } catch (...) {
    count();  // the mapper stopped on an error: it was running
    throw;
  }
  if (blocked) count();  // a mapper already done costs the step nothing (not even the lock's time)
}

bool VmmBackend::prefetch_page(const PrefetchJob& job) {
  const SlotState& s = slots_[static_cast<std::size_t>(job.slot)];
  if (!s.live || s.generation != job.generation) return false;  // released (and maybe reused) meanwhile
  const std::int64_t rows = std::min(job.rows, arena_.rows_per_slot());
  const std::int64_t next_row = arena_.complete_rows(job.slot);
  if (next_row >= rows) return false;
  int tensor = 0;
  while (static_cast<std::int64_t>(arena_.pages(job.slot, tensor).size()) != next_row) ++tensor;
  // Best effort: free pages, else pages cached in free slots (a row at a time, so one
  // synchronize serves several pages); never a running sequence's.
  if (arena_.pool().num_free() == 0 &&
      reclaim(std::min<std::int64_t>(num_tensors(), arena_.missing_pages(job.slot, rows)), job.slot, false,
              MapOrigin::background) == 0) {
    ++counters_.prefetch_shortfalls;
    return false;
  }
  if (!map_fresh(job.slot, tensor, MapOrigin::background)) {
    ++counters_.prefetch_shortfalls;
    return false;
  }
  return true;
}

}  // namespace kvlab
