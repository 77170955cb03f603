#pragma once
// The vmm backend's address space and physical pages: one reservation of slots x tensors, the
// page pool, and which page is mapped where (docs/vmm.md, "Layout").
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "vmm/page_pool.hpp"
#include "vmm/vm_driver.hpp"

namespace kvlab {

/// Who asked for a driver call: the caller waiting on it, or the background mapper.
enum class MapOrigin : std::uint8_t { critical, background };

/// Driver calls of one origin, and the wall time they took.
struct DriverActivity {
  std::int64_t maps = 0, unmaps = 0;
  double map_seconds = 0;    ///< map + set_access
  double unmap_seconds = 0;  ///< synchronize + unmap
};

/// The pages one tensor of one slot maps, row 0 first: a column of the slot's row-major grid.
/// A view, valid until the slot's next map or unmap.
class PageColumn {
 public:
  PageColumn(const PageId* first, std::size_t stride, std::size_t rows) noexcept
      : first_(first), stride_(stride), rows_(rows) {}
  [[nodiscard]] std::size_t size() const noexcept { return rows_; }
  [[nodiscard]] bool empty() const noexcept { return rows_ == 0; }
  [[nodiscard]] PageId operator[](std::size_t row) const noexcept { return first_[row * stride_]; }
  [[nodiscard]] PageId back() const noexcept { return (*this)[rows_ - 1]; }

 private:
  const PageId* first_;
  std::size_t stride_, rows_;
};

/// The arena's dimensions: `tensors` virtual tensors of `slots` slots, each slot `slot_bytes`
/// (a multiple of `page_bytes`), and `num_pages` physical pages.
struct ArenaShape {
  int tensors = 0;
  int slots = 0;
  std::size_t slot_bytes = 0;
  std::size_t page_bytes = 0;
  std::int64_t num_pages = 0;
};

// Design note
//
// Rationale. The vAttention layout needs every slot base fixed for the backend's lifetime (views
// and prepared batches hold raw pointers; the background mapper maps under running kernels), so
// the address space is reserved once, like PyTorch's ExpandableSegment and TensorRT-LLM's
// CudaVmmArena, and only physical pages move. Keeping the reservation, the pool and the
// page-to-slot books in one class makes "a page is free exactly when no slot maps it" a local
// invariant instead of a convention spread over the backend.
//
// Approach.
//  * One reservation of tensors x slots x slot_bytes made by the constructor (tensor-major:
//    slot_base(t, s) = base + (t x slots + s) x slot_bytes); the pool's handles are created right
//    after, and a failure there frees the reservation before the constructor rethrows.
//  * Each (slot, tensor) holds a stack of pages mapped from its base on; only its tail changes
//    (map_tail / unmap_tail), so a slot's rows are always a prefix of its address range. The
//    books keep a slot's pages row-major (one row = one page per tensor, contiguous), because a
//    sequence maps and gives back whole rows: without a driver map_row / unmap_row move a row's
//    books at once (docs/vmm.md, "Accounting").
//  * A page may be mapped in several slots (prefix sharing); mappings(page) counts them. The
//    last unmap gives the page back to the pool and calls the page-freed hook (the owner's
//    prefix accounting listens), as does a map that fails on a page no slot maps.
//  * Out of memory is a value: map_tail returns false with nothing changed. Any other driver
//    failure throws with the books exact (a page whose set_access failed and whose unmap failed
//    too stays mapped and in the books, reclaimable later).
//  * MapTransaction (below) records the tails one operation mapped and unmaps them again unless
//    committed: an operation either completes or leaves the arena as it found it.
//  * Unmapping memory a kernel may still read needs synchronize() first; the caller does it once
//    per batch of unmaps (fresh pages a transaction rolls back were never read: no synchronize).
//  * The destructor synchronizes, unmaps everything, releases the handles (the pool) and frees
//    the reservation; if an unmap fails, the reservation is left to the driver's leak report
//    rather than freed under a live mapping.
//  * Without a driver (accounting only) there is no reservation: maps and unmaps are counted and
//    booked, take no time, and slot_base() is nullptr.
//
// Limitations. Not thread-safe: the owner serialises every call (the vmm backend's mutex). The
// shape is fixed at construction.
class SlotArena {
 public:
  /// `driver` nullptr: accounting only. `driver` must outlive the arena.
  SlotArena(VmDriver* driver, const ArenaShape& shape, PageFreeOrder order);
  ~SlotArena();
  SlotArena(const SlotArena&) = delete;
  SlotArena& operator=(const SlotArena&) = delete;

