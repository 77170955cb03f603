#pragma once
// The one front door every KV-cache backend (contiguous, paged, vmm, and any new one) is reached
// through. docs/backend-interface.md explains the reasoning and shows a new backend written
// against it. In short:
//  * the backend owns policy: which bytes, blocks or pages a sequence holds; a MemoryResource only
//    supplies the bytes;
//  * the public calls are not virtual (RMM's pattern): each validates its arguments once, the same
//    way for every backend (one set of preconditions: lengths, ids, swap state), and then calls a
//    private do_* hook. A backend implements only the hooks, and may assume their preconditions;
//  * every mutating call is all-or-nothing: on OutOfMemory the backend is exactly as before, so the
//    replayer can count the failure and carry on;
//  * can_admit/can_grow answer without side effects, so a scheduler can ask before it commits;
//  * kernels never see the backend, only the KvView it hands out for a prepared batch;
//  * step hooks (begin_step, prefetch, step_costs, counters) let a backend do work around a
//    scheduler step and report what it cost, so callers never need to know its concrete type.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "alloc/core/device.hpp"
#include "alloc/core/kv_view.hpp"
#include "alloc/core/memory_breakdown.hpp"
#include "alloc/core/model_geometry.hpp"

namespace kvlab {

using SeqId = std::int64_t;

/// What a scheduler knows about a sequence when it admits it.
struct SequenceSpec {
  std::int64_t prompt_tokens = 0;
  /// Tokens the sequence will hold when it finishes (prompt + output). Reservation policies that
  /// need foresight (oracle, pow2) and the reserved/internal split of the accounting use it.
  std::int64_t final_tokens = 0;
  /// Prefix caching (docs/prefix-caching.md). The sequence's token ids, non-owning and read only
  /// during admit/can_admit (a backend copies what it keeps); empty: unknown, the sequence neither
  /// hits nor fills the cache. When given it must hold at least `prompt_tokens` ids: the prompt's
  /// are looked up, and ids past the prompt are the tokens the sequence will generate, where the
  /// caller knows them. A backend enters every block whose ids are known as soon as it is full.
  std::span<const std::int32_t> prompt_token_ids = {};
  /// Extra keys mixed into the key of the sequence's first block (a per-tenant salt, a LoRA id):
  /// sequences with different extra keys never share cached blocks. Non-owning, like the ids.
  std::span<const std::int64_t> extra_keys = {};
};

/// Prefix-cache counters of a backend (all zero for backends without a prefix cache).
struct PrefixCacheStats {
  std::int64_t lookups = 0;          ///< admits that looked their prompt up (admits with token ids)
  std::int64_t hit_blocks = 0;       ///< cache blocks those admits reused
  std::int64_t hits = 0;             ///< prompt tokens whose KV came from the cache at admit
  std::int64_t queries = 0;          ///< prompt tokens looked up (admits with token ids)
  std::int64_t evictions = 0;        ///< cached blocks whose entry was dropped to reuse the block
  std::int64_t lookup_ns = 0;        ///< total wall time of the lookups of successful admits
  std::int64_t inserted_blocks = 0;  ///< blocks entered into the cache (prompt and generated)
};

/// Per-batch arrays prepared by prepare_batch, in memory the kernels can read.
struct PreparedBatch {
  int batch = 0;
  const std::int32_t* seq_lens = nullptr;       ///< [batch] in the backend's device memory
  const std::int32_t* host_seq_lens = nullptr;  ///< the same lengths in host memory (valid until the next prepare)
};

/// What a backend did on the caller's critical path since the last begin_step(), by kind of
/// operation, not by backend: any backend that maps memory reports mapping, any that copies KV to
/// the host reports transfers. The measured clock uses the seconds; the modelled clock prices the
/// counts with the device model (serving/clock/cost_model.hpp).
struct StepCosts {
  double mapping_s = 0;  ///< measured time mapping/unmapping physical memory inside admit/grow/fork/release
  std::int64_t maps = 0, unmaps = 0;  ///< pages mapped / unmapped on the critical path
  /// Contiguous copies between the device and host memory (swap, a prefix cache's host tier) and
  /// their bytes: a modelled clock charges each a transfer latency plus its bytes at link bandwidth.
  std::int64_t host_transfers = 0;
  double host_transfer_bytes = 0;
  /// Device-to-device copy launches (copy-on-write) and the bytes they copied.
  std::int64_t device_copies = 0;
  double device_copy_bytes = 0;

  StepCosts& operator-=(const StepCosts& o) noexcept {
    mapping_s -= o.mapping_s;
    maps -= o.maps;
    unmaps -= o.unmaps;
    host_transfers -= o.host_transfers;
    host_transfer_bytes -= o.host_transfer_bytes;
    device_copies -= o.device_copies;
    device_copy_bytes -= o.device_copy_bytes;
    return *this;
  }
};

/// The shape of a backend's memory as the kernels and the clock see it: the view the attention
/// kernels read (contiguous, or paged at block_tokens) and the page a vmm backend maps on demand.
struct ViewShape {
  KvLayout layout = KvLayout::contiguous;
  std::int32_t block_tokens = 0;  ///< paged: tokens per block
  std::size_t page_bytes = 0;     ///< vmm: bytes per physical page mapped on demand
};

/// A backend's own counters, by name ("cow_copies", "critical_maps", ...): whatever it wants a
/// researcher to see, reported without the caller knowing its type. Values are counts or seconds.
using BackendCounters = std::vector<std::pair<std::string, double>>;

class KvBackend {
 public:
  virtual ~KvBackend() = default;
  KvBackend(const KvBackend&) = delete;
  KvBackend& operator=(const KvBackend&) = delete;

