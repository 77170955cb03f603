#pragma once
// The vLLM PagedAttention design as a kvlab backend. KV lives in fixed-size blocks of
// `block_size` tokens (any size from 1 to 1024) taken from one pool; each sequence has a block
// table; a sequence grows by one block at each block boundary, so at most one partly filled block
// per sequence is wasted.
//
//  * fork shares every block of the parent (reference counts up). Writing into a shared block
//    copies it first — a real copy of that block's K and V in every layer — then drops the old
//    reference (copy-on-write). Beam search and parallel sampling are built on it.
//  * swap_out copies a sequence's blocks to host memory (pinned memory on CUDA) and frees them;
//    swap_in allocates blocks and copies the same bytes back. Release frees for recomputation.
//    The copies run on a stream of their own (alloc/transfer/copy_stream.hpp): prepare_batch and the
//    backend's own device copies fence them, begin_step waits for them and frees the host buffers
//    swap-ins emptied.
//  * Layout: [layer][K|V][num_blocks][block_size][kv_heads][head_dim]; the kernels read it
//    through PagedKv with the block tables built by prepare_batch.
//  * Accounting: the five fractions, shared blocks counted once; shared_savings holds the bytes
//    that sharing saved (logical blocks minus physical blocks held by sequences). Kept as running
//    totals that every operation updates for the blocks it touches, so breakdown() is O(1) and
//    replay cost does not grow with the pool: a block one sequence holds adds its tokens in closed
//    form (per sequence), a block several hold adds a correction from the per-block maximum.
//  * Prefix caching (--prefix-cache none|hash|radix, docs/prefix-caching.md): `hash` is vLLM v1's
//    block-hash cache over an LRU free queue, `radix` SGLang's radix tree. A sequence admitted
//    with prompt token ids reuses the cached blocks of its longest cached prefix (capped so at
//    least one prompt token is computed) and enters every block into the cache as soon as it is
//    full and its token ids are known: prompt blocks at admit and during chunked prefill, and
//    decode blocks when the spec's ids cover the generated tokens (vLLM v1, SGLang).
//    Cached blocks no sequence holds count as `free` in the five fractions and as `cached`.
//  * Block placement: which free block a sequence gets is the pool's free order (lifo, or the
//    hash cache's LRU queue, exactly as vLLM). `region_placement` (`paged-B-region`, not with the
//    hash cache) hands a sequence the next free block after its last within the same 2 MiB of
//    block ids of a plane instead, so the kernels read it mostly in address order
//    (paged/block_pool.hpp, docs/kernels.md). A region is aligned to the plane's start, which is
//    a multiple of 2 MiB only when the pool's blocks fill whole regions, so it may straddle two
//    huge pages. It changes block ids only: every count and fraction is the same.
#include <chrono>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "alloc/transfer/copy_stream.hpp"
#include "alloc/memory/memory_resource.hpp"
#include "alloc/backend/table_backend.hpp"
#include "paged/block_pool.hpp"
#include "paged/block_storage.hpp"
#include "paged/prefix_cache.hpp"

