#pragma once
// The vAttention design as a kvlab backend: the KV cache stays virtually contiguous, physical
// pages are mapped into it on demand. docs/vmm.md explains the design and the measurements.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "alloc/memory/memory_resource.hpp"
#include "alloc/backend/table_backend.hpp"
#include "vmm/background_mapper.hpp"
#include "vmm/page_pool.hpp"
#include "vmm/page_sharing.hpp"
#include "vmm/slot_arena.hpp"
#include "vmm/vm_driver.hpp"

namespace kvlab {

/// How the virtual KV tensors are laid out.
///   per_layer  one K and one V tensor per layer, each [max_batch][max_seq_len][kv_heads][head_dim]
///              (vAttention's default; 2 x layers tensors, each grows by its own pages)
///   megacache  one K and one V tensor for all layers, [max_batch][max_seq_len][layers][kv_heads]
///              [head_dim] (vAttention's layer-interleaved "megacache": 2 tensors, so a page holds
///              fewer tokens but a sequence needs 2 page mappings per step, not 2 x layers)
enum class VmmLayout { per_layer, megacache };

struct VmmConfig {
  ModelGeometry model;
  /// The KV budget: bytes of physical pages. Becomes floor(capacity / page_bytes) pages, rounded
  /// down to a multiple of the tensor count (every page can then serve a whole row of tensors).
  std::size_t capacity_bytes = 0;
  std::size_t page_bytes = std::size_t{64} << 10;  ///< a multiple of 4 KiB and of the driver's granularity
  std::int64_t max_seq_len = 0;                    ///< 0: the model's max context; bounds a slot
  int max_batch = 256;                             ///< slots: sequences alive at once; bounds the reservation
  VmmLayout layout = VmmLayout::per_layer;
  /// Virtual memory. nullptr: accounting only (no reservation, no K/V bytes, same bookkeeping).
  std::shared_ptr<VmDriver> driver;
  /// Device memory for the per-batch base/length arrays when the driver's memory is on the GPU.
  /// Unused for host memory (may be nullptr).
  MemoryResource* memory = nullptr;

