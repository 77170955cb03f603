#pragma once
// A pool of fixed-size KV blocks identified by index: O(1) allocate and free, a reference count
// per block for sharing (fork, prefix caching). Metadata only: a block is an index and a count,
// never a pointer, so the same pool describes host and device memory and can be copied, checked
// and snapshotted freely (as in TensorRT-LLM's KV manager).
//
// Three free orders:
//  * lifo (default): a stack; the block freed last is handed out first, low ids first at start.
//  * lru: vLLM v1's free block queue, a doubly linked list threaded through two index arrays
//    (prev/next per block id): allocate takes the head, release appends to the tail, and take()
//    removes any free block in O(1) — how a prefix-cache hit revives a cached free block.
//  * region (opt-in, `paged-B-region`): placement for the kernels' sake. Block ids fall into
//    regions of `region_blocks` consecutive ids (PagedBackend makes a region 2 MiB of a K or V
//    plane's blocks). allocate(near), with `near` the sequence's last block, hands out the lowest
//    free block after `near` in near's region, so a sequence's blocks run in ascending address
//    order there; otherwise (a new sequence, or nothing free after `near` in its region) the
//    lowest free block of the region with the most free blocks (the lowest such region). Two new
//    sequences may start in the same region and interleave there; nothing reserves a region for
//    one. Why: at block 16 the host decode kernel reads blocks placed this way at 0.98 of the
//    contiguous view's speed, against 0.95 for blocks shuffled over the pool (docs/kernels.md,
//    "Block placement").
//    O(log n) per operation (an ordered set of free ids, one of regions by free count); release
//    can throw out of memory here (a set node), and then changes nothing. Only which block is
//    handed out changes: how many blocks anything takes, and so every accounting figure, is the
//    same as under lifo.
//
//  * pages and pages_lifo (the elastic backend, elastic/): the pool's blocks lie on physical
//    pages (a region is one page group: the blocks whose bytes one mapping holds) that are mapped
//    on demand, so a region is open (mapped) or closed (not). Only blocks of open regions are handed
//    out; a closed region is all free, and opening one makes its blocks available. `pages`
//    (page-aware, kvcached's fix for idle memory) hands out a block of the open region with the
//    fewest free blocks (the one freed last there), so partly used pages fill up and empty ones
//    stay empty: open regions sit in buckets by free count (intrusive lists), each with a stack of
//    its free blocks, so an operation is O(1) (amortised: the lowest non-empty bucket is found
//    from a hint). `pages_lifo` (page-blind, the baseline) hands out the block freed last among
//    open regions, as a block manager that does not know about pages would. Opening or closing a
//    region is O(region blocks).
//    `pages` places by PagePlacement: `fullest` as above; `local` and `spread` keep a sequence's
//    blocks together on few regions, so that the regions empty when its blocks go (an idle prefix
//    cache evicted to its cap then leaves few regions partly used). allocate(near, run):
//    the first of a run of `run` new blocks (a prompt, a swapped-in sequence) goes to the fullest
//    open region that holds the whole run; a sequence's next block (run 0) goes to its last block's
//    region while that has a free block; otherwise `local` takes the fullest open region and
//    `spread` the emptiest, where the sequence's next blocks find room (spread holds more regions
//    while sequences run: measured in docs/elastic.md). O(region blocks) per call that looks for a
//    region, O(1) otherwise. The pool records regions that became wholly free (take_emptied),
//    for the owner to close when it wants the memory back.
//
// A block can be marked cached (hash prefix caching: it has a cache entry); the pool counts the
// free blocks that are marked, in O(1) per change, so the accounting never scans the pool.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace kvlab {

using BlockId = std::int32_t;

enum class FreeOrder { lifo, lru, region, pages, pages_lifo };

/// Which open region the `pages` order hands a block from (see above).
enum class PagePlacement : std::uint8_t { fullest, local, spread };

/// The bytes of one region as PagedBackend sizes it for region order: a 2 MiB huge page (host
/// THP, the CUDA VMM granularity) of a K or V plane.
inline constexpr std::size_t kRegionBytes = std::size_t{2} << 20;

