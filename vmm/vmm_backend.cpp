#include "vmm/vmm_backend.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <numeric>
#include <string>

#include "alloc/copy.hpp"
#include "alloc/error.hpp"

namespace kvlab {

namespace {
constexpr std::size_t kKiB = 1024, kMiB = kKiB * 1024;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

std::string page_size_name(std::size_t bytes) {
  if (bytes != 0 && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + "m";
  if (bytes != 0 && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + "k";
  return std::to_string(bytes);
}

VmmBackend::VmmBackend(VmmConfig config)
    : TableBackend(config.model, config.max_seq_len), config_(std::move(config)) {
  const ModelGeometry& m = config_.model;
  config_.max_seq_len = max_seq_len();
  KVLAB_EXPECTS(config_.max_batch >= 1, "max_batch must be at least 1");
  KVLAB_EXPECTS(config_.eager_tokens >= 0, "eager_tokens must not be negative");
  KVLAB_EXPECTS(config_.page_bytes > 0 && config_.page_bytes % (4 * kKiB) == 0,
                "vmm page size must be a positive multiple of 4 KiB (got " + std::to_string(config_.page_bytes) +
                    " bytes)");
  if (config_.driver) {
    KVLAB_EXPECTS(config_.page_bytes % config_.driver->granularity() == 0,
                  "vmm page size " + page_size_name(config_.page_bytes) + " is not a multiple of the " +
                      config_.driver->name() + " driver's granularity (" +
                      page_size_name(config_.driver->granularity()) + ")");
    KVLAB_EXPECTS(config_.driver->device() == Device::host || config_.memory != nullptr,
                  "a vmm backend on device memory needs a memory resource for its per-batch arrays");
  }

  const std::size_t row = static_cast<std::size_t>(m.num_kv_heads) * m.head_dim * size_of(m.kv_dtype);
  tensors_ = config_.layout == VmmLayout::per_layer ? 2 * m.num_layers : 2;
  token_bytes_ = config_.layout == VmmLayout::per_layer ? row : row * static_cast<std::size_t>(m.num_layers);
  const std::size_t page = config_.page_bytes;
  slot_bytes_ = (static_cast<std::size_t>(config_.max_seq_len) * token_bytes_ + page - 1) / page * page;

  const std::int64_t num_pages =
      static_cast<std::int64_t>(config_.capacity_bytes / page) / tensors_ * tensors_;
  KVLAB_EXPECTS(num_pages >= tensors_,
                "KV capacity " + std::to_string(config_.capacity_bytes) + " bytes is below one " +
                    page_size_name(page) + " page for each of the " + std::to_string(tensors_) + " KV tensors (" +
                    std::to_string(static_cast<std::size_t>(tensors_) * page) + " bytes)");
  KVLAB_EXPECTS(num_pages <= INT32_MAX, "too many pages for 32-bit page ids");

  const long double va = static_cast<long double>(tensors_) * config_.max_batch * static_cast<long double>(slot_bytes_);
  KVLAB_EXPECTS(va < static_cast<long double>(std::size_t{1} << 62), "the virtual reservation would not fit in 64 bits");
  reservation_bytes_ = static_cast<std::size_t>(tensors_) * static_cast<std::size_t>(config_.max_batch) * slot_bytes_;

  // With the prefix cache free pages keep their entries, so the pool hands out the oldest first.
  const PageFreeOrder order = config_.prefix_cache ? PageFreeOrder::lru : PageFreeOrder::lifo;
  if (config_.driver) {
    base_ = static_cast<std::byte*>(
        config_.driver->reserve(reservation_bytes_, std::has_single_bit(page) ? page : std::size_t{0}));
    try {
      pool_ = std::make_unique<PhysicalPagePool>(config_.driver.get(), page, num_pages, order);
    } catch (...) {
      try {
        config_.driver->free_reservation(base_, reservation_bytes_);
      } catch (...) {
      }
      throw;
    }
    stats_.virtual_bytes = reservation_bytes_;
  } else {
    pool_ = std::make_unique<PhysicalPagePool>(nullptr, page, num_pages, order);
  }
  refs_.assign(static_cast<std::size_t>(num_pages), 0);
  if (config_.prefix_cache) {
    pins_.assign(static_cast<std::size_t>(num_pages), 0);
    // A block: the fewest whole rows that hold whole tokens (1 row whenever the token divides the page).
    const std::size_t unit = std::lcm(page, token_bytes_);
    block_rows_ = static_cast<std::int64_t>(unit / page);
    block_tokens_ = static_cast<std::int64_t>(unit / token_bytes_);
    index_ = std::make_unique<ChainedPrefixIndex>(num_pages, block_tokens_, block_rows_ * tensors_);
    index_->set_on_unindex([this](PageId p) {
      if (refs_[static_cast<std::size_t>(p)] == 0) --free_indexed_;  // a free page lost its entry
    });
  }
  slots_.resize(static_cast<std::size_t>(config_.max_batch));
  for (Slot& s : slots_) s.pages.resize(static_cast<std::size_t>(tensors_));
  if (config_.overlap) mapper_ = std::thread([this] { mapper_loop(); });
}

VmmBackend::~VmmBackend() {
  if (mapper_.joinable()) {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    work_cv_.notify_all();
    mapper_.join();
  }
  if (config_.driver) {
    // Everything goes back: pages unmapped (after the device is idle), handles released (the pool),
    // the reservation freed. A driver error here cannot be reported; the driver's leak accounting
    // (the double's leak_report, PosixVmDriver::usage) shows it.
    std::lock_guard lock(mutex_);
    bool any = false;
    for (const Slot& s : slots_) any = any || s.held > 0;
    bool clean = true;
    try {
      if (any) synchronize(Origin::critical);
    } catch (...) {
    }
    for (std::size_t si = 0; si < slots_.size(); ++si)
      for (int t = 0; t < tensors_; ++t)
        while (!slots_[si].pages[static_cast<std::size_t>(t)].empty()) {
          try {
            unmap_tail(static_cast<int>(si), t, Origin::critical);
          } catch (...) {
            clean = false;
            break;
          }
        }
    pool_.reset();
    if (clean) {
      try {
        config_.driver->free_reservation(base_, reservation_bytes_);
      } catch (...) {
      }
    }
  }
}

std::string VmmBackend::do_name() const {
  return "vmm-" + page_size_name(config_.page_bytes) + (config_.layout == VmmLayout::megacache ? "-mega" : "") +
         (config_.prefix_cache ? "-prefix" : "");
}

Device VmmBackend::do_device() const noexcept { return config_.driver ? config_.driver->device() : Device::host; }

std::int64_t VmmBackend::num_pages() const noexcept { return pool_->num_pages(); }

std::int64_t VmmBackend::free_pages() const {
  std::lock_guard lock(mutex_);
  return pool_->num_free();
}

VmmStats VmmBackend::stats() const {
  std::lock_guard lock(mutex_);
  VmmStats s = stats_;
  s.mapped_pages = pool_->num_used();
  s.cached_pages = 0;
  s.mappings = 0;
  for (const Slot& slot : slots_) {
    if (!slot.live) s.cached_pages += slot.held;
    s.mappings += slot.held;
  }
  if (config_.prefix_cache)
    for (const std::int32_t p : pins_) s.shared_pages += p > 1;
  return s;
}

PrefixCacheStats VmmBackend::do_prefix_cache_stats() const {
  std::lock_guard lock(mutex_);
  return prefix_stats_;
}

PageId VmmBackend::page_at(SeqId id, int tensor, std::int64_t row) const {
  const int slot = at(id).slot;
  KVLAB_EXPECTS(tensor >= 0 && tensor < tensors_, "tensor out of range");
  std::lock_guard lock(mutex_);
  const auto& pages = slots_[static_cast<std::size_t>(slot)].pages[static_cast<std::size_t>(tensor)];
  KVLAB_EXPECTS(row >= 0 && row < static_cast<std::int64_t>(pages.size()), "row " + std::to_string(row) + " is not mapped");
  return pages[static_cast<std::size_t>(row)];
}

int VmmBackend::page_mappings(PageId page) const {
  KVLAB_EXPECTS(page >= 0 && page < pool_->num_pages(), "page out of range");
  std::lock_guard lock(mutex_);
  return refs_[static_cast<std::size_t>(page)];
}

int VmmBackend::slot_of(SeqId id) const { return at(id).slot; }

std::int64_t VmmBackend::mapped_pages(SeqId id) const {
  const int slot = at(id).slot;
  std::lock_guard lock(mutex_);
  return slots_[static_cast<std::size_t>(slot)].held;
}

std::int64_t VmmBackend::rows_for(std::int64_t tokens) const noexcept {
  const std::size_t bytes = static_cast<std::size_t>(tokens) * token_bytes_;
  return static_cast<std::int64_t>((bytes + config_.page_bytes - 1) / config_.page_bytes);
}

std::int64_t VmmBackend::target_rows(std::int64_t tokens) const noexcept {
  return rows_for(std::min(tokens + config_.eager_tokens, config_.max_seq_len));
}

std::byte* VmmBackend::slot_base(int tensor, int slot) const noexcept {
  if (base_ == nullptr) return nullptr;
  return base_ + (static_cast<std::size_t>(tensor) * static_cast<std::size_t>(config_.max_batch) +
                  static_cast<std::size_t>(slot)) *
                     slot_bytes_;
}

std::byte* VmmBackend::page_va(int slot, int tensor, std::int64_t index) const noexcept {
  return slot_base(tensor, slot) + static_cast<std::size_t>(index) * config_.page_bytes;
}

// ---------------------------------------------------------------------------------------------
// Page bookkeeping (mutex_ held)

std::int64_t VmmBackend::missing_pages(const Slot& s, std::int64_t rows) const noexcept {
  std::int64_t missing = 0;
  for (const auto& p : s.pages) missing += std::max<std::int64_t>(0, rows - static_cast<std::int64_t>(p.size()));
  return missing;
}

std::int64_t VmmBackend::complete_rows(const Slot& s) const noexcept {
  std::int64_t rows = INT64_MAX;
  for (const auto& p : s.pages) rows = std::min<std::int64_t>(rows, static_cast<std::int64_t>(p.size()));
  return rows;
}

std::int64_t VmmBackend::reclaimable_from_others(int slot) const noexcept {
  // Every mapped page no running sequence needs can be freed by unmapping it everywhere, except
  // those `slot` maps (it is never reclaimed from while it is being served). A running slot's
  // pages beyond its needed rows are its own (eager or prefetched pages are never shared); a free
  // slot's pages are all counted as its own (some may be pinned by others: an overestimate that
  // only makes the answer conservative; place() counts them exactly).
  const Slot& s = slots_[static_cast<std::size_t>(slot)];
  const std::int64_t everywhere = pool_->num_used() - live_needed_pages_;
  return everywhere - (s.held - static_cast<std::int64_t>(tensors_) * s.needed_rows);
}

bool VmmBackend::feasible(int slot, std::int64_t rows) const noexcept {
  return missing_pages(slots_[static_cast<std::size_t>(slot)], rows) <= pool_->num_free() + reclaimable_from_others(slot);
}

int VmmBackend::choose_slot(std::int64_t rows) const noexcept {
  // A free slot whose cached pages (deferred reclamation) cover `rows` with the least to spare;
  // else the one with the most cached rows; ties to the lowest index.
  int best = -1;
  bool best_covers = false;
  std::int64_t best_key = 0;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.live) continue;
    const std::int64_t have = s.held == 0 ? 0 : complete_rows(s);
    const bool covers = have >= rows;
    if (covers && s.held == static_cast<std::int64_t>(tensors_) * rows) return static_cast<int>(i);  // exact fit
    const std::int64_t key = covers ? -s.held : have;  // larger is better
    if (best < 0 || (covers && !best_covers) || (covers == best_covers && key > best_key)) {
      best = static_cast<int>(i);
      best_covers = covers;
      best_key = key;
    }
  }
  return best;
}

VmmBackend::Placement VmmBackend::place(std::int64_t rows, std::vector<PageId> share, std::int64_t share_rows) const {
  Placement p;
  p.rows = rows;
  p.share_rows = share_rows;
  p.share = std::move(share);
  const auto T = static_cast<std::size_t>(tensors_);
  const auto shared_page = [&](std::int64_t r, std::size_t t) { return p.share[static_cast<std::size_t>(r) * T + t]; };
  // The slot: the free one that already maps the most of the shared rows (a sequence coming back
  // to the slot its prefix was left in maps nothing), else the usual choice.
  std::int64_t best_same = 0;
  if (share_rows > 0) {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      if (s.live) continue;
      std::int64_t same = 0;
      for (; same < share_rows; ++same) {
        bool all = true;
        for (std::size_t t = 0; t < T && all; ++t)
          all = static_cast<std::int64_t>(s.pages[t].size()) > same &&
                s.pages[t][static_cast<std::size_t>(same)] == shared_page(same, t);
        if (!all) break;
      }
      if (same > best_same) {
        best_same = same;
        p.slot = static_cast<int>(i);
      }
    }
  }
  if (p.slot < 0) p.slot = choose_slot(rows);
  if (p.slot < 0) return p;
  const Slot& s = slots_[static_cast<std::size_t>(p.slot)];
  // Rows of the slot that cannot stay: below share_rows, a page other than the shared one; from
  // share_rows on (the sequence will write there), a page another slot maps or the index holds.
  if (config_.prefix_cache) {
    std::int64_t top = 0;
    for (const auto& pages : s.pages) top = std::max<std::int64_t>(top, static_cast<std::int64_t>(pages.size()));
    for (std::int64_t r = 0; r < top && p.cut == INT64_MAX; ++r)
      for (std::size_t t = 0; t < T; ++t) {
        if (static_cast<std::int64_t>(s.pages[t].size()) <= r) continue;
        const PageId page = s.pages[t][static_cast<std::size_t>(r)];
        const bool bad = r < share_rows ? page != shared_page(r, t)
                                        : refs_[static_cast<std::size_t>(page)] > 1 || index_->entry_of(page) >= 0;
        if (bad) {
          p.cut = r;
          break;
        }
      }
  }
  for (std::size_t t = 0; t < T; ++t) {
    const std::int64_t kept = std::min<std::int64_t>(static_cast<std::int64_t>(s.pages[t].size()), p.cut);
    p.fresh += std::max<std::int64_t>(0, rows - std::max(kept, share_rows));
    p.reused += std::min(kept, rows);
    if (!config_.prefix_cache) {
      p.own += kept;  // a free slot's pages are its own
      continue;
    }
    for (std::int64_t r = 0; r < kept; ++r)
      p.own += pins_[static_cast<std::size_t>(s.pages[t][static_cast<std::size_t>(r)])] == 0;
    for (std::int64_t r = kept; r < share_rows; ++r) p.own += pins_[static_cast<std::size_t>(shared_page(r, t))] == 0;
  }
  // Everything the running sequences need, plus what this slot keeps or takes, plus the fresh
  // pages, must fit: every other mapped page can be unmapped (reclaimed) to make room.
  p.fits = p.fresh + live_needed_pages_ + p.own <= pool_->num_pages();
  return p;
}

void VmmBackend::apply(Txn& txn, const Placement& p) {
  Slot& s = slots_[static_cast<std::size_t>(p.slot)];
  const auto T = static_cast<std::size_t>(tensors_);
  if (p.cut != INT64_MAX) {
    bool synced = false;
    for (int t = tensors_ - 1; t >= 0; --t)
      while (static_cast<std::int64_t>(s.pages[static_cast<std::size_t>(t)].size()) > p.cut) {
        if (!synced) {
          synchronize(Origin::critical);  // a kernel may still read what a finished sequence left behind
          synced = true;
        }
        unmap_tail(p.slot, t, Origin::critical);
        ++stats_.truncated_pages;
      }
  }
  for (std::size_t t = 0; t < T; ++t)
    for (auto r = static_cast<std::int64_t>(s.pages[t].size()); r < p.share_rows; ++r) {
      if (!map_shared(p.slot, static_cast<int>(t), p.share[static_cast<std::size_t>(r) * T + t], Origin::critical)) {
        KVLAB_THROW(OutOfMemory, "mapping a shared page into slot " + std::to_string(p.slot) + ": out of memory");
      }
      txn.mapped.emplace_back(p.slot, static_cast<int>(t));
    }
  map_rows(txn, p.slot, p.rows, true, Origin::critical);
}

std::int64_t VmmBackend::do_cached_prefix_tokens(const SequenceSpec& spec) const {
  return static_cast<std::int64_t>(lookup(spec, spec.prompt_tokens).size()) * block_tokens_;
}

std::vector<std::int32_t> VmmBackend::lookup(const SequenceSpec& spec, std::int64_t initial_tokens) const {
  if (!index_ || spec.prompt_token_ids.empty()) return {};
  const std::int64_t n = std::min(spec.prompt_tokens, initial_tokens);
  // At least the last prompt token is computed: whole blocks of the first n - 1 tokens.
  const std::int64_t max_blocks = n > 0 ? (n - 1) / block_tokens_ : 0;
  if (max_blocks == 0) return {};
  return index_->match(spec.prompt_token_ids.first(static_cast<std::size_t>(n)), spec.extra_keys, max_blocks);
}

bool VmmBackend::map_page(int slot, int tensor, Origin origin) {
  const std::optional<PageId> page = pool_->allocate();
  if (!page) return false;
  if (index_) {
    // The page is reused: whatever prefix it cached is gone.
    if (index_->forget_unit(*page)) ++prefix_stats_.evictions;
  }
  return map_into(slot, tensor, *page, origin);
}

bool VmmBackend::map_shared(int slot, int tensor, PageId page, Origin origin) {
  const auto i = static_cast<std::size_t>(page);
  if (refs_[i] == 0) {  // a free page that still holds its prefix: revive it
    pool_->take(page);
    if (index_ && index_->entry_of(page) >= 0) --free_indexed_;
  }
  if (!map_into(slot, tensor, page, origin)) return false;
  ++stats_.shared_maps;
  return true;
}

void VmmBackend::pool_release(PageId page) {
  pool_->release(page);
  if (index_ && index_->entry_of(page) >= 0) ++free_indexed_;
}

bool VmmBackend::map_into(int slot, int tensor, PageId page, Origin origin) {
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  auto& pages = s.pages[static_cast<std::size_t>(tensor)];
  const auto i = static_cast<std::size_t>(page);
  const auto give_back = [&] {
    if (refs_[i] == 0) pool_release(page);
  };
  double seconds = 0;
  if (VmDriver* d = config_.driver.get()) {
    std::byte* va = page_va(slot, tensor, static_cast<std::int64_t>(pages.size()));
    const auto t0 = std::chrono::steady_clock::now();
    bool ok = false;
    try {
      ok = d->map(va, config_.page_bytes, pool_->handle(page));
    } catch (...) {
      give_back();
      throw;
    }
    if (!ok) {
      give_back();
      return false;
    }
    try {
      d->set_access(va, config_.page_bytes);
    } catch (...) {
      try {
        d->unmap(va, config_.page_bytes);
        give_back();
      } catch (...) {
        // Stuck mapped: keep it in the books (it is reclaimed like any page beyond the length).
        pages.push_back(page);
        ++s.held;
        ++refs_[i];
      }
      throw;
    }
    seconds = seconds_since(t0);
  }
  pages.push_back(page);
  ++s.held;
  ++refs_[i];
  if (origin == Origin::critical) {
    ++stats_.critical_maps;
    stats_.critical_map_seconds += seconds;
  } else {
    ++stats_.background_maps;
    stats_.background_map_seconds += seconds;
  }
  return true;
}

bool VmmBackend::unmap_tail(int slot, int tensor, Origin origin) {
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  auto& pages = s.pages[static_cast<std::size_t>(tensor)];
  KVLAB_ASSERT(!pages.empty());
  double seconds = 0;
  if (VmDriver* d = config_.driver.get()) {
    const auto t0 = std::chrono::steady_clock::now();
    d->unmap(page_va(slot, tensor, static_cast<std::int64_t>(pages.size()) - 1), config_.page_bytes);
    seconds = seconds_since(t0);
  }
  const PageId page = pages.back();
  pages.pop_back();
  --s.held;
  const bool freed = --refs_[static_cast<std::size_t>(page)] == 0;
  if (freed) pool_release(page);  // with the prefix cache it keeps its entry until handed out again
  if (origin == Origin::critical) {
    ++stats_.critical_unmaps;
    stats_.critical_unmap_seconds += seconds;
  } else {
    ++stats_.background_unmaps;
    stats_.background_unmap_seconds += seconds;
  }
  return freed;
}

void VmmBackend::synchronize(Origin origin) {
  VmDriver* d = config_.driver.get();
  if (d == nullptr) return;
  const auto t0 = std::chrono::steady_clock::now();
  d->synchronize();
  ++stats_.synchronizations;
  (origin == Origin::critical ? stats_.critical_unmap_seconds : stats_.background_unmap_seconds) += seconds_since(t0);
}

std::int64_t VmmBackend::reclaim(std::int64_t pages, int exclude, bool live_too, Origin origin) {
  std::int64_t got = 0;
  bool synced = false;
  // Unmaps whole rows from the top of slot `si` while they are above `floor_rows`. A page counts
  // once it is back in the pool (a shared page is freed by its last unmap).
  auto take_rows_above = [&](int si, std::int64_t floor_rows) {
    Slot& s = slots_[static_cast<std::size_t>(si)];
    while (got < pages) {
      std::int64_t top = 0;
      for (const auto& p : s.pages) top = std::max<std::int64_t>(top, static_cast<std::int64_t>(p.size()));
      if (top <= floor_rows) return;
      for (int t = tensors_ - 1; t >= 0 && got < pages; --t) {
        if (static_cast<std::int64_t>(s.pages[static_cast<std::size_t>(t)].size()) != top) continue;
        if (!synced) {
          synchronize(origin);  // a kernel may still read what a finished sequence left behind
          synced = true;
        }
        if (unmap_tail(si, t, origin)) {
          ++got;
          ++stats_.reclaimed_pages;
        }
      }
    }
  };
  if (config_.prefix_cache) {
    // Free slots least recently released first (their prefixes are the least likely to return).
    std::vector<int> order;
    for (int si = 0; si < static_cast<int>(slots_.size()); ++si) {
      const Slot& s = slots_[static_cast<std::size_t>(si)];
      if (si != exclude && !s.live && s.held > 0) order.push_back(si);
    }
    std::ranges::sort(order, [&](int a, int b) {
      return slots_[static_cast<std::size_t>(a)].released < slots_[static_cast<std::size_t>(b)].released;
    });
    for (std::size_t k = 0; k < order.size() && got < pages; ++k) take_rows_above(order[k], 0);
  } else {
    for (int si = static_cast<int>(slots_.size()) - 1; si >= 0 && got < pages; --si) {
      const Slot& s = slots_[static_cast<std::size_t>(si)];
      if (si != exclude && !s.live && s.held > 0) take_rows_above(si, 0);
    }
  }
  if (live_too) {
    for (int si = static_cast<int>(slots_.size()) - 1; si >= 0 && got < pages; --si) {
      const Slot& s = slots_[static_cast<std::size_t>(si)];
      if (si != exclude && s.live && s.held > static_cast<std::int64_t>(tensors_) * s.needed_rows)
        take_rows_above(si, s.needed_rows);
    }
  }
  return got;
}

void VmmBackend::map_rows(Txn& txn, int slot, std::int64_t rows, bool required, Origin origin) {
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  rows = std::min<std::int64_t>(rows, static_cast<std::int64_t>(slot_bytes_ / config_.page_bytes));
  const std::int64_t need = missing_pages(s, rows);
  if (need == 0) return;
  // Speculative pages (eager) only take free pages: no unmapping on the critical path for them.
  if (required && pool_->num_free() < need) reclaim(need - pool_->num_free(), slot, true, origin);
  for (std::int64_t i = complete_rows(s); i < rows; ++i) {
    for (int t = 0; t < tensors_; ++t) {
      if (static_cast<std::int64_t>(s.pages[static_cast<std::size_t>(t)].size()) != i) continue;
      if (!map_page(slot, t, origin)) {
        if (!required) return;
        KVLAB_THROW(OutOfMemory, "mapping page " + std::to_string(i) + " of tensor " + std::to_string(t) +
                                     " in slot " + std::to_string(slot) + ": out of memory (" +
                                     std::to_string(pool_->num_free()) + " free pages)");
      }
      txn.mapped.emplace_back(slot, t);
    }
  }
}

void VmmBackend::rollback(Txn& txn) noexcept {
  // Freshly mapped pages: no kernel has used them, so no synchronize before unmapping.
  for (auto it = txn.mapped.rbegin(); it != txn.mapped.rend(); ++it) {
    try {
      unmap_tail(it->first, it->second, Origin::critical);
    } catch (...) {
      break;  // the rest stay mapped and in the books (beyond the length: reclaimable)
    }
  }
  txn.mapped.clear();
}

void VmmBackend::pin(PageId page) noexcept {
  if (pins_[static_cast<std::size_t>(page)]++ == 0) {
    ++live_needed_pages_;
  } else {
    ++shared_excess_;
  }
}

void VmmBackend::unpin(PageId page) noexcept {
  if (--pins_[static_cast<std::size_t>(page)] == 0) {
    --live_needed_pages_;
  } else {
    --shared_excess_;
  }
}

void VmmBackend::set_needed_rows(Slot& s, std::int64_t rows) noexcept {
  if (!config_.prefix_cache) {  // no page is ever in two slots: T pages a row
    live_needed_pages_ += static_cast<std::int64_t>(tensors_) * (rows - s.needed_rows);
    s.needed_rows = rows;
    return;
  }
  for (auto& pages : s.pages) {
    for (std::int64_t r = s.needed_rows; r < rows; ++r) pin(pages[static_cast<std::size_t>(r)]);
    for (std::int64_t r = rows; r < s.needed_rows; ++r) unpin(pages[static_cast<std::size_t>(r)]);
  }
  s.needed_rows = rows;
}

void VmmBackend::unmap_slot(int slot, Origin origin) {
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  if (s.held == 0) return;
  synchronize(origin);
  for (int t = tensors_ - 1; t >= 0; --t)
    while (!s.pages[static_cast<std::size_t>(t)].empty()) unmap_tail(slot, t, origin);
}

// ---------------------------------------------------------------------------------------------
// KvBackend

bool VmmBackend::do_can_admit(const SequenceSpec& spec, std::int64_t initial_tokens) const {
  std::lock_guard lock(mutex_);
  const std::int64_t rows = rows_for(initial_tokens);
  if (!config_.prefix_cache) {
    const int slot = choose_slot(rows);
    return slot >= 0 && feasible(slot, rows);
  }
  const std::vector<std::int32_t> hit = lookup(spec, initial_tokens);
  std::vector<PageId> share;
  for (const std::int32_t e : hit) {
    const auto pages = index_->units(e);
    share.insert(share.end(), pages.begin(), pages.end());
  }
  const Placement p = place(rows, std::move(share), static_cast<std::int64_t>(hit.size()) * block_rows_);
  return p.slot >= 0 && p.fits;
}

void VmmBackend::do_admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens) {
  std::lock_guard lock(mutex_);
  const std::int64_t rows = rows_for(initial_tokens);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::int32_t> hit = lookup(spec, initial_tokens);
  std::vector<PageId> share;
  for (const std::int32_t e : hit) {
    const auto pages = index_->units(e);
    share.insert(share.end(), pages.begin(), pages.end());
  }
  const auto lookup_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  const Placement p = place(rows, std::move(share), static_cast<std::int64_t>(hit.size()) * block_rows_);
  if (p.slot < 0) {
    KVLAB_THROW(OutOfMemory, "admitting sequence " + std::to_string(id) + ": all " +
                                 std::to_string(config_.max_batch) + " slots hold sequences (max_batch)");
  }
  if (!p.fits) {
    KVLAB_THROW(OutOfMemory, "admitting " + std::to_string(initial_tokens) + " tokens needs " +
                                 std::to_string(p.fresh) + " fresh pages and keeps " + std::to_string(p.own) +
                                 " more, " + std::to_string(pool_->num_pages() - live_needed_pages_) +
                                 " are not needed by running sequences");
  }
  Txn txn;
  try {
    apply(txn, p);
    if (config_.eager_tokens > 0) map_rows(txn, p.slot, target_rows(initial_tokens), false, Origin::critical);
  } catch (...) {
    rollback(txn);
    throw;
  }
  Slot& s = slots_[static_cast<std::size_t>(p.slot)];
  s.live = true;
  ++s.generation;
  set_needed_rows(s, rows);
  stats_.reused_pages += p.reused;
  const std::int64_t cached = static_cast<std::int64_t>(hit.size()) * block_tokens_;
  if (index_ && !spec.prompt_token_ids.empty()) {
    // Enter the sequence's complete prompt blocks after the hit (their KV is written by this step).
    const std::int64_t n = std::min(spec.prompt_tokens, initial_tokens);
    const std::int64_t complete = n / block_tokens_;
    const auto T = static_cast<std::size_t>(tensors_);
    if (complete > static_cast<std::int64_t>(hit.size())) {
      prefix_stats_.inserted_blocks += index_->insert(
          spec.prompt_token_ids.first(static_cast<std::size_t>(n)), spec.extra_keys, hit.empty() ? -1 : hit.back(),
          static_cast<std::int64_t>(hit.size()), complete, [&](std::int64_t block, std::span<PageId> out) {
            for (std::int64_t g = 0; g < block_rows_; ++g)
              for (std::size_t t = 0; t < T; ++t)
                out[static_cast<std::size_t>(g) * T + t] = s.pages[t][static_cast<std::size_t>(block * block_rows_ + g)];
          });
    }
    prefix_stats_.queries += n;
    prefix_stats_.hits += cached;
    prefix_stats_.lookup_ns += lookup_ns;
  }
  Sequence seq;
  seq.slot = p.slot;
  seq.length = initial_tokens;
  seq.final_tokens = spec.final_tokens;
  seq.cached_tokens = cached;
  seqs_.insert(id, seq);
}