  // vAttention's three optimisations, each off by default.
  /// A background thread maps, while the current step computes, the pages the next step needs
  /// (the front door's prefetch / begin_step). Off: those calls do nothing and grow() maps.
  bool overlap = false;
  /// Map this many tokens beyond what a sequence needs (best effort: never causes OutOfMemory).
  std::int64_t eager_tokens = 0;
  /// A finished sequence's slot keeps its pages for the next sequence; they are unmapped only
  /// when another sequence needs the memory.
  bool deferred_reclamation = false;
  /// Page-granular prefix sharing (docs/vmm.md): physical pages get reference counts; at admit the
  /// longest cached prefix of SequenceSpec::prompt_token_ids, in whole blocks of page rows, is
  /// mapped into the new slot from the pages that already hold it (mapped in live or free slots,
  /// or free but not yet reused); fork shares the parent's full rows.
  bool prefix_cache = false;
};

/// Driver activity and address space. Counts are page operations the backend performed; in
/// accounting-only mode they are counted all the same (the maps a real backend would do) and the
/// times stay zero. "Critical" = inside admit/grow/fork/release (the caller waits); "background" =
/// on the overlap thread.
struct VmmStats {
  std::int64_t critical_maps = 0, critical_unmaps = 0;
  double critical_map_seconds = 0, critical_unmap_seconds = 0;  ///< map+set_access / synchronize+unmap
  std::int64_t background_maps = 0, background_unmaps = 0;
  double background_map_seconds = 0, background_unmap_seconds = 0;
  std::int64_t synchronizations = 0;     ///< driver synchronize() calls (one per batch of unmaps)
  std::int64_t reclaimed_pages = 0;      ///< unmapped from another slot because memory ran short
  std::int64_t reused_pages = 0;         ///< found still mapped in a slot at admission (deferred reclamation)
  std::int64_t prefetch_shortfalls = 0;  ///< background jobs that stopped for lack of memory
  /// Time the caller waited for the background mapper to finish (begin_step): the
  /// part of background mapping that did not overlap and so lay on the critical path.
  double prefetch_wait_seconds = 0;
  /// Time the caller's calls blocked on the backend's lock while the mapper held it for a page (a
  /// release between prefetch and begin_step, say): critical-path mapping too.
  double lock_wait_seconds = 0;
  std::int64_t mapped_pages = 0;     ///< now: physical pages mapped (a shared page once)
  std::int64_t cached_pages = 0;     ///< now: mappings in slots no sequence holds
  std::int64_t mappings = 0;         ///< now: page mappings in all slots (a shared page once per slot)
  std::int64_t shared_maps = 0;      ///< maps of a page that already held KV (prefix hits, fork shares)
  std::int64_t shared_pages = 0;     ///< now: pages that two or more running sequences need
  std::int64_t truncated_pages = 0;  ///< unmapped from a reused free slot because they were shared or cached
  std::size_t virtual_bytes = 0;     ///< address space reserved (0 in accounting-only mode)
};

// Design note
//
// Rationale. Paged attention (vLLM) makes the KV cache non-contiguous and every kernel pays for a
// block-table lookup; Orca-style reservations keep it contiguous but waste what they over-reserve.
// vAttention (Prabhu et al., 2024) gets both: each layer's K and V are one virtually contiguous
// tensor with a fixed slot per sequence, so unmodified contiguous kernels read them, and physical
// memory is mapped into a slot page by page only as the sequence grows, so waste is bounded by one
// page per tensor per sequence.
//
// Approach. VmmBackend is the policy and the accounting on top of three mechanisms, each with its
// own design note:
//  * SlotArena (vmm/slot_arena.hpp): the one reservation (T = 2 x layers tensors for per_layer, 2
//    for megacache, each max_batch slots of round_up(max_seq_len x token bytes, page) bytes), the
//    PhysicalPagePool created up front, which page is mapped where, and MapTransaction, which
//    unmaps what an operation mapped unless it commits.
//  * PageSharing (vmm/page_sharing.hpp): pin counts (pages running sequences need), what sharing
//    saves, and the chained prefix index over blocks of page rows (prefix_cache).
//  * BackgroundMapper (vmm/background_mapper.hpp): the overlap thread; it maps one page per step
//    under this backend's mutex and skips a slot whose generation moved on.
// The policy:
//  * Growth: a sequence of n tokens has ceil(n x token bytes / page) pages mapped in every tensor
//    (tokens may straddle page boundaries: the address space is contiguous).
//  * All or nothing: an operation first checks that free pages plus reclaimable ones cover it
//    (else OutOfMemory, nothing touched), reclaims, then maps inside a MapTransaction; a failing
//    map or set_access (out of memory or an error) rolls the transaction back and reports
//    (OutOfMemory, or the driver's error).
//  * Placement: a new sequence takes the free slot that already maps most of its cached prefix,
//    else the free slot whose cached pages (deferred reclamation) fit it best. Pages of that slot
//    it cannot keep (another slot maps them, the index holds them, or they are not its prefix)
//    are unmapped first (truncated_pages).
//  * Reclamation under pressure, cheapest first: pages cached in free slots (least recently
//    released first with the prefix cache), then pages a running sequence holds beyond its
//    current length (eager or prefetched ones), tail first. Unmapping synchronizes once per batch.
//  * Accounting (five fractions): per tensor, a running sequence's mapped bytes split into token
//    states, reserved (bytes it will fill: up to final_tokens) and internal fragmentation (page
//    tails and mapped pages beyond final_tokens); a page several running sequences map counts its
//    token states once. Pages cached by deferred reclamation in free slots count as FREE: any
//    admission can have them (reclaimed on demand), so they never block a request — their cost
//    is time (an unmap, a map), which VmmStats counts, not space. No external fragmentation: any
//    page fits any slot.
//  * Fork copies the parent's written tokens into the child's own pages (prefix_cache: it maps the
//    parent's full rows into the child's slot and copies only the partial last row).
//
// Limitations. No swap (supports_swap() is false). At most max_batch sequences at once (a full
// slot table is OutOfMemory). Small models with large pages waste a lot: a page holds page /
// token-bytes tokens of ONE tensor, so a sequence holds at least T pages. Per-page driver calls:
// with the CUDA driver the page must be a multiple of the device granularity (2 MiB without
// vAttention's modified driver).

/// A sequence owns one slot of every tensor.
struct VmmSequence : SequenceState {
  int slot = -1;
};

class VmmBackend final : public TableBackend<VmmSequence> {
 public:
  explicit VmmBackend(VmmConfig config);
  ~VmmBackend() override;

