#include "paged/paged_backend.hpp"

#include <algorithm>
#include <bit>
#include <string>
#include <unordered_map>
#include <utility>

#include "alloc/transfer/copy.hpp"
#include "alloc/core/error.hpp"
#include "kernels/attention.hpp"
#include "paged/hash_prefix_cache.hpp"
#include "paged/radix_cache.hpp"

namespace kvlab {

namespace {
std::int32_t blocks_in(const PagedConfig& c) {
  KVLAB_EXPECTS(c.block_size >= 1 && c.block_size <= 1024,
                "block size must be between 1 and 1024 tokens (got " + std::to_string(c.block_size) + ")");
  c.model.validate();
  if (c.storage != nullptr) return c.storage->num_blocks();
  const std::size_t per_block = static_cast<std::size_t>(c.block_size) * c.model.kv_bytes_per_token();
  const std::size_t blocks = c.capacity_bytes / per_block;
  KVLAB_EXPECTS(blocks >= 1, "KV capacity " + std::to_string(c.capacity_bytes) + " bytes is below one block (" +
                                 std::to_string(per_block) + " bytes)");
  KVLAB_EXPECTS(blocks <= static_cast<std::size_t>(INT32_MAX), "too many blocks for 32-bit block ids");
  return static_cast<std::int32_t>(blocks);
}
FreeOrder free_order_for(const PagedConfig& c) {
  const PrefixCacheMode mode = c.prefix_cache;
  KVLAB_EXPECTS(mode == PrefixCacheMode::none || mode == PrefixCacheMode::hash || mode == PrefixCacheMode::radix,
                "unknown prefix cache mode");
  // The hash cache evicts cached free blocks in the LRU queue's order, so a placement that chose
  // among free blocks would change which entries survive, and with them the hit rates.
  KVLAB_EXPECTS(!(c.region_placement && mode == PrefixCacheMode::hash),
                "region block placement cannot be combined with the hash prefix cache (its LRU free queue decides "
                "evictions); use the radix cache or none");
  KVLAB_EXPECTS(c.storage == nullptr || (!c.region_placement && mode != PrefixCacheMode::hash),
                "blocks on pages mapped on demand take neither region placement nor the hash prefix cache (its LRU "
                "free queue decides evictions); use the radix cache or none");
  if (c.storage != nullptr) return c.storage->free_order();
  if (c.region_placement) return FreeOrder::region;
  return mode == PrefixCacheMode::hash ? FreeOrder::lru : FreeOrder::lifo;
}
/// Block ids per region under region placement: `region_bytes` (2 MiB) of a K or V plane.
std::int32_t region_blocks_for(const PagedConfig& c) {
  if (c.storage != nullptr) return c.storage->region_blocks();
  if (!c.region_placement) return 1;
  KVLAB_EXPECTS(c.region_bytes >= 1, "region placement needs a region of at least one byte");
  return blocks_per_region(static_cast<std::size_t>(c.block_size) * c.model.kv_bytes_per_token_per_layer() / 2,
                           c.region_bytes);
}
BlockId last_block(const PagedSequence& s) { return s.blocks.empty() ? -1 : s.blocks.back(); }
}  // namespace

PagedBackend::PagedBackend(PagedConfig config)
    : TableBackend(config.model, config.max_seq_len),
      config_(std::move(config)),
      block_bytes_(static_cast<std::size_t>(config_.block_size) * config_.model.kv_bytes_per_token_per_layer() / 2),
      block_shift_(std::has_single_bit(static_cast<std::uint64_t>(config_.block_size))
                       ? std::countr_zero(static_cast<std::uint64_t>(config_.block_size))
                       : -1),
      pool_(blocks_in(config_), free_order_for(config_), region_blocks_for(config_),
            config_.storage != nullptr ? config_.storage->page_placement() : PagePlacement::fullest),
      storage_(config_.storage.get()),
      holders_(static_cast<std::size_t>(pool_.num_blocks())),
      transfers_(config_.memory != nullptr ? config_.memory->device() : Device::host) {
  static_assert(sizeof(BlockHolders) == 16);
  cache_ = make_prefix_cache(config_.prefix_cache, pool_, config_.block_size, host_blocks());
  config_.max_seq_len = max_seq_len();
  if (config_.swap_memory == nullptr) config_.swap_memory = &host_memory_resource();
  if (storage_ != nullptr) {
    layout_ = storage_->layout();
  } else if (config_.memory != nullptr) {
    region_bytes_ = block_bytes_ * static_cast<std::size_t>(pool_.num_blocks()) * 2 * config_.model.num_layers;
    region_ = static_cast<std::byte*>(config_.memory->allocate(region_bytes_));
    layout_ = {region_, block_bytes_ * static_cast<std::size_t>(pool_.num_blocks()), block_bytes_};
  }
  if (layout_.base != nullptr) {
    if (host_blocks() > 0) {
      host_region_bytes_ = block_bytes_ * static_cast<std::size_t>(host_blocks()) * 2 * config_.model.num_layers;
      try {
        host_region_ = static_cast<std::byte*>(config_.swap_memory->allocate(host_region_bytes_));
      } catch (...) {
        if (region_ != nullptr) config_.memory->deallocate(region_, region_bytes_);
        throw;
      }
      static_cast<HashPrefixCache&>(*cache_).set_copy(
          [this](BlockId b, std::int32_t slot, bool to_host) { copy_host(b, slot, to_host); });
    }
  }
}

std::int32_t PagedBackend::host_blocks() const {
  const std::size_t per_block = static_cast<std::size_t>(config_.block_size) * config_.model.kv_bytes_per_token();
  const std::size_t n = config_.host_cache_bytes / per_block;
  KVLAB_EXPECTS(n <= static_cast<std::size_t>(INT32_MAX) - static_cast<std::size_t>(pool_.num_blocks()),
                "too many host tier blocks for 32-bit ids");
  return static_cast<std::int32_t>(n);
}

void PagedBackend::copy_host(BlockId b, std::int32_t slot, bool to_host) {
  transfers_.fence();  // block b may be one a swap copy still reads or writes
  const int planes = 2 * config_.model.num_layers;
  for (int p = 0; p < planes; ++p) {
    std::byte* dev = block_ptr(p, b);
    std::byte* host = host_region_ + (static_cast<std::size_t>(slot) * planes + p) * block_bytes_;
    if (to_host) {
      copy_bytes(device(), host, dev, block_bytes_);
    } else {
      copy_bytes(device(), dev, host, block_bytes_);
    }
  }
}

StepCosts PagedBackend::do_total_costs() const {
  // Each block moves as one copy per layer and K/V plane (as vLLM v0's swap_blocks does), so
  // small blocks mean many small transfers; copy-on-write is one batched launch per copied block.
  const double block_bytes =
      static_cast<double>(static_cast<std::size_t>(config_.block_size) * config_.model.kv_bytes_per_token());
  const std::int64_t planes = 2 * static_cast<std::int64_t>(config_.model.num_layers);
  const std::int64_t host_blocks_moved = cache_->transferred_blocks() + swapped_blocks_;
  StepCosts c;
  c.host_transfers = host_blocks_moved * planes;
  c.host_transfer_bytes = static_cast<double>(host_blocks_moved) * block_bytes;
  c.device_copies = cow_copies_ + moved_blocks_;
  c.device_copy_bytes = static_cast<double>(cow_copies_ + moved_blocks_) * block_bytes;
  if (storage_ != nullptr) {
    const StepCosts m = storage_->total_costs();
    c.mapping_s = m.mapping_s;
    c.maps = m.maps;
    c.unmaps = m.unmaps;
  }
  return c;
}

PagedBackend::~PagedBackend() {
  try {  // a device error at teardown cannot be reported; the resources' statistics show it
    transfers_.synchronize();
    for (auto& [id, s] : seqs_) config_.swap_memory->deallocate(s.swap, s.swap_bytes);
    config_.swap_memory->deallocate(host_region_, host_region_bytes_);
    if (region_ != nullptr) config_.memory->deallocate(region_, region_bytes_);
  } catch (...) {
  }
}

std::string PagedBackend::do_name() const {
  if (storage_ != nullptr) {
    std::string n = storage_->backend_name(config_.block_size, config_.prefix_cache);
    if (config_.max_cached_blocks >= 0)
      n += "-maxcached" + std::to_string(config_.max_cached_blocks * config_.block_size);
    if (config_.max_cached_blocks >= 0 && !config_.evict_by_pages) n += "-lru";
    if (config_.compact_cache) n += "-compact";
    return n;
  }
  std::string n = "paged-b" + std::to_string(config_.block_size);
  if (config_.prefix_cache != PrefixCacheMode::none) {
    n += '-';
    n += to_string(config_.prefix_cache);
  }
  if (config_.host_cache_bytes > 0) n += "-host" + std::to_string(config_.host_cache_bytes >> 30);
  if (config_.region_placement) n += "-region";
  return n;
}

Device PagedBackend::do_device() const noexcept { return config_.memory ? config_.memory->device() : Device::host; }

const std::vector<BlockId>& PagedBackend::block_table(SeqId id) const { return at(id).blocks; }

// ---- prefix caching -------------------------------------------------------------------------

std::span<const std::int32_t> PagedBackend::prompt_ids(const SequenceSpec& spec, std::int64_t initial_tokens) const {
  if (config_.prefix_cache == PrefixCacheMode::none || spec.prompt_token_ids.empty()) return {};
  const std::int64_t known = std::max<std::int64_t>(0, std::min(spec.prompt_tokens, initial_tokens));
  return spec.prompt_token_ids.first(static_cast<std::size_t>(known));
}

PagedBackend::Lookup PagedBackend::lookup(const SequenceSpec& spec, std::int64_t initial_tokens) const {
  Lookup l;
  const auto ids = prompt_ids(spec, initial_tokens);
  if (ids.empty()) return l;
  const auto n = static_cast<std::int64_t>(ids.size());
  // At least one prompt token is computed: the hit covers at most n - 1 tokens, in whole blocks.
  const std::int64_t cap = (n - 1) / config_.block_size;
  l.hit = cache_->match(ids, spec.extra_keys, cap);
  return l;
}

std::int64_t PagedBackend::lookup_cached_tokens(const SequenceSpec& spec, std::int64_t initial_tokens) const {
  check_spec(spec, initial_tokens);  // the front door's checks: this is a public entry point too
  return static_cast<std::int64_t>(lookup(spec, initial_tokens).hit.blocks.size()) * config_.block_size;
}

std::int64_t PagedBackend::available_blocks() const { return free_blocks() + cache_->evictable_blocks(); }

std::int64_t PagedBackend::num_cached_free_blocks() const { return cache_->cached_free_blocks(); }

void PagedBackend::make_room(std::int64_t n) {
  if (const std::int64_t free = free_blocks(); free < n) cache_->evict(n - free);
  if (storage_ != nullptr) storage_->open(pool_, n);  // maps what the blocks need: may throw
  KVLAB_ASSERT(pool_.num_free() >= n);
}

BlockId PagedBackend::take_block(BlockId near, std::int64_t run) {
  const auto b = pool_.allocate(near, static_cast<std::int32_t>(std::min<std::int64_t>(run, INT32_MAX)));
  KVLAB_ASSERT(b.has_value());
  cache_->forget_block(*b);  // hash mode: the LRU head loses its cache entry (an eviction)
  return *b;
}

void PagedBackend::drop_blocks(SeqId id, Sequence& s) {
  account_out(id, s);
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) pool_.release(*it);  // tail first
  s.blocks.clear();
  if (s.prefix_hold >= 0) cache_->release_hold(s.prefix_hold);
  s.prefix_hold = -1;
  if (config_.max_cached_blocks >= 0) cache_->trim(config_.max_cached_blocks, config_.evict_by_pages);
  if (config_.compact_cache) compact_cache();
}