/// Block ids per region for blocks of `block_bytes` (per K or V plane): at least 1.
[[nodiscard]] inline std::int32_t blocks_per_region(std::size_t block_bytes, std::size_t region_bytes = kRegionBytes) {
  const std::size_t blocks = region_bytes / (block_bytes == 0 ? 1 : block_bytes);
  return static_cast<std::int32_t>(blocks < 1 ? 1 : blocks > INT32_MAX ? INT32_MAX : blocks);
}

class BlockPool {
 public:
  /// `region_blocks`: block ids per region (region and page orders; at least 1). Page orders need
  /// a whole number of regions and start with every region closed. `placement`: the pages
  /// order's (fullest for every other order).
  explicit BlockPool(std::int32_t num_blocks, FreeOrder order = FreeOrder::lifo, std::int32_t region_blocks = 1,
                     PagePlacement placement = PagePlacement::fullest);

  /// A free block with reference count 1, or nullopt (and nothing changes) when none is free.
  /// `near` (-1: none, else a block id, checked): the block the new one should follow, the
  /// sequence's last. `run` (0: none): this block starts a run of `run` blocks the caller takes
  /// now. Region order uses `near`; pages order with local or spread placement both.
  [[nodiscard]] std::optional<BlockId> allocate(BlockId near = -1, std::int32_t run = 0);
  /// A free block of the open region `r` (pages order), nullopt when it has none. What compacting
  /// a cache uses to move blocks onto a chosen page group.
  [[nodiscard]] std::optional<BlockId> allocate_in(std::int32_t r);
  /// The block allocate() would return now (nullopt when none is free; page orders: none free in
  /// an open region). No side effects.
  [[nodiscard]] std::optional<BlockId> peek() const noexcept;
  /// Takes the free block `b` out of the free list (reference count 1). lru order only.
  void take(BlockId b);
  /// Adds a holder to an allocated block.
  void add_ref(BlockId b);
  /// Drops a holder; returns true when that freed the block.
  bool release(BlockId b);

  [[nodiscard]] FreeOrder order() const noexcept { return order_; }
  [[nodiscard]] PagePlacement placement() const noexcept { return placement_; }
  [[nodiscard]] std::int32_t region_blocks() const noexcept { return region_blocks_; }
  [[nodiscard]] std::int32_t ref_count(BlockId b) const;
  [[nodiscard]] std::int32_t num_blocks() const noexcept { return static_cast<std::int32_t>(refs_.size()); }
  [[nodiscard]] std::int32_t num_free() const noexcept { return num_free_; }
  [[nodiscard]] std::int32_t num_used() const noexcept { return num_blocks() - num_free(); }
  /// Marks or unmarks `b` as holding cached KV (any state, free or not).
  void set_cached(BlockId b, bool cached);
  [[nodiscard]] bool is_cached(BlockId b) const noexcept { return cached_[static_cast<std::size_t>(b)] != 0; }
  /// Free blocks marked cached. O(1).
  [[nodiscard]] std::int32_t num_free_cached() const noexcept { return num_free_cached_; }
  // --- page orders: regions opened (mapped) and closed ---
  [[nodiscard]] bool page_order() const noexcept {
    return order_ == FreeOrder::pages || order_ == FreeOrder::pages_lifo;
  }
  [[nodiscard]] std::int32_t num_regions() const noexcept { return static_cast<std::int32_t>(region_free_.size()); }
  [[nodiscard]] std::int32_t region_of(BlockId b) const noexcept { return b / region_blocks_; }
  /// Free blocks in region `r` (open or closed).
  [[nodiscard]] std::int32_t region_free(std::int32_t r) const { return region_free_.at(static_cast<std::size_t>(r)); }
  [[nodiscard]] bool is_open(std::int32_t r) const { return open_.at(static_cast<std::size_t>(r)) != 0; }
  /// Makes the closed region `r`'s blocks available (page orders).
  void open_region(std::int32_t r);
  /// Takes the open, wholly free region `r` out of use (page orders).
  void close_region(std::int32_t r);
  /// Free blocks in open regions: what allocate() can hand out without opening one. O(1).
  [[nodiscard]] std::int32_t num_open_free() const noexcept { return num_open_free_; }
  [[nodiscard]] std::int32_t num_open() const noexcept { return num_open_; }
  /// Open regions with every block free. O(1).
  [[nodiscard]] std::int32_t num_open_empty() const noexcept { return num_open_empty_; }
  /// Regions that became wholly free since the last call, and are still open and wholly free.
  [[nodiscard]] std::vector<std::int32_t> take_emptied();