  // --- what the backend is ---

  /// e.g. "contiguous-max", "paged-b16", "vmm-64k".
  [[nodiscard]] std::string name() const { return do_name(); }
  [[nodiscard]] const ModelGeometry& model() const noexcept { return model_; }
  [[nodiscard]] Device device() const noexcept { return do_device(); }
  /// True when K/V bytes really exist (execute mode); false for accounting-only backends.
  [[nodiscard]] bool has_storage() const noexcept { return do_has_storage(); }
  /// The view its kernels read and the page it maps (for the clock; see ViewShape).
  [[nodiscard]] ViewShape view_shape() const noexcept { return do_view_shape(); }
  /// Longest sequence (tokens) this backend can hold.
  [[nodiscard]] std::int64_t max_seq_len() const noexcept { return max_seq_len_; }

  // --- sequences ---

  /// Whether admit(spec, initial_tokens) would succeed now. No side effects.
  [[nodiscard]] bool can_admit(const SequenceSpec& spec, std::int64_t initial_tokens) const;
  /// Starts sequence `id` holding `initial_tokens` tokens (their KV slots, not yet written).
  /// Throws OutOfMemory (no state change) or InvalidArgument (duplicate id, bad lengths).
  void admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens);
  /// Whether grow(id, n) would succeed now. No side effects.
  [[nodiscard]] bool can_grow(SeqId id, std::int64_t n) const;
  /// Appends n token slots to sequence `id`. Throws OutOfMemory with no state change.
  void grow(SeqId id, std::int64_t n);
  /// can_grow(id, n), then grow(id, n) where it said yes, in one call: true when the sequence
  /// grew, false (no state change) where can_grow would have said no. The replayer grows every
  /// running sequence every step; this checks residency and finds the sequence once, not twice.
  [[nodiscard]] bool try_grow(SeqId id, std::int64_t n);
  /// Starts `child` as a copy of `parent` (its tokens and future), sharing memory where the
  /// backend can. Throws OutOfMemory with no state change.
  void fork(SeqId parent, SeqId child);
  /// Ends sequence `id` (resident or swapped out) and returns its memory to the backend.
  void release(SeqId id);

  /// Preemption by swapping: swap_out moves a sequence's KV to host memory and frees its device
  /// memory; swap_in brings the same bytes back. Backends that cannot swap say so here, and their
  /// swap calls throw InvalidArgument.
  [[nodiscard]] bool supports_swap() const noexcept { return do_supports_swap(); }
  void swap_out(SeqId id);
  [[nodiscard]] bool can_swap_in(SeqId id) const;
  /// Throws OutOfMemory with no state change when the device memory is not there.
  void swap_in(SeqId id);
  [[nodiscard]] bool is_swapped(SeqId id) const;

  [[nodiscard]] bool contains(SeqId id) const { return do_contains(id); }
  [[nodiscard]] std::int64_t length(SeqId id) const;
  [[nodiscard]] std::size_t num_sequences() const noexcept { return do_num_sequences(); }

  // --- prefix caching ---

  /// Prompt tokens an admission of `spec` would find in the prefix cache if its whole prompt were
  /// admitted at once. No side effects; 0 without a prefix cache. With chunked prefill the
  /// replayer admits the hit plus the first chunk, so a long cached prompt is not cut at the chunk.
  [[nodiscard]] std::int64_t cached_prefix_tokens(const SequenceSpec& spec) const;
  /// Prompt tokens of `id` whose KV came from the prefix cache at admit: the replayer skips their
  /// prefill. 0 for backends without a prefix cache, for forks and for sequences admitted without
  /// token ids.
  [[nodiscard]] std::int64_t cached_tokens(SeqId id) const;
  /// Counters of the prefix cache since construction (zeros without one).
  [[nodiscard]] PrefixCacheStats prefix_cache_stats() const { return do_prefix_cache_stats(); }

  // --- kernels ---

  /// Builds the per-batch arrays (sequence bases or block tables, lengths) for `seqs`, in order;
  /// every one must be resident (not swapped out). Views from layer_view() refer to them until
  /// the next prepare_batch or mutation.
  PreparedBatch prepare_batch(std::span<const SeqId> seqs);
  /// The kernel view of one layer of the prepared batch. Requires has_storage() and a batch
  /// prepared since the last mutation (admit, grow, fork, release, swap).
  [[nodiscard]] KvView layer_view(int layer) const;

  // --- accounting ---

  /// Where every byte of capacity is now. `blocked`, when given, is the admission that is waiting
  /// for memory: free holes too small for it count as external fragmentation.
  [[nodiscard]] MemoryBreakdown breakdown(const SequenceSpec* blocked = nullptr) const;