  // --- introspection ---

  [[nodiscard]] VmmStats stats() const;
  [[nodiscard]] const VmmConfig& config() const noexcept { return config_; }
  [[nodiscard]] std::size_t page_bytes() const noexcept { return config_.page_bytes; }
  [[nodiscard]] int num_tensors() const noexcept { return arena_.num_tensors(); }
  [[nodiscard]] std::size_t token_bytes_per_tensor() const noexcept { return token_bytes_; }
  [[nodiscard]] std::int64_t num_pages() const noexcept { return arena_.pool().num_pages(); }
  [[nodiscard]] std::int64_t free_pages() const;
  /// Pages mapped in `id`'s slot, over all tensors.
  [[nodiscard]] std::int64_t mapped_pages(SeqId id) const;
  [[nodiscard]] int slot_of(SeqId id) const;
  /// Base of tensor `tensor`'s slot `slot` (nullptr in accounting-only mode): tensor 2l+kv for
  /// per_layer, kv for megacache.
  [[nodiscard]] std::byte* slot_base(int tensor, int slot) const noexcept { return arena_.slot_base(tensor, slot); }

  // --- prefix sharing (prefix_cache) ---

  /// Tokens and page rows of one prefix-cache block: the fewest whole rows that hold whole tokens
  /// (lcm(page, token bytes per tensor)); 1 row in every common geometry.
  [[nodiscard]] std::int64_t block_tokens() const noexcept { return sharing_.block_tokens(); }
  [[nodiscard]] std::int64_t block_rows() const noexcept { return sharing_.block_rows(); }
  /// The physical page at `row` of `tensor` in `id`'s slot.
  [[nodiscard]] PageId page_at(SeqId id, int tensor, std::int64_t row) const;
  /// Slots mapping `page` now (0: free).
  [[nodiscard]] int page_mappings(PageId page) const;