namespace kvlab {

struct PagedConfig {
  ModelGeometry model;
  std::size_t capacity_bytes = 0;         ///< becomes floor(capacity / block bytes) blocks
  std::int32_t block_size = 16;           ///< tokens per block, 1..1024
  std::int64_t max_seq_len = 0;           ///< 0: the model's max context
  MemoryResource* memory = nullptr;       ///< KV pool; nullptr: accounting only
  MemoryResource* swap_memory = nullptr;  ///< swap space; nullptr: the host resource
  PrefixCacheMode prefix_cache = PrefixCacheMode::none;
  /// Host tier of the hash prefix cache (docs/prefix-caching.md): bytes of host memory cached
  /// blocks move to when their device block is reused, and come back from on a hit. 0: none.
  std::size_t host_cache_bytes = 0;
  /// Region block placement (`paged-B-region`, paged/block_pool.hpp): a sequence's next block is
  /// the lowest free one after its last within the same region of a plane. Not with the hash cache.
  bool region_placement = false;
  /// A region's bytes within one K or V plane: a region holds max(1, region_bytes / block bytes)
  /// consecutive block ids. Default one 2 MiB huge page.
  std::size_t region_bytes = kRegionBytes;
  /// Where the blocks live (paged/block_storage.hpp): nullptr, one region of `memory` allocated up
  /// front; else the storage's pages, mapped as it decides (the elastic backend). `memory` then
  /// only serves per-batch arrays and copies, and the storage decides the block count.
  std::shared_ptr<BlockStorage> storage;
  /// The most blocks the prefix cache keeps that no sequence holds (kvcached's
  /// KVCACHED_MAX_CACHED_TOKENS, in blocks), trimmed whenever a sequence's blocks become cached
  /// (PrefixCache::trim). -1: no cap (eviction only when blocks run out).
  std::int64_t max_cached_blocks = -1;
  /// Trimming to that cap empties whole page groups first (page-aware eviction, a page-ordered
  /// pool); false: least recently used first, wherever the blocks lie.
  bool evict_by_pages = true;
  /// After a trim, move cached blocks only the prefix cache holds off the emptiest page groups
  /// onto free blocks of the fullest, when that empties whole groups (a page-ordered pool; each
  /// move is one block copy, charged as copy-on-write copies are). Not in kvcached, which never
  /// moves a block: what it costs and saves is measured in docs/elastic.md.
  bool compact_cache = false;
};

/// A sequence's block table, or (swapped out) where its bytes wait.
struct PagedSequence : SequenceState {
  std::vector<BlockId> blocks;
  // Swapped out: the bytes live in `swap` ([plane][block] order), `blocks` is empty.
  void* swap = nullptr;
  std::size_t swap_bytes = 0;
  std::int64_t swapped_blocks = 0;
  std::int32_t prefix_hold = -1;  // the prefix cache's hold (radix mode: the locked tree node; -1: none)
  // Prefix caching: the token ids known for this sequence (its prompt, then the tokens it will
  // generate where the spec gave them) and its extra keys, copied at admit; blocks [0, entered)
  // are cached (its hit, then the blocks it entered). `caching`: full blocks after them can still
  // be entered (false without ids, for forks, after a swap, and once a block was already cached
  // under another block).
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> extra;
  std::int64_t entered = 0;
  bool caching = false;
};

class PagedBackend final : public TableBackend<PagedSequence> {
 public:
  explicit PagedBackend(PagedConfig config);
  ~PagedBackend() override;

  [[nodiscard]] const BlockPool& pool() const noexcept { return pool_; }
  [[nodiscard]] const std::vector<BlockId>& block_table(SeqId id) const;
  [[nodiscard]] std::size_t block_bytes() const noexcept { return block_bytes_; }
  /// Blocks copied by copy-on-write so far, and the wall time prepare_batch spent last call.
  [[nodiscard]] std::int64_t cow_copies() const noexcept { return cow_copies_; }
  [[nodiscard]] double last_prepare_seconds() const noexcept { return last_prepare_seconds_; }

  [[nodiscard]] PrefixCacheMode prefix_cache_mode() const noexcept { return config_.prefix_cache; }
  /// Prompt tokens admit(spec, initial_tokens) would take from the cache now. No side effects.
  [[nodiscard]] std::int64_t lookup_cached_tokens(const SequenceSpec& spec, std::int64_t initial_tokens) const;
  /// Blocks that hold cached KV no sequence holds (free in the accounting, reusable on a hit).
  [[nodiscard]] std::int64_t num_cached_free_blocks() const;
  /// Blocks an allocation can get now: free blocks (over a storage: those it can open), plus
  /// evictable tree blocks in radix mode.
  [[nodiscard]] std::int64_t available_blocks() const;
  [[nodiscard]] const PrefixCache& prefix_cache() const noexcept { return *cache_; }

