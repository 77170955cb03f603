#pragma once
// Execute mode on the host: the KV a step computes is written before its kernels read it.
//
// Rationale. A real model writes each new token's K and V before attention reads them; a replay
// runs only the attention kernels. Unwritten, a host KV pool (contiguous and paged: malloc'd
// memory) is backed by Linux's shared zero page, so the kernels read one physical page (or the
// 2 MiB huge zero page) over and over from cache and never fetch the pool from DRAM, while vmm's
// pages (a memfd: a fault allocates a real page) are real memory. The same kernel then looked
// slower through vmm than through paged, and no backend's step time counted the reads that make
// decode memory-bound. Written, every backend reads memory that exists, as on a GPU (whose memory
// is never a zero page).
//
// Approach. After a step is planned (its slots claimed and mapped) and before its kernels run,
// the rows of the tokens it computes (a prefill chunk, each decode token) are written for the
// layers the replay executes, with small nonzero values, in one pass over the step's sequences.
// Not timed: the step's time is its kernels'.
//
// Limitations. Host only: a GPU's memory needs no filling, and one copy per row would cost more
// than its step. With --verify-kv the integrity checker writes the same rows (all layers) instead.
#include <cstdint>
#include <span>
#include <vector>

#include "alloc/backend/kv_backend.hpp"

namespace kvlab {

/// Tokens [from, from + count) of sequence `id` computed in one step.
struct ComputedTokens {
  SeqId id;
  std::int64_t from;
  std::int64_t count;
};

class KvFill {
 public:
  /// Writes layers [0, layers) of `backend` (a host backend with KV storage).
  KvFill(KvBackend& backend, int layers);

  /// Writes the K and V rows of every token of `tokens`.
  void write(std::span<const ComputedTokens> tokens);

  /// Rows written so far (a token's K or V row in one layer, all heads).
  [[nodiscard]] std::int64_t rows_written() const noexcept { return rows_; }

 private:
  KvBackend& b_;
  int layers_;
  std::vector<SeqId> ids_;
  std::int64_t rows_ = 0;
};

}  // namespace kvlab
