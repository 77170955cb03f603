#pragma once
// The interface every KV-cache backend implements (contiguous, paged, vmm). docs/backend-interface.md
// explains the reasoning. In short:
//  * the backend owns policy: which bytes, blocks or pages a sequence holds; a MemoryResource only
//    supplies the bytes;
//  * every mutating call is all-or-nothing: on OutOfMemory the backend is exactly as before, so the
//    replayer can count the failure and carry on;
//  * can_admit/can_grow answer without side effects, so a scheduler can ask before it commits;
//  * kernels never see the backend, only the KvView it hands out for a prepared batch.
#include <cstdint>
#include <span>
#include <string>

#include "alloc/device.hpp"
#include "alloc/memory_breakdown.hpp"
#include "alloc/model_geometry.hpp"
#include "kernels/kv_view.hpp"

namespace kvlab {

using SeqId = std::int64_t;

/// What a scheduler knows about a sequence when it admits it.
struct SequenceSpec {
  std::int64_t prompt_tokens = 0;
  /// Tokens the sequence will hold when it finishes (prompt + output). Reservation policies that
  /// need foresight (oracle, pow2) and the reserved/internal split of the accounting use it.
  std::int64_t final_tokens = 0;
  /// Prefix caching (docs/prefix-caching.md). The prompt's token ids, non-owning and read only
  /// during admit/can_admit; empty: unknown, the sequence neither hits nor fills the cache. When
  /// given it must hold at least `prompt_tokens` ids (only the first `prompt_tokens` are used).
  std::span<const std::int32_t> prompt_token_ids = {};
  /// Extra keys mixed into the key of the sequence's first block (a per-tenant salt, a LoRA id):
  /// sequences with different extra keys never share cached blocks. Non-owning, like the ids.
  std::span<const std::int64_t> extra_keys = {};
};

/// Prefix-cache counters of a backend (all zero for backends without a prefix cache).
struct PrefixCacheStats {
  std::int64_t hits = 0;             ///< prompt tokens whose KV came from the cache at admit
  std::int64_t queries = 0;          ///< prompt tokens looked up (admits with token ids)
  std::int64_t evictions = 0;        ///< cached blocks whose entry was dropped to reuse the block
  std::int64_t lookup_ns = 0;        ///< total wall time of the lookups of successful admits
  std::int64_t inserted_blocks = 0;  ///< blocks entered into the cache
};

/// Per-batch arrays prepared by prepare_batch, in memory the kernels can read.
struct PreparedBatch {
  int batch = 0;
  const std::int32_t* seq_lens = nullptr;  ///< [batch] in the backend's device memory
};

class KvBackend {
 public:
  virtual ~KvBackend() = default;

  /// e.g. "contiguous-max", "paged-b16", "vmm-64k".
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual const ModelGeometry& model() const noexcept = 0;
  [[nodiscard]] virtual Device device() const noexcept = 0;
  /// True when K/V bytes really exist (execute mode); false for accounting-only backends.
  [[nodiscard]] virtual bool has_storage() const noexcept = 0;
  /// Longest sequence (tokens) this backend can hold.
  [[nodiscard]] virtual std::int64_t max_seq_len() const noexcept = 0;

  /// Whether admit(spec, initial_tokens) would succeed now. No side effects.
  [[nodiscard]] virtual bool can_admit(const SequenceSpec& spec, std::int64_t initial_tokens) const = 0;
  /// Starts sequence `id` holding `initial_tokens` tokens (their KV slots, not yet written).
  /// Throws OutOfMemory (no state change) or InvalidArgument (duplicate id, bad lengths).
  virtual void admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens) = 0;
  /// Whether grow(id, n) would succeed now. No side effects.
  [[nodiscard]] virtual bool can_grow(SeqId id, std::int64_t n) const = 0;
  /// Appends n token slots to sequence `id`. Throws OutOfMemory with no state change.
  virtual void grow(SeqId id, std::int64_t n) = 0;
  /// Starts `child` as a copy of `parent` (its tokens and future), sharing memory where the
  /// backend can. Throws OutOfMemory with no state change.
  virtual void fork(SeqId parent, SeqId child) = 0;
  /// Ends sequence `id` and returns its memory to the backend.
  virtual void release(SeqId id) = 0;

  /// Preemption by swapping: swap_out moves a sequence's KV to host memory and frees its device
  /// memory; swap_in brings the same bytes back. Backends that cannot swap say so here, and their
  /// swap calls throw InvalidArgument.
  [[nodiscard]] virtual bool supports_swap() const noexcept { return false; }
  virtual void swap_out(SeqId id);
  [[nodiscard]] virtual bool can_swap_in(SeqId id) const;
  /// Throws OutOfMemory with no state change when the device memory is not there.
  virtual void swap_in(SeqId id);
  [[nodiscard]] virtual bool is_swapped(SeqId id) const;

  /// Prompt tokens an admission of `spec` would find in the prefix cache if its whole prompt were
  /// admitted at once. No side effects; 0 without a prefix cache. With chunked prefill the
  /// replayer admits the hit plus the first chunk, so a long cached prompt is not cut at the chunk.
  [[nodiscard]] virtual std::int64_t cached_prefix_tokens(const SequenceSpec& spec) const {
    (void)spec;
    return 0;
  }

  [[nodiscard]] virtual bool contains(SeqId id) const = 0;
  [[nodiscard]] virtual std::int64_t length(SeqId id) const = 0;
  [[nodiscard]] virtual std::size_t num_sequences() const noexcept = 0;

  /// Prompt tokens of `id` whose KV came from the prefix cache at admit: the replayer skips their
  /// prefill. 0 for backends without a prefix cache, for forks and for sequences admitted without
  /// token ids.
  [[nodiscard]] virtual std::int64_t cached_tokens(SeqId id) const {
    (void)id;
    return 0;
  }
  /// Counters of the prefix cache since construction (zeros without one).
  [[nodiscard]] virtual PrefixCacheStats prefix_cache_stats() const { return {}; }

  /// Builds the per-batch arrays (sequence bases or block tables, lengths) for `seqs`, in order.
  /// Views from layer_view() refer to them until the next prepare_batch or mutation.
  virtual PreparedBatch prepare_batch(std::span<const SeqId> seqs) = 0;
  /// The kernel view of one layer of the prepared batch. Requires has_storage().
  [[nodiscard]] virtual KvView layer_view(int layer) const = 0;

  /// Where every byte of capacity is now. `blocked`, when given, is the admission that is waiting
  /// for memory: free holes too small for it count as external fragmentation.
  [[nodiscard]] virtual MemoryBreakdown breakdown(const SequenceSpec* blocked = nullptr) const = 0;
};

}  // namespace kvlab