  // --- shape ---
  [[nodiscard]] const ArenaShape& shape() const noexcept { return shape_; }
  [[nodiscard]] int num_tensors() const noexcept { return shape_.tensors; }
  [[nodiscard]] int num_slots() const noexcept { return shape_.slots; }
  [[nodiscard]] std::size_t page_bytes() const noexcept { return shape_.page_bytes; }
  /// Page rows one slot of one tensor can hold.
  [[nodiscard]] std::int64_t rows_per_slot() const noexcept {
    return static_cast<std::int64_t>(shape_.slot_bytes / shape_.page_bytes);
  }
  /// Address space reserved (0 without a driver).
  [[nodiscard]] std::size_t reserved_bytes() const noexcept { return base_ ? reservation_bytes_ : 0; }
  /// Base of slot `slot` of tensor `tensor` (nullptr without a driver).
  [[nodiscard]] std::byte* slot_base(int tensor, int slot) const noexcept;

  // --- pages and where they are mapped ---
  [[nodiscard]] PhysicalPagePool& pool() noexcept { return *pool_; }
  [[nodiscard]] const PhysicalPagePool& pool() const noexcept { return *pool_; }
  /// The pages mapped in (slot, tensor), row 0 first. Inline: the accounting asks for every tensor
  /// of every sequence each step.
  [[nodiscard]] PageColumn pages(int slot, int tensor) const noexcept {
    const auto rows = static_cast<std::size_t>(rows_[column(slot, tensor)]);
    const PageId* first = rows == 0 ? nullptr : grid_[static_cast<std::size_t>(slot)].data() + tensor;
    return {first, static_cast<std::size_t>(shape_.tensors), rows};
  }
  /// Mappings in `slot` over all tensors, and over all slots.
  [[nodiscard]] std::int64_t held(int slot) const noexcept { return held_[static_cast<std::size_t>(slot)]; }
  [[nodiscard]] std::int64_t total_mappings() const noexcept;
  /// Rows mapped in every tensor of `slot` (the shortest tensor), and in any (the longest). O(1):
  /// kept up to date by every map and unmap (the policy asks at every grow and every step).
  [[nodiscard]] std::int64_t complete_rows(int slot) const noexcept {
    return bounds_[static_cast<std::size_t>(slot)].min;
  }
  [[nodiscard]] std::int64_t top_rows(int slot) const noexcept { return bounds_[static_cast<std::size_t>(slot)].max; }
  /// Pages `slot` lacks for `rows` rows in every tensor. O(1) unless `rows` lies strictly between
  /// the slot's shortest and longest tensor (a partial row: a rollback or a prefetch under way).
  [[nodiscard]] std::int64_t missing_pages(int slot, std::int64_t rows) const noexcept {
    const RowBounds& b = bounds_[static_cast<std::size_t>(slot)];
    if (rows <= b.min) return 0;
    if (rows >= b.max) return static_cast<std::int64_t>(shape_.tensors) * rows - held(slot);
    std::int64_t missing = 0;
    for (int t = 0; t < shape_.tensors; ++t) missing += std::max<std::int64_t>(0, rows - rows_[column(slot, t)]);
    return missing;
  }
  /// Slots mapping `page` now (0: the page is free).
  [[nodiscard]] int mappings(PageId page) const noexcept { return refs_[static_cast<std::size_t>(page)]; }

  /// Maps the in-use `page` (just allocated, taken, or mapped elsewhere) as the next row of (slot,
  /// tensor). False when the driver is out of memory; then, like on a throw, a page no slot maps
  /// goes back to the pool.
  bool map_tail(int slot, int tensor, PageId page, MapOrigin origin);
  /// Unmaps the last row of (slot, tensor). True when its page went back to the pool.
  bool unmap_tail(int slot, int tensor, MapOrigin origin);
  /// True when every tensor of `slot` has the same number of rows (no partial row).
  [[nodiscard]] bool whole_rows(int slot) const noexcept {
    const RowBounds& b = bounds_[static_cast<std::size_t>(slot)];
    return b.min == b.max;
  }
  /// Accounting only (no driver): books `pages` (one in-use page per tensor, tensor 0 first) as the
  /// next row of the whole-rows `slot`, as map_tail would page by page, in O(1) book updates. A
  /// replay maps tens of millions of pages; doing it a row at a time is what keeps vmm's accounting
  /// as fast as paged's (issue 34).
  void map_row(int slot, std::span<const PageId> pages, MapOrigin origin);
  /// Unmaps the last row of the whole-rows `slot`, tensor T-1 first (unmap_tail's order). Returns
  /// how many of its pages went back to the pool. Without a driver the books move a row at a time.
  std::int64_t unmap_row(int slot, MapOrigin origin);
  /// Unmaps every page of `slot`, tail first, after one synchronize.
  void unmap_slot(int slot, MapOrigin origin);
  /// Waits for device work that may read mapped memory (before unmapping such memory).
  void synchronize(MapOrigin origin);