void PagedBackend::compact_cache() {
  if (pool_.order() != FreeOrder::pages) return;
  const std::vector<BlockId> movable = cache_->movable_blocks();
  if (movable.empty()) return;
  // Open groups in use, emptiest first; a source is one whose every used block can move.
  std::unordered_map<std::int32_t, std::vector<BlockId>> in;  // group -> its movable blocks
  for (const BlockId b : movable)
    if (pool_.ref_count(b) == 1) in[pool_.region_of(b)].push_back(b);
  const auto used = [&](std::int32_t r) { return pool_.region_blocks() - pool_.region_free(r); };
  std::vector<std::int32_t> order;
  for (std::int32_t r = 0; r < pool_.num_regions(); ++r)
    if (pool_.is_open(r) && used(r) > 0) order.push_back(r);
  std::ranges::sort(order, {}, [&](std::int32_t r) { return std::pair(used(r), r); });
  std::int64_t room = 0;  // free blocks of the groups between the source and the fullest left
  for (std::size_t k = 1; k < order.size(); ++k) room += pool_.region_free(order[k]);
  std::vector<std::pair<BlockId, BlockId>> moves;
  for (std::size_t lo = 0, hi = order.size(); lo + 1 < hi; room -= pool_.region_free(order[++lo])) {
    const std::int32_t s = order[lo];
    const auto it = in.find(s);
    if (it == in.end() || static_cast<std::int32_t>(it->second.size()) != used(s)) continue;  // pinned
    if (room < used(s)) break;  // the fuller groups cannot take it whole
    for (const BlockId b : it->second) {
      while (pool_.region_free(order[hi - 1]) == 0) --hi;
      moves.emplace_back(b, *pool_.allocate_in(order[hi - 1]));
      --room;
    }
  }
  if (moves.empty()) return;
  try {
    copy_blocks(moves);
  } catch (const Error&) {  // a device error: the blocks stay where they are (compaction is optional)
    for (const auto& [from, to] : moves) pool_.release(to);
    return;
  }
  cache_->relocate(moves);
  pending_moves_ += static_cast<std::int64_t>(moves.size());
}

