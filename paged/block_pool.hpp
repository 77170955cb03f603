#pragma once
// A pool of fixed-size KV blocks identified by index: O(1) allocate and free (a LIFO free list),
// a reference count per block for sharing (fork, prefix caching). Metadata only: a block is an
// index and a count, never a pointer, so the same pool describes host and device memory and can
// be copied, checked and snapshotted freely (as in TensorRT-LLM's KV manager).
#include <cstdint>
#include <optional>
#include <vector>

namespace kvlab {

using BlockId = std::int32_t;

class BlockPool {
 public:
  explicit BlockPool(std::int32_t num_blocks);

  /// A free block with reference count 1, or nullopt (and nothing changes) when none is free.
  [[nodiscard]] std::optional<BlockId> allocate();
  /// Adds a holder to an allocated block.
  void add_ref(BlockId b);
  /// Drops a holder; returns true when that freed the block.
  bool release(BlockId b);

  [[nodiscard]] std::int32_t ref_count(BlockId b) const;
  [[nodiscard]] std::int32_t num_blocks() const noexcept { return static_cast<std::int32_t>(refs_.size()); }
  [[nodiscard]] std::int32_t num_free() const noexcept { return static_cast<std::int32_t>(free_.size()); }
  [[nodiscard]] std::int32_t num_used() const noexcept { return num_blocks() - num_free(); }

 private:
  void check(BlockId b) const;
  std::vector<std::int32_t> refs_;
  std::vector<BlockId> free_;  // stack; low ids handed out first
};

}  // namespace kvlab