bool VmmBackend::do_can_grow(SeqId id, std::int64_t n) const {
  const Sequence& s = at(id);
  if (s.length + n > config_.max_seq_len) return false;
  std::lock_guard lock(mutex_);
  return feasible(s.slot, rows_for(s.length + n));
}

void VmmBackend::do_grow(SeqId id, std::int64_t n) {
  Sequence& s = at(id);
  if (s.length + n > config_.max_seq_len) {
    KVLAB_THROW(OutOfMemory, "sequence " + std::to_string(id) + " would grow to " + std::to_string(s.length + n) +
                                 " tokens past max_seq_len " + std::to_string(config_.max_seq_len));
  }
  if (n == 0) return;
  std::lock_guard lock(mutex_);
  const std::int64_t rows = rows_for(s.length + n);
  if (!feasible(s.slot, rows)) {
    KVLAB_THROW(OutOfMemory, "growing sequence " + std::to_string(id) + " by " + std::to_string(n) + " tokens needs " +
                                 std::to_string(missing_pages(slots_[static_cast<std::size_t>(s.slot)], rows)) +
                                 " pages, " + std::to_string(pool_->num_free()) + " free and " +
                                 std::to_string(reclaimable_from_others(s.slot)) + " reclaimable");
  }
  // A running slot's rows from needed_rows on are its own (never shared, never indexed): growth
  // writes only there, so it never needs a copy.
  Txn txn;
  try {
    map_rows(txn, s.slot, rows, true, Origin::critical);
    if (config_.eager_tokens > 0) map_rows(txn, s.slot, target_rows(s.length + n), false, Origin::critical);
  } catch (...) {
    rollback(txn);
    throw;
  }
  set_needed_rows(slots_[static_cast<std::size_t>(s.slot)], rows);
  s.length += n;
}