std::int64_t PagedBackend::do_cached_prefix_tokens(const SequenceSpec& spec) const {
  if (config_.prefix_cache == PrefixCacheMode::none || spec.prompt_token_ids.empty()) return 0;
  return static_cast<std::int64_t>(lookup(spec, spec.prompt_tokens).hit.blocks.size()) * config_.block_size;
}

PrefixCacheStats PagedBackend::do_prefix_cache_stats() const {
  PrefixCacheStats st = stats_;
  st.evictions = cache_->evictions();
  return st;
}

// ---- admission and growth ---------------------------------------------------------------------

bool PagedBackend::do_can_admit(const SequenceSpec& spec, std::int64_t initial_tokens) const {
  if (config_.prefix_cache == PrefixCacheMode::none) return blocks_for(initial_tokens) <= free_blocks();
  const Lookup l = lookup(spec, initial_tokens);
  const auto on_device = static_cast<std::int64_t>(l.hit.blocks.size()) - l.hit.promoted;  // host hits need blocks
  return blocks_for(initial_tokens) - on_device <= available_blocks() - l.hit.revived;
}

void PagedBackend::do_admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens) {
  const auto t0 = std::chrono::steady_clock::now();
  const Lookup l = lookup(spec, initial_tokens);
  const auto lookup_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  const auto hit = static_cast<std::int64_t>(l.hit.blocks.size());
  const std::int64_t need = blocks_for(initial_tokens) - hit + l.hit.promoted;  // host hits come back into fresh blocks
  const std::int64_t available = available_blocks() - l.hit.revived;
  if (need > available) {
    KVLAB_THROW(OutOfMemory, "admitting " + std::to_string(initial_tokens) + " tokens needs " + std::to_string(need) +
                                 " blocks (" + std::to_string(hit) + " more from the prefix cache), " +
                                 std::to_string(available) + " available");
  }
  // From here on nothing can fail.
  Sequence s;
  s.length = initial_tokens;
  s.final_tokens = spec.final_tokens;
  s.cached_tokens = hit * config_.block_size;
  s.blocks.reserve(static_cast<std::size_t>(blocks_for(initial_tokens)));
  const auto ids = prompt_ids(spec, initial_tokens);
  if (!ids.empty()) {
    s.prefix_hold = cache_->acquire_hit(l.hit, spec.extra_keys);
  }
  try {
    make_room(need);  // over a storage, mapping may fail: the hit goes back
  } catch (...) {
    if (s.prefix_hold >= 0) {
      for (const BlockId b : l.hit.blocks) pool_.release(b);
      cache_->release_hold(s.prefix_hold);
    }
    throw;
  }
  for (const BlockId b : l.hit.blocks) {
    if (b < pool_.num_blocks()) {
      s.blocks.push_back(b);
      continue;
    }
    const BlockId into = take_block(last_block(s));  // a host hit: its KV comes back into a fresh block
    cache_->promote(b, into);
    s.blocks.push_back(into);
  }
  for (std::int64_t i = l.hit.promoted; i < need; ++i)  // the prompt's new blocks: one run
    s.blocks.push_back(take_block(last_block(s), i == l.hit.promoted ? need - i : 0));
  if (!ids.empty()) {
    // Every id the spec gives (the prompt's, and the generated tokens' where known) is kept: a
    // block is entered as soon as it is full, now or when the sequence grows.
    s.ids.assign(spec.prompt_token_ids.begin(), spec.prompt_token_ids.end());
    s.extra.assign(spec.extra_keys.begin(), spec.extra_keys.end());
    s.entered = hit;
    s.caching = true;
    enter_full_blocks(s);
    ++stats_.lookups;
    stats_.queries += static_cast<std::int64_t>(ids.size());
    stats_.hits += s.cached_tokens;
    stats_.hit_blocks += hit;
    stats_.lookup_ns += lookup_ns;
  }
  account_in(id, seqs_.insert(id, std::move(s)));
}

