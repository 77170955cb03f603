#include "vmm/slot_arena.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <string>

#include "alloc/core/error.hpp"

namespace kvlab {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

SlotArena::SlotArena(VmDriver* driver, const ArenaShape& shape, PageFreeOrder order) : driver_(driver), shape_(shape) {
  KVLAB_EXPECTS(
      shape.tensors >= 1 && shape.slots >= 1 && shape.page_bytes > 0 && shape.slot_bytes % shape.page_bytes == 0,
      "a slot arena needs tensors, slots and a slot size that is a whole number of pages");
  const long double va =
      static_cast<long double>(shape.tensors) * shape.slots * static_cast<long double>(shape.slot_bytes);
  KVLAB_EXPECTS(va < static_cast<long double>(std::size_t{1} << 62),
                "the virtual reservation would not fit in 64 bits");
  reservation_bytes_ =
      static_cast<std::size_t>(shape.tensors) * static_cast<std::size_t>(shape.slots) * shape.slot_bytes;
  if (driver_ != nullptr) {
    const std::size_t page = shape.page_bytes;
    base_ = static_cast<std::byte*>(
        driver_->reserve(reservation_bytes_, std::has_single_bit(page) ? page : std::size_t{0}));
    try {
      pool_ = std::make_unique<PhysicalPagePool>(driver_, page, shape.num_pages, order);
    } catch (...) {
      try {
        driver_->free_reservation(base_, reservation_bytes_);
      } catch (...) {  // the pool's error is the one to report; the driver's leak report shows this one
      }
      throw;
    }
  } else {
    pool_ = std::make_unique<PhysicalPagePool>(nullptr, shape.page_bytes, shape.num_pages, order);
  }
  grid_.resize(static_cast<std::size_t>(shape.slots));
  rows_.assign(static_cast<std::size_t>(shape.tensors) * static_cast<std::size_t>(shape.slots), 0);
  held_.assign(static_cast<std::size_t>(shape.slots), 0);
  bounds_.assign(static_cast<std::size_t>(shape.slots), RowBounds{0, 0, shape.tensors, shape.tensors});
  refs_.assign(static_cast<std::size_t>(shape.num_pages), 0);
  freed_row_.resize(static_cast<std::size_t>(shape.tensors));
}

SlotArena::~SlotArena() {
  if (driver_ == nullptr) return;
  // Everything goes back: pages unmapped (after the device is idle), handles released (the pool),
  // the reservation freed. A driver error here cannot be reported; the driver's leak accounting
  // (the double's leak_report, PosixVmDriver::usage) shows it. The owner's hook may be gone.
  on_page_freed_ = nullptr;
  try {
    if (total_mappings() > 0) synchronize(MapOrigin::critical);
  } catch (...) {
  }
  bool clean = true;
  for (int s = 0; s < shape_.slots; ++s)
    for (int t = 0; t < shape_.tensors; ++t)
      while (rows_[column(s, t)] > 0) {
        try {
          unmap_tail(s, t, MapOrigin::critical);
        } catch (...) {
          clean = false;
          break;
        }
      }
  pool_.reset();
  if (clean) {
    try {
      driver_->free_reservation(base_, reservation_bytes_);
    } catch (...) {
    }
  }
}

std::byte* SlotArena::slot_base(int tensor, int slot) const noexcept {
  if (base_ == nullptr) return nullptr;
  return base_ +
         (static_cast<std::size_t>(tensor) * static_cast<std::size_t>(shape_.slots) + static_cast<std::size_t>(slot)) *
             shape_.slot_bytes;
}

std::byte* SlotArena::page_va(int slot, int tensor, std::int64_t row) const noexcept {
  return slot_base(tensor, slot) + static_cast<std::size_t>(row) * shape_.page_bytes;
}

void SlotArena::push_page(int slot, int tensor, PageId page) {
  std::vector<PageId>& grid = grid_[static_cast<std::size_t>(slot)];
  const auto row = static_cast<std::size_t>(rows_[column(slot, tensor)]);
  const auto T = static_cast<std::size_t>(shape_.tensors);
  if (grid.size() < (row + 1) * T) grid.resize((row + 1) * T, kNoPage);
  grid[row * T + static_cast<std::size_t>(tensor)] = page;
  ++rows_[column(slot, tensor)];
}

PageId SlotArena::pop_page(int slot, int tensor) noexcept {
  std::vector<PageId>& grid = grid_[static_cast<std::size_t>(slot)];
  const auto row = static_cast<std::size_t>(--rows_[column(slot, tensor)]);
  const auto T = static_cast<std::size_t>(shape_.tensors);
  PageId& cell = grid[row * T + static_cast<std::size_t>(tensor)];
  const PageId page = cell;
  cell = kNoPage;
  return page;
}

std::int64_t SlotArena::total_mappings() const noexcept {
  std::int64_t n = 0;
  for (const std::int64_t h : held_) n += h;
  return n;
}

void SlotArena::rescan_bounds(int slot) noexcept {
  RowBounds b{INT64_MAX, 0, 0, 0};
  for (int t = 0; t < shape_.tensors; ++t) {
    const std::int64_t rows = rows_[column(slot, t)];
    if (rows < b.min) b = {rows, b.max, 0, b.at_max};
    if (rows > b.max) b = {b.min, rows, b.at_min, 0};
    b.at_min += rows == b.min;
    b.at_max += rows == b.max;
  }
  bounds_[static_cast<std::size_t>(slot)] = b;
}

void SlotArena::track_rows(int slot, std::int64_t before, bool grew) noexcept {
  RowBounds& b = bounds_[static_cast<std::size_t>(slot)];
  const std::int64_t after = grew ? before + 1 : before - 1;
  // The extreme the tensor moves towards.
  if (grew) {
    if (after > b.max) b.max = after, b.at_max = 0;
    b.at_max += after == b.max;
  } else {
    if (after < b.min) b.min = after, b.at_min = 0;
    b.at_min += after == b.min;
  }
  // The extreme it may leave: when it was the last tensor there, the new extreme is found anew.
  int& left = grew ? b.at_min : b.at_max;
  if (before == (grew ? b.min : b.max) && --left == 0) rescan_bounds(slot);
}

void SlotArena::book_mapped(int slot, int tensor, PageId page) {
  push_page(slot, tensor, page);
  track_rows(slot, rows_[column(slot, tensor)] - 1, true);
  ++held_[static_cast<std::size_t>(slot)];
  ++refs_[static_cast<std::size_t>(page)];
}

void SlotArena::return_to_pool(PageId page) {
  pool_->release(page);
  if (on_page_freed_) on_page_freed_(page);
}

bool SlotArena::map_tail(int slot, int tensor, PageId page, MapOrigin origin) {
  const std::int64_t row = rows_[column(slot, tensor)];
  const auto give_back = [&] {
    if (refs_[static_cast<std::size_t>(page)] == 0) return_to_pool(page);
  };
  double seconds = 0;
  if (driver_ != nullptr) {
    std::byte* va = page_va(slot, tensor, row);
    const auto t0 = std::chrono::steady_clock::now();
    bool ok = false;
    try {
      ok = driver_->map(va, shape_.page_bytes, pool_->handle(page));
    } catch (...) {
      give_back();
      throw;
    }
    if (!ok) {
      give_back();
      return false;
    }
    try {
      driver_->set_access(va, shape_.page_bytes);
    } catch (...) {
      try {
        driver_->unmap(va, shape_.page_bytes);
        give_back();
      } catch (...) {
        book_mapped(slot, tensor, page);  // stuck mapped: kept in the books (reclaimed like any page beyond the length)
      }
      throw;
    }
    seconds = seconds_since(t0);
  }
  book_mapped(slot, tensor, page);
  DriverActivity& a = activity_[static_cast<std::size_t>(origin)];
  ++a.maps;
  a.map_seconds += seconds;
  return true;
}

bool SlotArena::unmap_tail(int slot, int tensor, MapOrigin origin) {
  const std::int64_t rows = rows_[column(slot, tensor)];
  KVLAB_ASSERT(rows > 0);
  double seconds = 0;
  if (driver_ != nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    driver_->unmap(page_va(slot, tensor, rows - 1), shape_.page_bytes);
    seconds = seconds_since(t0);
  }
  const PageId page = pop_page(slot, tensor);
  track_rows(slot, rows, false);
  // The grid keeps top_rows(slot) rows.
  grid_[static_cast<std::size_t>(slot)].resize(static_cast<std::size_t>(top_rows(slot)) *
                                               static_cast<std::size_t>(shape_.tensors));
  --held_[static_cast<std::size_t>(slot)];
  const bool freed = --refs_[static_cast<std::size_t>(page)] == 0;
  if (freed) return_to_pool(page);
  DriverActivity& a = activity_[static_cast<std::size_t>(origin)];
  ++a.unmaps;
  a.unmap_seconds += seconds;
  return freed;
}

void SlotArena::map_row(int slot, std::span<const PageId> pages, MapOrigin origin) {
  KVLAB_ASSERT(driver_ == nullptr && whole_rows(slot) && pages.size() == static_cast<std::size_t>(shape_.tensors));
  grid_[static_cast<std::size_t>(slot)].insert(grid_[static_cast<std::size_t>(slot)].end(), pages.begin(), pages.end());
  const std::size_t first = column(slot, 0);
  for (std::size_t t = 0; t < pages.size(); ++t) {
    ++rows_[first + t];
    ++refs_[static_cast<std::size_t>(pages[t])];
  }
  RowBounds& b = bounds_[static_cast<std::size_t>(slot)];
  b = {b.min + 1, b.max + 1, shape_.tensors, shape_.tensors};
  held_[static_cast<std::size_t>(slot)] += shape_.tensors;
  activity_[static_cast<std::size_t>(origin)].maps += shape_.tensors;
}

std::int64_t SlotArena::unmap_row(int slot, MapOrigin origin) {
  KVLAB_ASSERT(whole_rows(slot) && complete_rows(slot) > 0);
  std::int64_t freed = 0;
  if (driver_ != nullptr) {  // one driver call per page; the books follow each one
    for (int t = shape_.tensors - 1; t >= 0; --t) freed += unmap_tail(slot, t, origin) ? 1 : 0;
    return freed;
  }
  std::vector<PageId>& grid = grid_[static_cast<std::size_t>(slot)];
  const auto T = static_cast<std::size_t>(shape_.tensors);
  // Local pointers: the loop runs for every page a replay reclaims, and through the members the
  // compiler reloads each vector's data after every store.
  const PageId* row = grid.data() + (grid.size() - T);
  std::int32_t* rows = rows_.data() + column(slot, 0);
  std::int32_t* refs = refs_.data();
  PageId* out = freed_row_.data();  // sized T by the constructor
  std::size_t n = 0;
  for (std::size_t t = T; t-- > 0;) {
    const PageId page = row[t];
    --rows[t];
    out[n] = page;
    n += --refs[static_cast<std::size_t>(page)] == 0;
  }
  grid.resize(grid.size() - T);
  const std::span<const PageId> gone(out, n);
  pool_->release_pages(gone);
  if (on_page_freed_)
    for (const PageId page : gone) on_page_freed_(page);
  freed = static_cast<std::int64_t>(n);
  RowBounds& b = bounds_[static_cast<std::size_t>(slot)];
  b = {b.min - 1, b.max - 1, shape_.tensors, shape_.tensors};
  held_[static_cast<std::size_t>(slot)] -= shape_.tensors;
  activity_[static_cast<std::size_t>(origin)].unmaps += shape_.tensors;
  return freed;
}

void SlotArena::unmap_slot(int slot, MapOrigin origin) {
  if (held(slot) == 0) return;
  synchronize(origin);
  for (int t = shape_.tensors - 1; t >= 0; --t)
    while (rows_[column(slot, t)] > 0) unmap_tail(slot, t, origin);
}

void SlotArena::synchronize(MapOrigin origin) {
  if (driver_ == nullptr) return;
  const auto t0 = std::chrono::steady_clock::now();
  driver_->synchronize();
  ++synchronizations_;
  activity_[static_cast<std::size_t>(origin)].unmap_seconds += seconds_since(t0);
}

MapTransaction::~MapTransaction() {
  for (auto it = mapped_.rbegin(); it != mapped_.rend(); ++it) {
    try {
      if (it->second == kWholeRow) {
        arena_->unmap_row(it->first, MapOrigin::critical);
      } else {
        arena_->unmap_tail(it->first, it->second, MapOrigin::critical);
      }
    } catch (...) {
      break;  // the rest stay mapped and in the books (beyond the owner's length: reclaimable)
    }
  }
}

}  // namespace kvlab