  /// Called with every page that goes back to the pool.
  void set_on_page_freed(std::function<void(PageId)> hook) { on_page_freed_ = std::move(hook); }

  [[nodiscard]] const DriverActivity& activity(MapOrigin origin) const noexcept {
    return activity_[static_cast<std::size_t>(origin)];
  }
  [[nodiscard]] std::int64_t synchronizations() const noexcept { return synchronizations_; }

 private:
  [[nodiscard]] std::size_t column(int slot, int tensor) const noexcept {
    return static_cast<std::size_t>(slot) * static_cast<std::size_t>(shape_.tensors) + static_cast<std::size_t>(tensor);
  }
  /// Books `page` as the next row of (slot, tensor), and takes the last row off.
  void push_page(int slot, int tensor, PageId page);
  PageId pop_page(int slot, int tensor) noexcept;
  [[nodiscard]] std::byte* page_va(int slot, int tensor, std::int64_t row) const noexcept;
  void book_mapped(int slot, int tensor, PageId page);
  /// The shortest and longest tensor of a slot, and how many tensors are at each: a tensor
  /// moving off an extreme that no other tensor holds any more makes one O(tensors) rescan, so
  /// mapping or unmapping a whole row costs O(1) per page.
  struct RowBounds {
    std::int64_t min = 0, max = 0;
    int at_min = 0, at_max = 0;
  };
  /// A tensor of `slot` went from `before` rows to `before + 1` (grew) or `before - 1`; called
  /// after its page list changed (a rescan reads the lists).
  void track_rows(int slot, std::int64_t before, bool grew) noexcept;
  void rescan_bounds(int slot) noexcept;
  void return_to_pool(PageId page);

  VmDriver* driver_;
  ArenaShape shape_;
  std::size_t reservation_bytes_ = 0;
  std::byte* base_ = nullptr;
  std::unique_ptr<PhysicalPagePool> pool_;
  // Which page each slot maps where, row-major so that a row (one page per tensor, what a sequence
  // maps or gives back at once) is contiguous: grid_[slot][row * tensors + tensor], top_rows(slot)
  // rows, kNoPage where a tensor is shorter. rows_[slot * tensors + tensor]: the tensor's rows.
  std::vector<std::vector<PageId>> grid_;  // [slot]
  std::vector<std::int32_t> rows_;         // [slot * tensors + tensor]
  std::vector<std::int64_t> held_;         // [slot]
  std::vector<RowBounds> bounds_;          // [slot]
  std::vector<std::int32_t> refs_;         // [page] slots mapping it
  std::vector<PageId> freed_row_;          // unmap_row's scratch: the pages it gives back
  std::function<void(PageId)> on_page_freed_;
  DriverActivity activity_[2];
  std::int64_t synchronizations_ = 0;
};

// Design note
//
// Rationale. A multi-page operation (admit, grow, fork) maps page by page; when page k fails the
// k - 1 before it must go again, whichever way the failure arrives (false, an exception, a later
// copy that throws). A scope guard makes that the default instead of a catch block per caller.
//
// Approach. record() notes each (slot, tensor) tail the operation mapped; the destructor unmaps
// them in reverse order unless commit() was called. Rollback never synchronizes: no kernel has
// seen a page the operation itself just mapped.
//
// Limitations. If an unmap fails during rollback the remaining pages stay mapped, booked in
// their slots beyond the owner's length (reclaimable like any such page); the destructor cannot
// report the error, the operation's own exception is the one that propagates.
class MapTransaction {
 public:
  explicit MapTransaction(SlotArena& arena) noexcept : arena_(&arena) {}
  ~MapTransaction();
  MapTransaction(const MapTransaction&) = delete;
  MapTransaction& operator=(const MapTransaction&) = delete;

  /// The operation mapped the tail of (slot, tensor).
  void record(int slot, int tensor) { mapped_.emplace_back(slot, tensor); }
  /// The operation mapped a whole row of `slot` (SlotArena::map_row).
  void record_row(int slot) { mapped_.emplace_back(slot, kWholeRow); }
  /// Keeps everything recorded.
  void commit() noexcept { mapped_.clear(); }

 private:
  static constexpr int kWholeRow = -1;
  SlotArena* arena_;
  std::vector<std::pair<int, int>> mapped_;  // (slot, tensor or kWholeRow), in order
};

}  // namespace kvlab