void PagedBackend::enter_full_blocks(Sequence& s) {
  if (!s.caching) return;
  const std::int64_t to = full_blocks(std::min(s.length, static_cast<std::int64_t>(s.ids.size())));
  if (to <= s.entered) return;
  const std::int64_t got = cache_->enter_blocks(s.ids, s.extra, s.blocks, s.entered, to, s.prefix_hold);
  stats_.inserted_blocks += got;
  s.entered += got;
  if (s.entered < to) s.caching = false;  // already cached under another block: the rest stays private
}

std::int64_t PagedBackend::blocks_needed_to_grow(const Sequence& s, std::int64_t n) const {
  std::int64_t need = blocks_for(s.length + n) - static_cast<std::int64_t>(s.blocks.size());
  // Appending into a partly filled last block that another sequence shares: copy it first.
  if (n > 0 && offset_in_block(s.length) != 0 && pool_.ref_count(s.blocks.back()) > 1) ++need;
  return need;
}

bool PagedBackend::can_grow_by(const Sequence& s, std::int64_t n) const {
  return s.length + n <= config_.max_seq_len && blocks_needed_to_grow(s, n) <= available_blocks();
}

PagedSequence& PagedBackend::seq(SeqId id) const {
  return const_cast<Sequence&>(at(id));  // the table itself is not const: only this view is
}