  // --- step hooks (a scheduler calls them around each step; all do nothing by default) ---

  /// The step starts: finish work begun in the background for it (vmm: wait for the pages
  /// prefetched during the last step). Rethrows an error that background work met; step_costs()
  /// counts from here either way.
  void begin_step();
  /// The sequences in `next_ids` will each grow by `growth` tokens (one in a decode step) before
  /// the next begin_step(): start what can overlap this step's compute (vmm with overlap: map their
  /// pages on a background thread; the next begin_step() waits for it). Best effort.
  void prefetch(std::span<const SeqId> next_ids, std::int64_t growth = 1);
  /// Critical-path time spent since begin_step() (all of it before the first begin_step()).
  [[nodiscard]] StepCosts step_costs() const;
  /// The backend's own counters, by name (empty for a backend that has none).
  [[nodiscard]] BackendCounters counters() const { return do_counters(); }
  /// Physical KV memory the backend holds now, when that changes over its life (vmm and elastic:
  /// the bytes of the pages mapped); nullopt for a backend that holds its whole capacity from
  /// construction on (contiguous, paged). Set against the bytes live sequences pin
  /// (breakdown().allocated()), it is the memory an elastic design could give back.
  [[nodiscard]] std::optional<std::size_t> held_bytes() const { return do_held_bytes(); }

 protected:
  /// `max_seq_len` 0 means the model's max context. Validates the model.
  KvBackend(const ModelGeometry& model, std::int64_t max_seq_len);
  /// The precondition checks of admit/can_admit, for a backend's own public entry points.
  void check_spec(const SequenceSpec& spec, std::int64_t initial_tokens) const;

 private:
  void require_known(SeqId id) const;
  void require_resident(SeqId id) const;
  void require_absent(SeqId id) const;
  void require_swap() const;

  // The hooks. Each may assume what its public call checked: known/absent ids, a valid spec,
  // n >= 0, resident (not swapped) sequences where the call needs them, swap support.
  [[nodiscard]] virtual std::string do_name() const = 0;
  [[nodiscard]] virtual Device do_device() const noexcept = 0;
  [[nodiscard]] virtual bool do_has_storage() const noexcept = 0;
  [[nodiscard]] virtual bool do_can_admit(const SequenceSpec& spec, std::int64_t initial_tokens) const = 0;
  virtual void do_admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens) = 0;
  [[nodiscard]] virtual bool do_can_grow(SeqId id, std::int64_t n) const = 0;
  virtual void do_grow(SeqId id, std::int64_t n) = 0;
  /// The default asks do_can_grow, then calls do_grow; a backend overrides it to do both with one
  /// lookup. It must leave exactly what those two calls leave.
  [[nodiscard]] virtual bool do_try_grow(SeqId id, std::int64_t n);
  virtual void do_fork(SeqId parent, SeqId child) = 0;
  virtual void do_release(SeqId id) = 0;
  [[nodiscard]] virtual bool do_contains(SeqId id) const = 0;
  [[nodiscard]] virtual std::int64_t do_length(SeqId id) const = 0;
  [[nodiscard]] virtual std::size_t do_num_sequences() const noexcept = 0;
  virtual PreparedBatch do_prepare_batch(std::span<const SeqId> seqs) = 0;
  [[nodiscard]] virtual KvView do_layer_view(int layer) const = 0;
  [[nodiscard]] virtual MemoryBreakdown do_breakdown(const SequenceSpec* blocked) const = 0;

  // Optional hooks: the defaults describe a backend without swap, prefix cache or step work.
  [[nodiscard]] virtual ViewShape do_view_shape() const noexcept { return {}; }
  [[nodiscard]] virtual bool do_supports_swap() const noexcept { return false; }
  virtual void do_swap_out(SeqId) {}
  [[nodiscard]] virtual bool do_can_swap_in(SeqId) const { return false; }
  virtual void do_swap_in(SeqId) {}
  [[nodiscard]] virtual bool do_is_swapped(SeqId) const { return false; }
  [[nodiscard]] virtual std::int64_t do_cached_prefix_tokens(const SequenceSpec&) const { return 0; }
  [[nodiscard]] virtual std::int64_t do_cached_tokens(SeqId) const { return 0; }
  [[nodiscard]] virtual PrefixCacheStats do_prefix_cache_stats() const { return {}; }
  virtual void do_begin_step() {}
  virtual void do_prefetch(std::span<const SeqId>, std::int64_t /*growth*/) {}
  /// Critical-path time since construction; step_costs() reports the part since begin_step().
  [[nodiscard]] virtual StepCosts do_total_costs() const { return {}; }
  [[nodiscard]] virtual BackendCounters do_counters() const { return {}; }
  [[nodiscard]] virtual std::optional<std::size_t> do_held_bytes() const { return std::nullopt; }

  ModelGeometry model_;
  std::int64_t max_seq_len_ = 0;
  StepCosts costs_at_step_begin_;
  bool prepared_ = false;  // a batch was prepared and nothing has changed since
};

}  // namespace kvlab