 private:
  using Sequence = VmmSequence;
  /// "vmm-64k", "vmm-2m-mega-overlap-eager32-nodefer-prefix": the page size, then every option that
  /// differs from the factory's defaults, in that order.
  [[nodiscard]] std::string do_name() const override;
  [[nodiscard]] Device do_device() const noexcept override;
  [[nodiscard]] bool do_has_storage() const noexcept override { return config_.driver != nullptr; }
  [[nodiscard]] bool do_can_admit(const SequenceSpec& spec, std::int64_t initial_tokens) const override;
  void do_admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens) override;
  [[nodiscard]] bool do_can_grow(SeqId id, std::int64_t n) const override;
  void do_grow(SeqId id, std::int64_t n) override;
  [[nodiscard]] bool do_try_grow(SeqId id, std::int64_t n) override;
  /// do_try_grow's growth once the length and the pages are known to fit, under the lock.
  void grow_checked(Sequence& s, std::int64_t n, std::int64_t rows);
  void do_fork(SeqId parent, SeqId child) override;
  /// Ends the sequence. Its pages are unmapped, or kept in its slot with deferred reclamation. If
  /// an unmap fails the sequence is still gone; the pages not unmapped stay cached in the slot
  /// (reclaimed later) and the driver's error is rethrown.
  void do_release(SeqId id) override;
  [[nodiscard]] std::int64_t do_cached_prefix_tokens(const SequenceSpec& spec) const override;
  [[nodiscard]] PrefixCacheStats do_prefix_cache_stats() const override;
  PreparedBatch do_prepare_batch(std::span<const SeqId> seqs) override;
  [[nodiscard]] MemoryBreakdown do_breakdown(const SequenceSpec* blocked) const override;
  /// Step hooks (vAttention's background mapping, with overlap; without, both do nothing):
  /// begin_step() blocks until every queued prefetch is done and rethrows (once) a driver error the
  /// mapper met; the time it blocked counts as critical-path mapping (prefetch_wait_seconds).
  /// prefetch(ids, growth) queues the pages each sequence will need after growing by `growth`
  /// tokens (plus eager_tokens) and returns at once; the next grow() finds them mapped. Best effort:
  /// pages the pool cannot supply without taking a running sequence's pages are left to grow().
  void do_begin_step() override;
  void do_prefetch(std::span<const SeqId> ids, std::int64_t growth) override;
  [[nodiscard]] StepCosts do_total_costs() const override;
  [[nodiscard]] ViewShape do_view_shape() const noexcept override {
    return {KvLayout::contiguous, 0, config_.page_bytes};
  }
  [[nodiscard]] BackendCounters do_counters() const override;
  [[nodiscard]] std::optional<std::size_t> do_held_bytes() const override {
    return static_cast<std::size_t>(arena_.pool().num_used()) * config_.page_bytes;
  }

  /// The policy's view of a slot (its pages are the arena's).
  struct SlotState {
    std::int64_t needed_rows = 0;  // rows the owner's current length needs (0 when free)
    bool live = false;
    std::uint64_t generation = 0;  // bumped at every admit/fork/release
    std::uint64_t released = 0;    // tick of the last release (LRU order of free slots)
  };
  /// Where a new sequence goes and what it maps (admit, fork).
  struct Placement {
    int slot = -1;
    std::int64_t rows = 0;         // rows the sequence needs
    std::int64_t share_rows = 0;   // rows [0, share_rows) map the pages in `share`
    std::vector<PageId> share;     // [row * tensors + tensor]
    std::int64_t cut = INT64_MAX;  // the slot's pages at rows >= cut are unmapped first
    std::int64_t fresh = 0;        // fresh pages mapped
    std::int64_t own = 0;          // distinct pages the slot will map that no running sequence needs now
    std::int64_t reused = 0;       // pages found mapped in the slot that the sequence keeps
    bool fits = false;
  };
  /// Decisions the policy took, for VmmStats (the arena counts driver calls).
  struct PolicyCounters {
    std::int64_t reclaimed_pages = 0, reused_pages = 0, prefetch_shortfalls = 0, shared_maps = 0, truncated_pages = 0;
    double prefetch_wait_seconds = 0;
  };

  [[nodiscard]] std::int64_t rows_for(std::int64_t tokens) const noexcept;
  [[nodiscard]] std::int64_t target_rows(std::int64_t tokens) const noexcept;  // with eager tokens

  /// Holds mutex_ when there is a background mapper (overlap), else nothing: without one no other
  /// thread touches this backend (backends are not thread-safe), and an uncontended lock in
  /// can_grow and grow cost a replay 11 % of its time (issue 34). Only the caller's thread calls
  /// it; the time it blocks while the mapper holds the lock for a page is critical-path mapping
  /// (lock_wait_seconds_), so an uncontended lock costs one try_lock and nothing is timed.
  [[nodiscard]] std::unique_lock<std::mutex> guard() const {
    if (!mapper_) return {};
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) {
      const auto t0 = std::chrono::steady_clock::now();
      lock.lock();
      lock_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return lock;
  }