bool PagedBackend::do_can_grow(SeqId id, std::int64_t n) const { return can_grow_by(seq(id), n); }

void PagedBackend::do_grow(SeqId id, std::int64_t n) {
  if (do_try_grow(id, n)) return;
  const Sequence& s = seq(id);
  KVLAB_THROW(OutOfMemory, "growing sequence " + std::to_string(id) + " by " + std::to_string(n) + " tokens needs " +
                               std::to_string(blocks_needed_to_grow(s, n)) + " blocks, " +
                               std::to_string(available_blocks()) + " available (or passes max_seq_len)");
}

bool PagedBackend::do_try_grow(SeqId id, std::int64_t n) {
  Sequence& s = seq(id);  // one lookup: growth runs for every running sequence every step
  if (!can_grow_by(s, n)) return false;
  grow_checked(s, id, n);
  return true;
}

void PagedBackend::grow_checked(Sequence& s, SeqId id, std::int64_t n) {
  if (n == 0) return;
  make_room(blocks_needed_to_grow(s, n));
  count_sequence(s, -1);
  if (offset_in_block(s.length) != 0 && pool_.ref_count(s.blocks.back()) > 1) {
    const BlockId shared = s.blocks.back();
    const BlockId own = take_block(s.blocks.size() >= 2 ? s.blocks[s.blocks.size() - 2] : -1);
    try {
      copy_blocks({{shared, own}});
    } catch (...) {  // a failed copy leaves the sequence as it was
      pool_.release(own);
      count_sequence(s, +1);
      throw;
    }
    pool_.release(shared);
    s.blocks.back() = own;
    ++cow_copies_;
    unhold(shared, id);
    hold(own, id, static_cast<std::int32_t>(s.blocks.size() - 1));
  }
  const std::int64_t old_blocks = static_cast<std::int64_t>(s.blocks.size());
  const std::int64_t need = blocks_for(s.length + n) - old_blocks;
  for (std::int64_t i = 0; i < need; ++i) {  // a chunk of several blocks is a run; one block follows the last
    s.blocks.push_back(take_block(last_block(s), i == 0 && need > 1 ? need : 0));
    hold(s.blocks.back(), id, static_cast<std::int32_t>(s.blocks.size() - 1));
  }
  const std::int64_t old_length = s.length;
  s.length += n;
  count_sequence(s, +1);
  enter_full_blocks(s);  // blocks this growth filled (a prefill chunk, a decode token)
  // Only blocks from the one the old length ended in can hold more tokens now; new ones are private.
  if (shared_.empty()) return;
  for (std::int64_t i = full_blocks(old_length); i < old_blocks; ++i) {
    const auto it = shared_.find(s.blocks[static_cast<std::size_t>(i)]);
    if (it != shared_.end()) recount(it->second);
  }
}

void PagedBackend::do_fork(SeqId parent, SeqId child) {
  const Sequence& p = at(parent);
  Sequence c;
  c.blocks = p.blocks;
  c.length = p.length;
  c.final_tokens = p.final_tokens;
  c.prefix_hold = p.prefix_hold;  // the child holds the same cached blocks (radix: locks the same node)
  // The child's own tokens are unknown: it enters nothing (c.caching stays false).
  for (BlockId b : c.blocks) pool_.add_ref(b);
  if (c.prefix_hold >= 0) cache_->share_hold(c.prefix_hold);
  account_in(child, seqs_.insert(child, std::move(c)));
}

void PagedBackend::do_release(SeqId id) {
  Sequence& s = at(id);
  drop_blocks(id, s);                            // tail first: in hash mode the tail is evicted first
  free_swap_after_copies(s.swap, s.swap_bytes);  // a swap-out's copies may still be filling it
  seqs_.erase(id);
  settle();
}

