#pragma once
// A pool of fixed-size KV blocks identified by index: O(1) allocate and free, a reference count
// per block for sharing (fork, prefix caching). Metadata only: a block is an index and a count,
// never a pointer, so the same pool describes host and device memory and can be copied, checked
// and snapshotted freely (as in TensorRT-LLM's KV manager).
//
// Two free orders:
//  * lifo (default): a stack; the block freed last is handed out first, low ids first at start.
//  * lru: vLLM v1's free block queue, a doubly linked list threaded through two index arrays
//    (prev/next per block id): allocate takes the head, release appends to the tail, and take()
//    removes any free block in O(1) — how a prefix-cache hit revives a cached free block.
//
// A block can be marked cached (hash prefix caching: it has a cache entry); the pool counts the
// free blocks that are marked, in O(1) per change, so the accounting never scans the pool.
#include <cstdint>
#include <optional>
#include <vector>

namespace kvlab {

using BlockId = std::int32_t;

enum class FreeOrder { lifo, lru };

class BlockPool {
 public:
  explicit BlockPool(std::int32_t num_blocks, FreeOrder order = FreeOrder::lifo);

  /// A free block with reference count 1, or nullopt (and nothing changes) when none is free.
  [[nodiscard]] std::optional<BlockId> allocate();
  /// The block allocate() would return now (nullopt when none is free). No side effects.
  [[nodiscard]] std::optional<BlockId> peek() const noexcept;
  /// Takes the free block `b` out of the free list (reference count 1). lru order only.
  void take(BlockId b);
  /// Adds a holder to an allocated block.
  void add_ref(BlockId b);
  /// Drops a holder; returns true when that freed the block.
  bool release(BlockId b);

  [[nodiscard]] FreeOrder order() const noexcept { return order_; }
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
  [[nodiscard]] std::vector<BlockId> free_list() const;

 private:
  void check(BlockId b) const;
  void push_free(BlockId b);
  void unlink(BlockId b);
  FreeOrder order_;
  std::vector<std::int32_t> refs_;
  std::int32_t num_free_ = 0;
  std::vector<std::uint8_t> cached_;  // [block] marked cached
  std::int32_t num_free_cached_ = 0;
  std::vector<BlockId> free_;  // lifo: stack; low ids handed out first
  std::vector<BlockId> prev_, next_;  // lru: intrusive queue links (-1: none)
  BlockId head_ = -1, tail_ = -1;
};

}  // namespace kvlab