 private:
  using Sequence = PagedSequence;
  [[nodiscard]] std::string do_name() const override;
  [[nodiscard]] Device do_device() const noexcept override;
  [[nodiscard]] bool do_has_storage() const noexcept override { return layout_.base != nullptr; }
  [[nodiscard]] bool do_can_admit(const SequenceSpec& spec, std::int64_t initial_tokens) const override;
  void do_admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens) override;
  [[nodiscard]] bool do_can_grow(SeqId id, std::int64_t n) const override;
  void do_grow(SeqId id, std::int64_t n) override;
  [[nodiscard]] bool do_try_grow(SeqId id, std::int64_t n) override;
  /// do_try_grow's growth once can_grow_by(s, n) has said yes (do_grow throws where it says no).
  void grow_checked(Sequence& s, SeqId id, std::int64_t n);
  void do_fork(SeqId parent, SeqId child) override;
  void do_release(SeqId id) override;
  [[nodiscard]] bool do_supports_swap() const noexcept override { return true; }
  void do_swap_out(SeqId id) override;
  [[nodiscard]] bool do_can_swap_in(SeqId id) const override;
  void do_swap_in(SeqId id) override;
  [[nodiscard]] bool do_is_swapped(SeqId id) const override;
  void do_begin_step() override;
  void do_prefetch(std::span<const SeqId> next_ids, std::int64_t growth) override;
  [[nodiscard]] std::int64_t do_cached_prefix_tokens(const SequenceSpec& spec) const override;
  [[nodiscard]] PrefixCacheStats do_prefix_cache_stats() const override;
  PreparedBatch do_prepare_batch(std::span<const SeqId> seqs) override;
  [[nodiscard]] MemoryBreakdown do_breakdown(const SequenceSpec* blocked) const override;
  [[nodiscard]] BackendCounters do_counters() const override;
  [[nodiscard]] std::optional<std::size_t> do_held_bytes() const override {
    return storage_ != nullptr ? std::optional<std::size_t>(storage_->held_bytes()) : std::nullopt;
  }
  [[nodiscard]] StepCosts do_total_costs() const override;
  [[nodiscard]] ViewShape do_view_shape() const noexcept override { return {KvLayout::paged, config_.block_size, 0}; }
  /// The host tier's slots (0 without one), and its bytes' copies (storage only).
  [[nodiscard]] std::int32_t host_blocks() const;
  void copy_host(BlockId b, std::int32_t slot, bool to_host);

  /// What a prefix-cache lookup found, before anything is committed.
  struct Lookup {
    PrefixHit hit;
  };
  [[nodiscard]] Lookup lookup(const SequenceSpec& spec, std::int64_t initial_tokens) const;
  [[nodiscard]] std::span<const std::int32_t> prompt_ids(const SequenceSpec& spec, std::int64_t initial_tokens) const;
  /// Takes one block from the pool (evicting a cached entry when needed). Requires availability.
  /// `near`: the block it will follow in its sequence (-1: none), for region placement; `run` > 0:
  /// it starts a run of that many blocks taken now (the pool's local placement, BlockPool::allocate).
  BlockId take_block(BlockId near, std::int64_t run = 0);
  /// Makes sure `n` blocks can be taken (evicts cached blocks the cache alone holds). Requires availability.
  void make_room(std::int64_t n);
  /// Enters the sequence's full blocks whose ids are known into the prefix cache (from `entered` on).
  void enter_full_blocks(Sequence& s);
  /// Drops the sequence's blocks (tail first), their accounting and its prefix-cache hold.
  void drop_blocks(SeqId id, Sequence& s);
  /// PagedConfig::compact_cache: moves cached blocks so whole page groups empty.
  void compact_cache();
  [[nodiscard]] std::int64_t blocks_for(std::int64_t tokens) const noexcept {
    return full_blocks(tokens + config_.block_size - 1);
  }
  /// tokens / block_size and tokens % block_size (tokens >= 0): a shift and a mask where the block
  /// size is a power of two. can_grow and grow run for every sequence every step; in a cpu-clock
  /// profile of a replay most of can_grow's samples sat behind its two divisions (issue 34).
  [[nodiscard]] std::int64_t full_blocks(std::int64_t tokens) const noexcept {
    return block_shift_ >= 0 ? tokens >> block_shift_ : tokens / config_.block_size;
  }
  [[nodiscard]] std::int64_t offset_in_block(std::int64_t tokens) const noexcept {
    return block_shift_ >= 0 ? tokens & (config_.block_size - 1) : tokens % config_.block_size;
  }
  /// The sequence, mutable from const hooks (the table's one-entry memo makes repeated asks cheap).
  [[nodiscard]] Sequence& seq(SeqId id) const;
  [[nodiscard]] bool can_grow_by(const Sequence& s, std::int64_t n) const;
  /// Blocks grow(id, n) would take from the pool, copy-on-write included.
  [[nodiscard]] std::int64_t blocks_needed_to_grow(const Sequence& s, std::int64_t n) const;
  /// Where block `b` of K/V plane `p` (2 * layer + kv) starts.
  [[nodiscard]] std::byte* block_ptr(int p, BlockId b) const noexcept {
    return layout_.base + static_cast<std::size_t>(p) * layout_.plane_stride +
           static_cast<std::size_t>(b) * layout_.block_stride;
  }
  /// Free blocks an allocation can take without eviction (over a storage: those it can open).
  [[nodiscard]] std::int64_t free_blocks() const {
    return storage_ != nullptr ? storage_->usable(pool_) : pool_.num_free();
  }
  /// After blocks were freed: lets the storage close what it no longer wants open, once the
  /// swap copies that may still read freed blocks are done.
  void settle() {
    if (storage_ == nullptr || !storage_->wants_settle(pool_)) return;
    transfers_.synchronize();
    storage_->settle(pool_);
  }
  void copy_blocks(const std::vector<std::pair<BlockId, BlockId>>& pairs);
  /// Frees a swap buffer once the copies that may still use it are done.
  void free_swap_after_copies(void* swap, std::size_t bytes);