  /// The free blocks in the order allocate() would hand them out (tests, debugging). O(free).
  /// Region order: ascending ids (there the order depends on each call's `near`).
  [[nodiscard]] std::vector<BlockId> free_list() const;

 private:
  void check(BlockId b) const;
  /// Page orders: hands out the free block `b` of an open region.
  BlockId take_page_block(BlockId b);
  void push_free(BlockId b);
  void unlink(BlockId b);
  /// Region order: the block allocate(near) hands out (some block is free).
  [[nodiscard]] BlockId region_pick(BlockId near) const;
  /// Region order: moves `b` into or out of the free set, keeping its region's count.
  void region_insert(BlockId b);
  void region_erase(BlockId b);
  /// The regions_ key of a region with `n` free blocks: most free first (region), fewest (pages).
  [[nodiscard]] std::int32_t region_key(std::int32_t n) const noexcept { return order_ == FreeOrder::region ? -n : n; }
  /// Links `b` into the free list without counting it (lru: at the tail; pages_lifo: at the head).
  void list_insert(BlockId b);
  void list_remove(BlockId b);
  /// pages: the open region with the fewest free blocks (-1: none has any).
  [[nodiscard]] std::int32_t fullest_region() const noexcept;
  /// pages: the open region with the fewest free blocks that has `n` free at least (-1: none).
  [[nodiscard]] std::int32_t fullest_region_with(std::int32_t n) const noexcept;
  /// pages: the open region with the most free blocks (-1: none has any).
  [[nodiscard]] std::int32_t emptiest_region() const noexcept;
  /// pages, local or spread placement: the region allocate(near, run) takes from (-1: the fullest).
  [[nodiscard]] std::int32_t placed_region(BlockId near, std::int32_t run) const noexcept;
  /// pages: moves region `r` between free-count buckets (`from`/`to` 0: in none).
  void rebucket(std::int32_t r, std::int32_t from, std::int32_t to) noexcept;
  FreeOrder order_;
  std::int32_t region_blocks_ = 1;
  PagePlacement placement_ = PagePlacement::fullest;
  std::vector<std::int32_t> refs_;
  std::int32_t num_free_ = 0;
  std::vector<std::uint8_t> cached_;  // [block] marked cached
  std::int32_t num_free_cached_ = 0;
  std::vector<BlockId> free_;         // lifo: stack; low ids handed out first
  std::vector<BlockId> prev_, next_;  // lru: intrusive queue links (-1: none)
  BlockId head_ = -1, tail_ = -1;
  std::set<BlockId> free_set_;             // region: the free ids, ascending
  std::vector<std::int32_t> region_free_;  // region: [region] free blocks
  std::set<std::pair<std::int32_t, std::int32_t>>
      regions_;                     // region: (-free, region), free > 0; pages: (free, region), open
  std::vector<std::uint8_t> open_;  // page orders: [region] open
  std::int32_t num_open_free_ = 0, num_open_ = 0, num_open_empty_ = 0;
  std::vector<std::int32_t> emptied_;  // page orders: regions that became wholly free
  std::vector<std::uint8_t> listed_;   // [region] in emptied_
  // pages: each open region's free blocks as a stack (rhead_, rnext_), open regions with free
  // blocks in buckets by free count (bhead_[n], bprev_/bnext_ per region), bmin_ <= the lowest
  // non-empty bucket.
  std::vector<BlockId> rhead_, rnext_;
  std::vector<std::int32_t> bhead_, bprev_, bnext_;
  mutable std::int32_t bmin_ = 1;
};

}  // namespace kvlab