void PagedBackend::free_swap_after_copies(void* swap, std::size_t bytes) {
  if (swap == nullptr) return;
  transfers_.release_after([mr = config_.swap_memory, swap, bytes] { mr->deallocate(swap, bytes); });
}

void PagedBackend::do_begin_step() {
  // The last step's swaps are done by now on a GPU (its kernels waited for them); this frees the
  // host buffers swap-ins emptied.
  transfers_.synchronize();
  moved_blocks_ += std::exchange(pending_moves_, 0);  // the copies compaction made since: this step's
  if (storage_ != nullptr) {
    settle();  // blocks radix eviction freed
    storage_->begin_step(pool_);
  }
}

void PagedBackend::do_prefetch(std::span<const SeqId> /*next_ids*/, std::int64_t /*growth*/) {
  if (storage_ != nullptr) storage_->prefetch(pool_);  // elastic -overlap: the reserve's refill
}

void PagedBackend::copy_blocks(const std::vector<std::pair<BlockId, BlockId>>& pairs) {
  if (layout_.base == nullptr || pairs.empty()) return;
  transfers_.fence();  // a destination may be a block a swap-out's copy still reads
  const int planes = 2 * config_.model.num_layers;
  if (device() != Device::host) {
    // One batched launch over every (plane, pair): plane p's block b is unit p * P + b * S of
    // block_bytes from the base (P, S: the layout's strides in blocks; N and 1 for one region).
    // The same code on a GPU and on the emulated device; only the launcher differs (kernels/attention.hpp).
    const auto per_plane = static_cast<std::int64_t>(layout_.plane_stride / block_bytes_);
    const auto per_block = static_cast<std::int64_t>(layout_.block_stride / block_bytes_);
    std::vector<std::int32_t> ids;
    const std::int64_t n = static_cast<std::int64_t>(pairs.size()) * planes;
    ids.reserve(static_cast<std::size_t>(2 * n));
    for (int p = 0; p < planes; ++p)
      for (const auto& [src, dst] : pairs) ids.push_back(static_cast<std::int32_t>(p * per_plane + src * per_block));
    for (int p = 0; p < planes; ++p)
      for (const auto& [src, dst] : pairs) ids.push_back(static_cast<std::int32_t>(p * per_plane + dst * per_block));
    const std::size_t id_bytes = ids.size() * sizeof(std::int32_t);
    void* dev_ids = config_.memory->allocate(id_bytes);
    struct Free {  // returns the id array however this ends (a failed upload, launch or sync)
      MemoryResource* mr;
      void* p;
      std::size_t n;
      ~Free() { mr->deallocate(p, n); }
    } free_ids{config_.memory, dev_ids, id_bytes};
    upload_bytes(device(), dev_ids, ids.data(), id_bytes);
    simt::BlockCopyParams c;
    c.src_pool = layout_.base;
    c.dst_pool = layout_.base;
    c.src_blocks = static_cast<const std::int32_t*>(dev_ids);
    c.dst_blocks = static_cast<const std::int32_t*>(dev_ids) + n;
    c.num_pairs = n;
    c.block_bytes = static_cast<std::int64_t>(block_bytes_);
    block_copy(device(), c);
    return;
  }
  for (int p = 0; p < planes; ++p)
    for (const auto& [src, dst] : pairs) copy_bytes(device(), block_ptr(p, dst), block_ptr(p, src), block_bytes_);
}

bool PagedBackend::do_is_swapped(SeqId id) const { return seq(id).swapped_blocks > 0; }

void PagedBackend::do_swap_out(SeqId id) {
  Sequence& s = at(id);
  const std::int64_t nb = static_cast<std::int64_t>(s.blocks.size());
  if (nb == 0) return;
  const int planes = 2 * config_.model.num_layers;
  if (layout_.base != nullptr) {
    s.swap_bytes = static_cast<std::size_t>(nb) * planes * block_bytes_;
    s.swap = config_.swap_memory->allocate(s.swap_bytes);  // throws OutOfMemory before any change
    auto* dst = static_cast<std::byte*>(s.swap);
    try {
      for (int p = 0; p < planes; ++p)
        for (std::int64_t i = 0; i < nb; ++i)
          transfers_.copy(dst + (static_cast<std::size_t>(p) * nb + i) * block_bytes_,
                          block_ptr(p, s.blocks[static_cast<std::size_t>(i)]), block_bytes_);
    } catch (...) {                                  // a failed copy: the sequence stays on the device, untouched
      free_swap_after_copies(s.swap, s.swap_bytes);  // the copies enqueued before it still write there
      s.swap = nullptr;
      s.swap_bytes = 0;
      throw;
    }
  }
  drop_blocks(id, s);  // cached blocks keep their entries: their bytes stay valid on the device
  s.swapped_blocks = nb;
  swapped_blocks_ += nb;
  s.caching = false;  // swap_in brings private copies back: nothing after them is entered
  settle();           // after the copies are enqueued: the storage synchronises before it unmaps
}

