#pragma once
// Physical pages mapped on demand under a paged backend's blocks: the storage of the elastic
// backend family (`elastic-B[-PAGE]...`, docs/elastic.md), after kvcached (ovg-project/kvcached,
// the memory layer of Prism, arXiv 2505.04021).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "alloc/core/model_geometry.hpp"
#include "alloc/memory/physical_budget.hpp"
#include "paged/block_storage.hpp"
#include "vmm/background_mapper.hpp"
#include "vmm/vm_driver.hpp"

namespace kvlab {

/// How a page group's bytes are laid out.
///  * per_layer (kvcached's default for vLLM): every layer's K and V is a tensor of its own; a
///    page group is page g of each of the 2L tensors, so a block's bytes are spread over 2L pages.
///  * interleaved: one tensor [block][layer][K|V][B][heads][dim]; a page group is one page that
///    holds whole blocks of every layer (kvcached measured this choice at +56 % attention time).
enum class ElasticLayout : std::uint8_t { per_layer, interleaved };

/// Which open page a new block comes from.
///  * fullest (page-aware, kvcached's fix): the page with the fewest free blocks, so pages empty.
///  * first_free (page-blind, the baseline): the block freed last, wherever it lies.
///  * local (`-local`): a sequence's blocks kept together: a prompt on the fullest page group that
///    holds it whole, a sequence's next block beside its last one, else the fullest group.
///  * spread (`-spread`): as local, but a sequence whose group is full moves to the emptiest open
///    group (more groups held while sequences run, fewer partly used ones once they end).
///  (BlockPool's PagePlacement; docs/elastic.md measures all four.)
enum class ElasticAllocation : std::uint8_t { fullest, first_free, local, spread };

struct ElasticConfig {
  ModelGeometry model;
  std::int32_t block_size = 16;                   ///< tokens per block
  std::size_t page_bytes = std::size_t{2} << 20;  ///< one mapping (the CUDA granularity by default)
  std::size_t capacity_bytes = 0;                 ///< the virtual range: page groups that fit it
  ElasticLayout layout = ElasticLayout::per_layer;
  ElasticAllocation allocation = ElasticAllocation::fullest;
  /// Wholly free page groups kept mapped (kvcached's reserve): refilled to this many at each step
  /// start off the critical path (kvcached's MIN_RESERVED_PAGES); an allocation that finds none
  /// maps on the critical path (charged to the clock).
  std::int32_t reserve_groups = 1;
  /// Groups that empty stay mapped while at most this many are wholly free (kvcached's
  /// MAX_RESERVED_PAGES: freed pages go back to the reserve up to it, and only beyond it are
  /// unmapped). -1: reserve_groups. At least reserve_groups.
  std::int32_t retain_groups = -1;
  /// Refill the reserve from prefetch() (once a step's kernels are queued) on a thread of its own
  /// that maps while the step computes, as kvcached's page-preallocation thread does; the next
  /// begin_step() or open() waits for it (that wait is critical-path mapping). With no driver the
  /// same refill happens at once (nothing to map). False: begin_step() refills on the caller.
  bool overlap = false;
  /// Maps the pages; nullptr: accounting only (no memory, the same decisions and counts).
  std::shared_ptr<VmDriver> driver;
  /// The physical memory this backend shares with others; nullptr: a budget of its own capacity.
  std::shared_ptr<PhysicalBudget> budget;
};

/// What is wrong with `config` (blocks that need more than 64 pages of a plane to come out whole, a
/// capacity below one page group or above 2^31 blocks), or "" when nothing is. The constructor throws it.
[[nodiscard]] std::string elastic_config_problem(const ElasticConfig& config);

// Design note
//
// Rationale. kvcached maps KV pages only while blocks on them are in use and returns them when
// they empty, so models sharing a GPU hold what their live KV needs instead of a static share.
// Two choices decide how much memory an idle model keeps: which page a new block comes from (a
// page-blind free list scatters blocks, so few pages ever empty) and the reserve of mapped free
// pages kept to hide mapping latency.
//
// Approach. A page group is the fewest consecutive pages of each plane (per_layer) or of the one
// tensor (interleaved) that hold a whole number of blocks, and group g holds blocks
// [g * per_group, (g+1) * per_group) in every plane; the pool (paged/block_pool.hpp, a page order) hands out blocks of
// open groups only. open() maps groups (the group closed last first: create, map, set access for each of its pages,
// rolled back on failure) and opens them in the pool; settle() closes wholly free groups beyond the
// retained count (kvcached's MAX_RESERVED_PAGES; synchronise, unmap, release; a refused unmap keeps the group aside and
// retries it, so releasing a sequence never fails for the driver's sake); begin_step() refills the reserve (kvcached's
// MIN_RESERVED_PAGES: maps up to it, which the retained count may exceed). The budget is taken
// before a group is mapped and given back after it is unmapped.
//
// With `overlap`, prefetch() chooses the reserve's groups, takes their budget and opens them in the
// pool as pending, and a BackgroundMapper maps them; no block of a pending group is handed out
// before begin_step() or open() waited for the mapper (and closed again what it failed to map), and
// settle() never closes a pending group, so the thread only ever touches pages no other call
// reaches. Every decision is made on the caller's thread, in the same order whatever the thread's
// timing, so a replay's counts do not depend on it; only the measured wait does.
//
// Limitations. Not thread-safe (the caller's calls are serialised; the mapper's thread is the only
// other). Without `overlap` the reserve is refilled at step starts on the caller's thread (the
// clock counts those maps as off the critical path, as kvcached's background thread would make
// them). A block size that does not divide the page makes groups of several consecutive pages per
// plane (up to 64), so memory is held in larger units. Cached prefix blocks keep their pages mapped.
class ElasticPages final : public BlockStorage {
 public:
  /// Throws InvalidArgument for a page that holds no whole number of blocks or a capacity below one
  /// page group, OutOfMemory when no address space is left.
  explicit ElasticPages(ElasticConfig config);
  ~ElasticPages() override;

