#pragma once
// Where a paged backend's blocks live when they are not one region allocated up front: the seam
// the elastic backend (elastic/, kvcached-style) plugs into PagedBackend, so that block tables,
// fork, copy-on-write, swap and prefix caching stay PagedBackend's while the storage decides when
// the memory under the blocks exists.
//
// Design note
//
// Rationale. kvcached backs an unchanged vLLM/SGLang block manager with physical pages mapped on
// demand: the block manager keeps its policy (which blocks a sequence holds), the page layer only
// decides which pages are mapped. The same split here keeps one implementation of paging.
//
// Approach. The pool runs a page order (paged/block_pool.hpp): its regions are page groups, open
// when mapped. The storage chooses the pool's order and region size, the address of every block
// (a base, a stride between K/V planes and one between blocks, both byte counts, so a per-layer
// and an interleaved page layout are both a PagedKv view), and opens regions before PagedBackend
// takes blocks: PagedBackend asks `usable` before it commits to an operation, calls `open` for the
// blocks it is about to take (all or nothing: the only call that maps), and `settle` after
// operations that free blocks (the storage may close wholly free regions).
//
// Limitations. Not thread-safe (PagedBackend serialises calls; a storage's own thread works only on
// regions no call can reach until begin_step() or open() waited for it). The hash prefix cache needs the
// LRU free order, so it cannot run over a page order.
#include <cstddef>
#include <cstdint>
#include <string>

#include "alloc/backend/kv_backend.hpp"
#include "paged/block_pool.hpp"
#include "paged/prefix_cache.hpp"

namespace kvlab {

/// Where block b of K/V plane p (p = 2 * layer + kv) starts: base + p * plane_stride + b * block_stride.
struct BlockLayout {
  std::byte* base = nullptr;  ///< nullptr: accounting only
  std::size_t plane_stride = 0;
  std::size_t block_stride = 0;
};

class BlockStorage {
 public:
  BlockStorage() = default;
  BlockStorage(const BlockStorage&) = delete;
  BlockStorage& operator=(const BlockStorage&) = delete;
  virtual ~BlockStorage() = default;

  /// The pool's blocks (a whole number of regions), free order (a page order) and region size.
  [[nodiscard]] virtual std::int32_t num_blocks() const noexcept = 0;
  [[nodiscard]] virtual FreeOrder free_order() const noexcept = 0;
  [[nodiscard]] virtual std::int32_t region_blocks() const noexcept = 0;
  /// Which open region the pool hands a block from (the pages order's placement).
  [[nodiscard]] virtual PagePlacement page_placement() const noexcept { return PagePlacement::fullest; }
  [[nodiscard]] virtual BlockLayout layout() const noexcept = 0;
  /// Blocks `pool` can hand out now, opening regions as needed: its open free blocks plus the
  /// closed regions' the storage could open (within its memory budget). No side effects.
  [[nodiscard]] virtual std::int64_t usable(const BlockPool& pool) const = 0;
  /// Opens regions until `pool` has `blocks` open free blocks. Throws OutOfMemory when it cannot
  /// (then the regions it opened stay open and free), a driver's error as itself.
  virtual void open(BlockPool& pool, std::int64_t blocks) = 0;
  /// Whether settle() would close anything now (O(1); PagedBackend then waits for its copies).
  [[nodiscard]] virtual bool wants_settle(const BlockPool& pool) const noexcept = 0;
  /// After blocks were freed: closes the regions the storage no longer wants open (the caller has
  /// waited for copies that may read them; the storage synchronises the device before it unmaps).
  virtual void settle(BlockPool& pool) = 0;
  /// At the start of a scheduler step, after PagedBackend settled (refills a reserve of open
  /// regions off the critical path, or waits for the refill prefetch() started).
  virtual void begin_step(BlockPool& pool) = 0;
  /// Once the step's kernels are queued (KvBackend::prefetch): background work for the next step
  /// may start here, on regions no block of this step lies on.
  virtual void prefetch(BlockPool& /*pool*/) {}
  /// Mapping work on the critical path so far (maps, unmaps, their measured seconds).
  [[nodiscard]] virtual StepCosts total_costs() const = 0;
  /// Physical memory the storage holds now (mapped pages).
  [[nodiscard]] virtual std::size_t held_bytes() const noexcept = 0;
  /// The storage's own counters (pages mapped, held bytes, ...), appended to the backend's.
  virtual void add_counters(BackendCounters& out) const = 0;
  /// The backend's name ("elastic-16-2m" ...) for a pool of blocks of `block_size` tokens.
  [[nodiscard]] virtual std::string backend_name(std::int32_t block_size, PrefixCacheMode cache) const = 0;
};

}  // namespace kvlab