void VmmBackend::do_fork(SeqId parent, SeqId child) {
  const Sequence p = at(parent);
  std::lock_guard lock(mutex_);
  const std::int64_t rows = rows_for(p.length);
  // With the prefix cache the child maps the parent's full rows (nobody writes there again) and
  // gets a copy of the partial last row only; without, a copy of every written token.
  std::int64_t full = 0;
  std::vector<PageId> share;
  if (config_.prefix_cache) {
    full = static_cast<std::int64_t>(static_cast<std::size_t>(p.length) * token_bytes_ / config_.page_bytes);
    const Slot& ps = slots_[static_cast<std::size_t>(p.slot)];
    share.resize(static_cast<std::size_t>(full) * static_cast<std::size_t>(tensors_));
    for (std::int64_t r = 0; r < full; ++r)
      for (int t = 0; t < tensors_; ++t)
        share[static_cast<std::size_t>(r * tensors_ + t)] = ps.pages[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
  }
  const Placement pl = place(rows, std::move(share), full);
  if (pl.slot < 0) {
    KVLAB_THROW(OutOfMemory, "forking sequence " + std::to_string(parent) + ": all " +
                                 std::to_string(config_.max_batch) + " slots hold sequences (max_batch)");
  }
  if (!pl.fits) {
    KVLAB_THROW(OutOfMemory, "forking sequence " + std::to_string(parent) + " needs " + std::to_string(pl.fresh) +
                                 " pages, " + std::to_string(pool_->num_free()) + " free");
  }
  Txn txn;
  try {
    apply(txn, pl);
    if (config_.eager_tokens > 0) map_rows(txn, pl.slot, target_rows(p.length), false, Origin::critical);
    const std::size_t from = static_cast<std::size_t>(full) * config_.page_bytes;
    const std::size_t to = static_cast<std::size_t>(p.length) * token_bytes_;
    if (has_storage() && to > from) {
      for (int t = 0; t < tensors_; ++t)
        copy_bytes(device(), slot_base(t, pl.slot) + from, slot_base(t, p.slot) + from, to - from);
    }
  } catch (...) {
    rollback(txn);
    throw;
  }
  Slot& s = slots_[static_cast<std::size_t>(pl.slot)];
  s.live = true;
  ++s.generation;
  set_needed_rows(s, rows);
  Sequence c;
  c.slot = pl.slot;
  c.length = p.length;
  c.final_tokens = p.final_tokens;
  seqs_.insert(child, c);
}

void VmmBackend::do_release(SeqId id) {
  const Sequence s = at(id);
  seqs_.erase(id);
  std::lock_guard lock(mutex_);
  Slot& slot = slots_[static_cast<std::size_t>(s.slot)];
  slot.live = false;
  ++slot.generation;
  slot.released = ++tick_;
  set_needed_rows(slot, 0);
  if (!config_.deferred_reclamation) unmap_slot(s.slot, Origin::critical);
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
  std::lock_guard lock(mutex_);
  StepCosts c;
  c.mapping_s = stats_.critical_map_seconds + stats_.critical_unmap_seconds;
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
          {"mapped_pages", static_cast<double>(st.mapped_pages)},
          {"cached_pages", static_cast<double>(st.cached_pages)},
          {"mappings", static_cast<double>(st.mappings)},
          {"shared_maps", static_cast<double>(st.shared_maps)},
          {"shared_pages", static_cast<double>(st.shared_pages)},
          {"truncated_pages", static_cast<double>(st.truncated_pages)},
          {"virtual_bytes", static_cast<double>(st.virtual_bytes)}};
}