  [[nodiscard]] std::int32_t num_blocks() const noexcept override { return groups_ * per_group_; }
  [[nodiscard]] FreeOrder free_order() const noexcept override;
  [[nodiscard]] std::int32_t region_blocks() const noexcept override { return per_group_; }
  [[nodiscard]] PagePlacement page_placement() const noexcept override;
  [[nodiscard]] BlockLayout layout() const noexcept override { return layout_; }
  [[nodiscard]] std::int64_t usable(const BlockPool& pool) const override;
  void open(BlockPool& pool, std::int64_t blocks) override;
  [[nodiscard]] bool wants_settle(const BlockPool& pool) const noexcept override;
  void settle(BlockPool& pool) override;
  void begin_step(BlockPool& pool) override;
  void prefetch(BlockPool& pool) override;
  [[nodiscard]] StepCosts total_costs() const override { return critical_; }
  void add_counters(BackendCounters& out) const override;
  [[nodiscard]] std::string backend_name(std::int32_t block_size, PrefixCacheMode cache) const override;

  [[nodiscard]] std::size_t group_bytes() const noexcept { return group_bytes_; }
  /// Bytes mapped now (held by this backend).
  [[nodiscard]] std::size_t held_bytes() const noexcept override {
    return static_cast<std::size_t>(open_) * group_bytes_;
  }
  [[nodiscard]] const PhysicalBudget& budget() const noexcept { return *config_.budget; }

 private:
  /// Empty groups settle() keeps mapped (retain_groups, or the reserve).
  [[nodiscard]] std::int32_t retain() const noexcept {
    return config_.retain_groups >= 0 ? config_.retain_groups : config_.reserve_groups;
  }
  /// Maps every page of group `g` (all or nothing). Throws OutOfMemory when the budget or the
  /// driver has no memory left. `critical`: on the critical path (counted in the step costs).
  void map_group(std::int32_t g, bool critical);
  /// The driver's part of map_group: creates, maps and opens access to every page of `g`, rolling
  /// back what it did when one fails (then throws). Touches only group g's pages.
  void map_pages(std::int32_t g);
  /// Refills the reserve: opens closed groups in `pool` until it has reserve_groups empty ones
  /// (within the budget). `background`: queue their mapping on the mapper (pending) instead.
  void refill(BlockPool& pool, bool background);
  /// Waits for the mapper's queued groups (counting the wait as critical-path mapping), then closes
  /// in `pool` the groups it failed to map. Rethrows a driver error (not out-of-memory) it met.
  void drain(BlockPool& pool);
  /// Unmaps and releases what of group `g` is mapped or created (resumable after a failure).
  void unmap_group(std::int32_t g);
  /// Returns group `g` (closed in the pool) to the driver and the budget; when the driver refuses,
  /// keeps it for a retry (never throws a driver error).
  void close(std::int32_t g);
  /// Tries again to return the groups whose unmapping the driver refused.
  void retry_refused();
  /// The address of page `i` (0 .. pages_per_group - 1) of group `g`.
  [[nodiscard]] std::byte* page_address(std::int32_t g, std::int32_t i) const noexcept;
  /// Opens a closed group in `pool` (the one closed last; the lowest at first), mapping it. False
  /// when every group is open.
  bool open_one(BlockPool& pool, bool critical);

  ElasticConfig config_;
  std::size_t block_bytes_ = 0;  // one block of one plane
  std::int32_t per_group_ = 0, groups_ = 0, pages_per_group_ = 0;
  std::size_t group_bytes_ = 0;
  std::size_t span_ = 1;  // consecutive pages of each plane in a group
  void* reservation_ = nullptr;
  std::size_t reservation_bytes_ = 0;
  BlockLayout layout_;
  std::vector<PhysHandle> handles_;  // [group][page]
  static constexpr std::uint8_t kNone = 0, kCreated = 1, kMapped = 2;
  std::vector<std::uint8_t> state_;  // [group][page]: kNone, kCreated or kMapped (with a driver)
  std::vector<std::int32_t> stuck_;  // groups closed in the pool whose unmapping the driver refused
  std::int64_t refused_unmaps_ = 0;
  std::vector<std::int32_t> closed_;  // closed groups, the next to open last
  std::int32_t open_ = 0;
  StepCosts critical_;  // maps and unmaps on the critical path
  std::int64_t background_maps_ = 0;
  // overlap: groups queued on the mapper and not yet drained (caller's thread only), the ones it
  // mapped or failed to map and the first driver error it met (guarded by mutex_), the wait for it.
  std::vector<std::int32_t> pending_;
  std::vector<std::int32_t> mapped_by_thread_, failed_by_thread_;
  std::exception_ptr thread_error_;
  double thread_map_s_ = 0;   // the thread's map time not yet collected (mutex_)
  double reserve_map_s_ = 0;  // the reserve's maps, measured on whichever thread made them
  double overlap_wait_s_ = 0;
  std::mutex mutex_;
  std::unique_ptr<BackgroundMapper> mapper_;  // last: stopped before anything it touches goes
};

}  // namespace kvlab