  // ---- incremental accounting ----
  // token_states = filled, reserved = eventual - filled, internal = physical * B - eventual (in
  // tokens), summed over the physical blocks sequences hold: per block the most tokens any holder
  // has written into it and the most any holder will eventually write. A sequence adds its blocks
  // as if it held them alone (closed form from length, final_tokens and block count); each block
  // with several holders adds a correction: its maximum over holders minus their sum.
  struct Totals {
    std::int64_t logical = 0, physical = 0, filled = 0, eventual = 0;
  };
  struct Holder {
    SeqId id = 0;
    std::int32_t index = 0;  // the block's place in the holder's table
  };
  struct BlockHolders {           // per pool block, 16 bytes
    SeqId only_id = 0;            // the holder when count == 1
    std::int32_t only_index = 0;  // and the block's place in its table
    std::int32_t count = 0;       // sequences holding the block
  };
  struct SharedBlock {  // a block with two or more holders
    std::vector<Holder> holders;
    std::int64_t filled = 0, eventual = 0;  // correction: max over holders minus sum
  };
  /// Adds (sign +1) or removes (-1) the sequence's closed-form contribution.
  void count_sequence(const Sequence& s, int sign) noexcept;
  /// Tokens written (or eventually written) into block `index` of `s`, 0..block_size.
  [[nodiscard]] std::int64_t tokens_in(const Sequence& s, std::int64_t index, bool eventual) const noexcept;
  void hold(BlockId b, SeqId id, std::int32_t index);
  void unhold(BlockId b, SeqId id);
  /// Recomputes a shared block's correction from its holders' current lengths.
  void recount(SharedBlock& sb);
  /// Accounts sequence `id` (already in seqs_) with every block it holds, or takes it out.
  void account_in(SeqId id, const Sequence& s);
  void account_out(SeqId id, const Sequence& s);

  PagedConfig config_;
  std::size_t block_bytes_;  // one block of one layer's K (or V)
  int block_shift_;          // log2(block_size) when it is a power of two, else -1
  BlockPool pool_;
  BlockStorage* storage_ = nullptr;  // config_.storage's, or nullptr
  std::byte* region_ = nullptr;      // the region allocated from config_.memory (not with a storage)
  BlockLayout layout_;
  std::size_t region_bytes_ = 0;
  std::byte* host_region_ = nullptr;  // host tier bytes: [slot][plane] blocks
  std::size_t host_region_bytes_ = 0;
  std::int64_t cow_copies_ = 0;
  // Compaction's copies: made at a release, between two steps; charged to the next step (begin_step
  // moves them from pending to moved after the step's costs start counting).
  std::int64_t moved_blocks_ = 0, pending_moves_ = 0;
  std::int64_t swapped_blocks_ = 0;     // blocks moved by swap_out and swap_in, for the clock
  std::unique_ptr<PrefixCache> cache_;  // never null: PrefixCacheMode::none never hits
  PrefixCacheStats stats_;
  double last_prepare_seconds_ = 0;
  Totals totals_;
  std::vector<BlockHolders> holders_;  // [block]
  std::unordered_map<BlockId, SharedBlock> shared_;
  CopyStream transfers_;  // swap copies (on the host: made at once); after config_, so it goes first
};

}  // namespace kvlab