bool PagedBackend::do_can_swap_in(SeqId id) const {
  const Sequence& s = at(id);
  return s.swapped_blocks <= available_blocks();
}

void PagedBackend::do_swap_in(SeqId id) {
  if (!do_can_swap_in(id)) {
    KVLAB_THROW(OutOfMemory, "swapping sequence " + std::to_string(id) + " in needs " +
                                 std::to_string(at(id).swapped_blocks) + " blocks, " +
                                 std::to_string(available_blocks()) + " available");
  }
  Sequence& s = at(id);
  const std::int64_t nb = s.swapped_blocks;
  make_room(nb);
  for (std::int64_t i = 0; i < nb; ++i)  // one run; private: not re-cached
    s.blocks.push_back(take_block(last_block(s), i == 0 ? nb : 0));
  if (layout_.base != nullptr) {
    const int planes = 2 * config_.model.num_layers;
    const auto* src = static_cast<const std::byte*>(s.swap);
    try {
      for (int p = 0; p < planes; ++p)
        for (std::int64_t i = 0; i < nb; ++i)
          transfers_.copy(block_ptr(p, s.blocks[static_cast<std::size_t>(i)]),
                          src + (static_cast<std::size_t>(p) * nb + i) * block_bytes_, block_bytes_);
    } catch (...) {  // a failed copy: the blocks go back, the sequence stays swapped out
      // Copies enqueued into them still land, in order, before anything fenced after them.
      for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) pool_.release(*it);
      s.blocks.clear();
      throw;
    }
    free_swap_after_copies(s.swap, s.swap_bytes);  // the copies just enqueued read it
  }
  s.swap = nullptr;
  s.swap_bytes = 0;
  swapped_blocks_ += nb;
  s.swapped_blocks = 0;
  account_in(id, s);  // a swapped-out sequence counted nothing: it held no blocks
}