  // Everything below runs under guard().
  [[nodiscard]] std::int64_t reclaimable_from_others(int slot) const noexcept;
  [[nodiscard]] int choose_slot(std::int64_t rows) const noexcept;  // -1: none free
  [[nodiscard]] bool feasible(int slot, std::int64_t rows) const noexcept;
  /// Chooses a free slot for a sequence of `rows` rows whose first `share_rows` rows are the pages
  /// in `share`, and counts what placing it there takes. No side effects.
  [[nodiscard]] Placement place(std::int64_t rows, std::vector<PageId> share, std::int64_t share_rows) const;
  /// The free slot that already maps the longest run of the shared rows (-1: none maps row 0).
  [[nodiscard]] int slot_holding_prefix(const std::vector<PageId>& share, std::int64_t share_rows) const noexcept;
  /// The first row of `p.slot` whose pages cannot stay for the placed sequence (INT64_MAX: none).
  [[nodiscard]] std::int64_t first_row_to_cut(const Placement& p) const noexcept;
  /// The placement of an admission: its prefix-cache hit (entries) and the slot it goes to.
  [[nodiscard]] Placement place_admission(const std::vector<PageSharing::EntryId>& hit, std::int64_t rows) const;
  /// Carries a placement out (truncate, shared maps, fresh maps) inside `txn`.
  void apply(MapTransaction& txn, const Placement& p);
  /// Unmaps every page of `slot` at rows >= `rows` (after one synchronize).
  void truncate(int slot, std::int64_t rows);
  /// Marks `slot` taken by a sequence needing `rows` rows.
  void occupy(int slot, std::int64_t rows) noexcept;
  /// Maps a fresh page as the next page of (slot, tensor). False when the pool or the driver is
  /// out of memory.
  bool map_fresh(int slot, int tensor, MapOrigin origin);
  /// Maps a whole row of fresh pages into the whole-rows `slot` when there is no driver and the
  /// pool holds a row; false (nothing done) otherwise: the caller goes page by page.
  bool map_fresh_row(int slot, MapOrigin origin);
  /// Maps `page` (already holding KV, maybe mapped elsewhere) as the next page of (slot, tensor).
  bool map_shared(int slot, int tensor, PageId page, MapOrigin origin);
  /// Unmaps up to `pages` pages from slots other than `exclude`: free slots' caches, then (if
  /// `live_too`) running sequences' pages beyond their current length. Returns how many.
  std::int64_t reclaim(std::int64_t pages, int exclude, bool live_too, MapOrigin origin);
  /// Unmaps whole rows from the top of `slot` while they are above `floor_rows`, until `got`
  /// reaches `pages`. A page counts once it is back in the pool.
  void reclaim_rows_above(int slot, std::int64_t floor_rows, std::int64_t pages, std::int64_t& got, bool& synced,
                          MapOrigin origin);
  /// Maps pages of `slot` until every tensor has `rows`; all of them or (required) throws
  /// OutOfMemory, or (optional) stops quietly when memory runs short.
  void map_rows(MapTransaction& txn, int slot, std::int64_t rows, bool required, MapOrigin origin);
  void set_needed_rows(int slot, std::int64_t rows) noexcept;
  /// One page of a prefetch job (the BackgroundMapper's step). False: the job is done.
  bool prefetch_page(const PrefetchJob& job);

  VmmConfig config_;
  std::size_t token_bytes_ = 0;           // one token in one tensor
  int page_shift_ = -1;                   // log2(page_bytes) when it is a power of two (rows_for's shift)
  mutable double lock_wait_seconds_ = 0;  // guard()'s blocked time; written under mutex_ by the owner's thread only
  mutable std::mutex mutex_;              // guards everything below (the mapper's queue too), with overlap
  SlotArena arena_;
  PageSharing sharing_;
  std::vector<SlotState> slots_;
  PolicyCounters counters_;
  std::uint64_t tick_ = 0;
  // Slots [0, touched_slots_) have held a sequence; the rest never mapped a page, so the scans
  // over slots (placement, reclamation: once per grown row) stop there.
  int touched_slots_ = 0;
  std::vector<PageId> row_pages_;             // map_fresh_row's scratch row
  std::unique_ptr<BackgroundMapper> mapper_;  // overlap only; last, so it stops before the rest goes
};

}  // namespace kvlab
