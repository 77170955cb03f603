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

enum class FreeOrder { lifo, lru, region };

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
  /// `region_blocks`: block ids per region (region order only; at least 1).
  explicit BlockPool(std::int32_t num_blocks, FreeOrder order = FreeOrder::lifo, std::int32_t region_blocks = 1);

  /// A free block with reference count 1, or nullopt (and nothing changes) when none is free.
  /// `near` (-1: none, else a block id, checked): the block the new one should follow, the
  /// sequence's last. Only region order uses it.
  [[nodiscard]] std::optional<BlockId> allocate(BlockId near = -1);
  /// The block allocate() would return now (nullopt when none is free). No side effects.
  [[nodiscard]] std::optional<BlockId> peek() const noexcept;
  /// Takes the free block `b` out of the free list (reference count 1). lru order only.
  void take(BlockId b);
  /// Adds a holder to an allocated block.
  void add_ref(BlockId b);
  /// Drops a holder; returns true when that freed the block.
  bool release(BlockId b);

  [[nodiscard]] FreeOrder order() const noexcept { return order_; }
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
  /// The free blocks in the order allocate() would hand them out (tests, debugging). O(free).
  /// Region order: ascending ids (there the order depends on each call's `near`).
  [[nodiscard]] std::vector<BlockId> free_list() const;

 private:
  void check(BlockId b) const;
  void push_free(BlockId b);
  void unlink(BlockId b);
  /// Region order: the block allocate(near) hands out (some block is free).
  [[nodiscard]] BlockId region_pick(BlockId near) const;
  /// Region order: moves `b` into or out of the free set, keeping its region's count.
  void region_insert(BlockId b);
  void region_erase(BlockId b);
  FreeOrder order_;
  std::int32_t region_blocks_ = 1;
  std::vector<std::int32_t> refs_;
  std::int32_t num_free_ = 0;
  std::vector<std::uint8_t> cached_;  // [block] marked cached
  std::int32_t num_free_cached_ = 0;
  std::vector<BlockId> free_;         // lifo: stack; low ids handed out first
  std::vector<BlockId> prev_, next_;  // lru: intrusive queue links (-1: none)
  BlockId head_ = -1, tail_ = -1;
  std::set<BlockId> free_set_;                               // region: the free ids, ascending
  std::vector<std::int32_t> region_free_;                    // region: [region] free blocks
  std::set<std::pair<std::int32_t, std::int32_t>> regions_;  // region: (-free, region), free > 0
};

}  // namespace kvlab