PreparedBatch PagedBackend::do_prepare_batch(std::span<const SeqId> seqs) {
  const auto t0 = std::chrono::steady_clock::now();
  transfers_.fence();  // the batch's kernels and copies see every swap's bytes
  const int batch = static_cast<int>(seqs.size());
  std::int64_t stride = 1;
  for (const SeqId id : seqs) stride = std::max<std::int64_t>(stride, static_cast<std::int64_t>(at(id).blocks.size()));
  const std::int64_t elem = static_cast<std::int64_t>(size_of(model().kv_dtype));
  const PagedPools pools{layout_.base, layout_.plane_stride, config_.block_size,
                         static_cast<std::int64_t>(layout_.block_stride) / elem};
  const std::span<std::int32_t> tables = batch_views_.begin_paged(batch, stride, pools);
  for (int b = 0; b < batch; ++b) {
    const Sequence& s = at(seqs[b]);
    std::copy(s.blocks.begin(), s.blocks.end(), tables.begin() + b * stride);
    batch_views_.set_length(b, s.length);
  }
  const PreparedBatch out = batch_views_.finish(device(), config_.memory);
  last_prepare_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

BackendCounters PagedBackend::do_counters() const {
  const PrefixCacheStats st = do_prefix_cache_stats();
  BackendCounters c = {{"cow_copies", static_cast<double>(cow_copies_)},
                       {"compaction_moves", static_cast<double>(moved_blocks_ + pending_moves_)},
                       {"free_blocks", static_cast<double>(pool_.num_free())},
                       {"cached_free_blocks", static_cast<double>(num_cached_free_blocks())},
                       {"prefix_lookups", static_cast<double>(st.lookups)},
                       {"prefix_hit_blocks", static_cast<double>(st.hit_blocks)},
                       {"prefix_inserted_blocks", static_cast<double>(st.inserted_blocks)},
                       {"prefix_evictions", static_cast<double>(st.evictions)}};
  for (auto& tier : cache_->tier_counters()) c.push_back(std::move(tier));  // host tier, when there is one
  if (storage_ != nullptr) storage_->add_counters(c);
  return c;
}

// ---- accounting ------------------------------------------------------------------------------

std::int64_t PagedBackend::tokens_in(const Sequence& s, std::int64_t index, bool eventual) const noexcept {
  const std::int64_t tokens = eventual ? std::max(s.final_tokens, s.length) : s.length;
  return std::clamp<std::int64_t>(tokens - index * config_.block_size, 0, config_.block_size);
}

void PagedBackend::count_sequence(const Sequence& s, int sign) noexcept {
  // Block i of a sequence alone holds clamp(tokens - i * B, 0, B): over n blocks, min(tokens, n * B).
  const auto n = static_cast<std::int64_t>(s.blocks.size());
  const std::int64_t room = n * config_.block_size;
  totals_.logical += sign * n;
  totals_.filled += sign * std::min(s.length, room);
  totals_.eventual += sign * std::min(std::max(s.final_tokens, s.length), room);
}

void PagedBackend::recount(SharedBlock& sb) {
  totals_.filled -= sb.filled;
  totals_.eventual -= sb.eventual;
  std::int64_t max_filled = 0, sum_filled = 0, max_eventual = 0, sum_eventual = 0;
  for (const Holder& h : sb.holders) {
    const Sequence& s = at(h.id);
    const std::int64_t f = tokens_in(s, h.index, false), e = tokens_in(s, h.index, true);
    max_filled = std::max(max_filled, f);
    sum_filled += f;
    max_eventual = std::max(max_eventual, e);
    sum_eventual += e;
  }
  sb.filled = max_filled - sum_filled;
  sb.eventual = max_eventual - sum_eventual;
  totals_.filled += sb.filled;
  totals_.eventual += sb.eventual;
}

void PagedBackend::hold(BlockId b, SeqId id, std::int32_t index) {
  BlockHolders& h = holders_[static_cast<std::size_t>(b)];
  if (h.count++ == 0) {
    h.only_id = id;
    h.only_index = index;
    ++totals_.physical;
    return;
  }
  SharedBlock& sb = shared_[b];
  if (h.count == 2) sb.holders.push_back({h.only_id, h.only_index});
  sb.holders.push_back({id, index});
  recount(sb);
}

void PagedBackend::unhold(BlockId b, SeqId id) {
  BlockHolders& h = holders_[static_cast<std::size_t>(b)];
  KVLAB_ASSERT(h.count > 0);
  if (--h.count == 0) {
    --totals_.physical;
    return;
  }
  const auto it = shared_.find(b);
  KVLAB_ASSERT(it != shared_.end());
  auto& holders = it->second.holders;
  const auto pos = std::find_if(holders.begin(), holders.end(), [id](const Holder& x) { return x.id == id; });
  KVLAB_ASSERT(pos != holders.end());
  *pos = holders.back();
  holders.pop_back();
  if (h.count > 1) {
    recount(it->second);
    return;
  }
  totals_.filled -= it->second.filled;  // alone again: the closed form covers it
  totals_.eventual -= it->second.eventual;
  h.only_id = holders.front().id;
  h.only_index = holders.front().index;
  shared_.erase(it);
}

void PagedBackend::account_in(SeqId id, const Sequence& s) {
  for (std::size_t i = 0; i < s.blocks.size(); ++i) hold(s.blocks[i], id, static_cast<std::int32_t>(i));
  count_sequence(s, +1);
}

void PagedBackend::account_out(SeqId id, const Sequence& s) {
  count_sequence(s, -1);
  for (const BlockId b : s.blocks) unhold(b, id);
}

MemoryBreakdown PagedBackend::do_breakdown(const SequenceSpec*) const {
  // Shared blocks counted once; blocks no sequence holds are free — cached ones (an LRU entry, an
  // unlocked tree node) too. Every total is kept up to date by the operations (see the header).
  const std::size_t token_bytes = config_.model.kv_bytes_per_token();
  const auto bs = static_cast<std::size_t>(config_.block_size);
  const auto filled = static_cast<std::size_t>(totals_.filled);
  const auto eventual = static_cast<std::size_t>(totals_.eventual);
  MemoryBreakdown m;
  m.capacity = static_cast<std::size_t>(pool_.num_blocks()) * bs * token_bytes;
  m.token_states = filled * token_bytes;
  m.reserved = (eventual - filled) * token_bytes;
  m.internal_fragmentation = (static_cast<std::size_t>(totals_.physical) * bs - eventual) * token_bytes;
  m.shared_savings = static_cast<std::size_t>(totals_.logical - totals_.physical) * bs * token_bytes;
  m.cached = static_cast<std::size_t>(num_cached_free_blocks()) * bs * token_bytes;
  return m;  // no external fragmentation: any free block serves any sequence
}

}  // namespace kvlab