MemoryBreakdown VmmBackend::do_breakdown(const SequenceSpec*) const {
  std::lock_guard lock(mutex_);
  MemoryBreakdown m;
  m.capacity = static_cast<std::size_t>(pool_->num_pages()) * config_.page_bytes;
  for (const auto& [id, s] : seqs_) {
    const Slot& slot = slots_[static_cast<std::size_t>(s.slot)];
    const std::size_t held = static_cast<std::size_t>(s.length) * token_bytes_;
    const std::int64_t eventually = std::clamp(std::max(s.final_tokens, s.length), s.length, config_.max_seq_len);
    const std::size_t will_hold = static_cast<std::size_t>(eventually) * token_bytes_;
    for (const auto& pages : slot.pages) {
      const std::size_t mapped = pages.size() * config_.page_bytes;
      const std::size_t filled_eventually = std::min(will_hold, mapped);
      m.token_states += held;
      m.reserved += filled_eventually - held;
      m.internal_fragmentation += mapped - filled_eventually;
    }
  }
  // A page several running sequences map is full of token states for each of them (only whole
  // rows below every holder's length are shared): count it once.
  const std::size_t excess = static_cast<std::size_t>(shared_excess_) * config_.page_bytes;
  m.token_states -= excess;
  m.shared_savings = excess;
  // Cached pages of free slots count as free (see the design note); no external fragmentation:
  // any page serves any slot. `cached` (informational): pages no running sequence maps that hold
  // KV a later sequence may take: mapped only in free slots, or free with a prefix-index entry.
  if (index_) {
    std::int64_t live_excess = 0;
    for (const Slot& s : slots_)
      if (s.live) live_excess += s.held - static_cast<std::int64_t>(tensors_) * s.needed_rows;
    const std::int64_t cached = pool_->num_used() - live_needed_pages_ - live_excess + free_indexed_;
    m.cached = static_cast<std::size_t>(std::max<std::int64_t>(0, cached)) * config_.page_bytes;
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// Overlap: the background mapper

void VmmBackend::prefetch_for_next_step(std::span<const SeqId> ids, std::int64_t growth) {
  KVLAB_EXPECTS(growth >= 0, "growth must not be negative");
  if (!config_.overlap) return;
  std::vector<std::pair<int, std::int64_t>> wanted;  // (slot, rows); unknown ids throw before anything is queued
  wanted.reserve(ids.size());
  for (SeqId id : ids) {
    const Sequence& s = at(id);
    wanted.emplace_back(s.slot, target_rows(std::min(s.length + growth, config_.max_seq_len)));
  }
  {
    std::lock_guard lock(mutex_);
    for (const auto& [slot, rows] : wanted) {
      const Slot& s = slots_[static_cast<std::size_t>(slot)];
      if (missing_pages(s, rows) > 0) jobs_.push_back(Job{slot, s.generation, rows});
    }
  }
  work_cv_.notify_one();
}

void VmmBackend::wait_for_prefetch() {
  if (!config_.overlap) return;
  std::unique_lock lock(mutex_);
  idle_cv_.wait(lock, [&] { return jobs_.empty() && !busy_; });
  if (mapper_error_) {
    const std::exception_ptr e = mapper_error_;
    mapper_error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void VmmBackend::mapper_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) break;
    const Job job = jobs_.front();
    jobs_.pop_front();
    busy_ = true;
    lock.unlock();
    run_job(job);  // takes the mutex page by page, so the foreground can get in between
    lock.lock();
    busy_ = false;
    if (jobs_.empty()) idle_cv_.notify_all();
  }
  busy_ = false;
  idle_cv_.notify_all();
}

void VmmBackend::run_job(const Job& job) {
  for (;;) {
    std::lock_guard lock(mutex_);
    if (stop_) return;
    Slot& s = slots_[static_cast<std::size_t>(job.slot)];
    if (!s.live || s.generation != job.generation) return;  // released (and maybe reused) meanwhile
    const std::int64_t rows = std::min<std::int64_t>(job.rows, static_cast<std::int64_t>(slot_bytes_ / config_.page_bytes));
    const std::int64_t next_row = complete_rows(s);
    if (next_row >= rows) return;
    int tensor = 0;
    while (static_cast<std::int64_t>(s.pages[static_cast<std::size_t>(tensor)].size()) != next_row) ++tensor;
    try {
      // Best effort: free pages, else pages cached in free slots (a row at a time, so one
      // synchronize serves several pages); never a running sequence's.
      if (pool_->num_free() == 0 &&
          reclaim(std::min<std::int64_t>(tensors_, missing_pages(s, rows)), job.slot, false, Origin::background) == 0) {
        ++stats_.prefetch_shortfalls;
        return;
      }
      if (!map_page(job.slot, tensor, Origin::background)) {
        ++stats_.prefetch_shortfalls;
        return;
      }
    } catch (...) {
      if (!mapper_error_) mapper_error_ = std::current_exception();
      return;
    }
  }
}

}  // namespace kvlab
