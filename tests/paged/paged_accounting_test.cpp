// The paged backend keeps its memory breakdown as running totals (paged/paged_backend.hpp). These
// tests replay random operation sequences — admit (with and without prefix-cache hits, chunked),
// grow, fork with copy-on-write, release, swap out and in — and check after every step that the
// incremental breakdown equals a full recount by the straightforward algorithm below (the
// backend's breakdown before it became incremental), to the last byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "alloc/memory/statistics_adaptor.hpp"
#include "paged/hash_prefix_cache.hpp"
#include "paged/paged_backend.hpp"
#include "tests/support/tiny_model.hpp"
#include "tests/paged/prefix_cache_access.hpp"

namespace kvlab {
namespace {

/// Test-only reference: scans the whole pool and every held block. Per physical block, the most
/// tokens any holder has written into it and the most any holder will eventually write; shared
/// blocks counted once; blocks no sequence holds are free (cached ones too).
MemoryBreakdown full_recount(const PagedBackend& b, std::int64_t bs,
                             const std::map<SeqId, std::int64_t>& final_tokens) {
  const std::size_t token_bytes = b.model().kv_bytes_per_token();
  const BlockPool& pool = b.pool();
  std::vector<std::int32_t> filled(static_cast<std::size_t>(pool.num_blocks()), 0);
  std::vector<std::int32_t> eventual(filled.size(), 0);
  std::vector<std::uint8_t> held(filled.size(), 0);
  std::int64_t logical_blocks = 0, physical_blocks = 0;
  for (const auto& [id, final_of] : final_tokens) {
    const std::vector<BlockId>& blocks = b.block_table(id);
    const std::int64_t length = b.length(id);
    logical_blocks += static_cast<std::int64_t>(blocks.size());
    for (const BlockId blk : blocks) {
      physical_blocks += held[static_cast<std::size_t>(blk)] == 0 ? 1 : 0;
      held[static_cast<std::size_t>(blk)] = 1;
    }
    const std::int64_t final_len = std::max(final_of, length);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const std::int64_t start = static_cast<std::int64_t>(i) * bs;
      const auto blk = static_cast<std::size_t>(blocks[i]);
      filled[blk] = std::max<std::int32_t>(filled[blk],
                                           static_cast<std::int32_t>(std::clamp<std::int64_t>(length - start, 0, bs)));
      eventual[blk] = std::max<std::int32_t>(
          eventual[blk], static_cast<std::int32_t>(std::clamp<std::int64_t>(final_len - start, 0, bs)));
    }
  }
  MemoryBreakdown m;
  m.capacity = static_cast<std::size_t>(pool.num_blocks()) * static_cast<std::size_t>(bs) * token_bytes;
  std::int64_t cached_free = 0;
  for (std::size_t blk = 0; blk < filled.size(); ++blk) {
    const auto id = static_cast<BlockId>(blk);
    if (testing::hash_cache(b) != nullptr && pool.ref_count(id) == 0 && testing::hash_cache(b)->is_cached(id))
      ++cached_free;
    if (held[blk] == 0) continue;
    const std::int64_t ev = std::max(eventual[blk], filled[blk]);
    m.token_states += static_cast<std::size_t>(filled[blk]) * token_bytes;
    m.reserved += static_cast<std::size_t>(ev - filled[blk]) * token_bytes;
    m.internal_fragmentation += static_cast<std::size_t>(bs - ev) * token_bytes;
  }
  m.shared_savings =
      static_cast<std::size_t>(logical_blocks - physical_blocks) * static_cast<std::size_t>(bs) * token_bytes;
  if (testing::radix_cache(b) != nullptr) cached_free = b.num_cached_free_blocks();  // the tree's own O(1) count
  m.cached = static_cast<std::size_t>(cached_free) * static_cast<std::size_t>(bs) * token_bytes;
  return m;
}

std::string differences(const MemoryBreakdown& got, const MemoryBreakdown& want) {
  std::string d;
  const auto field = [&](const char* name, std::size_t g, std::size_t w) {
    if (g != w) d += std::string(name) + " " + std::to_string(g) + " != " + std::to_string(w) + "; ";
  };
  field("capacity", got.capacity, want.capacity);
  field("token_states", got.token_states, want.token_states);
  field("reserved", got.reserved, want.reserved);
  field("internal_fragmentation", got.internal_fragmentation, want.internal_fragmentation);
  field("external_fragmentation", got.external_fragmentation, want.external_fragmentation);
  field("shared_savings", got.shared_savings, want.shared_savings);
  field("cached", got.cached, want.cached);
  return d;
}

struct Case {
  std::int32_t block_size;
  PrefixCacheMode mode;
  bool storage;  // real bytes in host memory (copies run), or accounting only
};

/// Drives one backend with random operations and checks the breakdown after each.
class RandomDriver {
 public:
  RandomDriver(const Case& c, std::uint32_t seed) : bs_(c.block_size), rng_(seed) {
    PagedConfig cfg;
    cfg.model = testing::tiny_model();
    cfg.block_size = c.block_size;
    cfg.capacity_bytes =
        static_cast<std::size_t>(40) * static_cast<std::size_t>(c.block_size) * cfg.model.kv_bytes_per_token();
    cfg.max_seq_len = std::max<std::int64_t>(64, 8 * static_cast<std::int64_t>(c.block_size));
    cfg.prefix_cache = c.mode;
    cfg.memory = c.storage ? &host_memory_resource() : nullptr;
    backend_ = std::make_unique<PagedBackend>(cfg);
    // Three prompt families: prompts share prefixes of these, so the prefix cache hits.
    for (auto& family : families_) {
      family.resize(static_cast<std::size_t>(cfg.max_seq_len));
      for (auto& t : family) t = pick(0, 50);
    }
  }

  /// One random operation; returns false when the breakdown disagrees with the recount.
  ::testing::AssertionResult step(int n) {
    int op = static_cast<int>(pick(0, 9));
    if (live_.size() > 8 || backend_->pool().num_free() == 0) op = pick(0, 1) == 0 ? 7 : op;  // keep room to move
    if (op <= 2 || live_.empty())
      admit();
    else if (op <= 5)
      grow();
    else if (op == 6)
      fork();
    else if (op == 7)
      release();
    else
      swap();
    const std::string d = differences(backend_->breakdown(), full_recount(*backend_, bs_, live_));
    if (d.empty()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "step " << n << " (op " << op << "): " << d;
  }
  [[nodiscard]] std::int64_t cow_copies() const { return backend_->cow_copies(); }
  [[nodiscard]] std::int64_t hits() const { return backend_->prefix_cache_stats().hits; }
  [[nodiscard]] std::int64_t swaps() const { return swaps_; }

 private:
  std::int64_t pick(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
  }
  SeqId any_live() {
    auto it = live_.begin();
    std::advance(it, pick(0, static_cast<std::int64_t>(live_.size()) - 1));
    return it->first;
  }

  void admit() {
    const std::int64_t max_len = backend_->max_seq_len();
    std::vector<std::int32_t> ids = families_[static_cast<std::size_t>(pick(0, 2))];
    SequenceSpec spec;
    spec.prompt_tokens = pick(1, std::min<std::int64_t>(max_len / 2, 4 * bs_ + 3));
    ids.resize(static_cast<std::size_t>(spec.prompt_tokens));
    if (pick(0, 3) == 0) ids.back() = 99;  // a different last token
    const std::int64_t initial = pick(0, 3) == 0 ? pick(1, spec.prompt_tokens) : spec.prompt_tokens;  // chunked
    spec.final_tokens = pick(spec.prompt_tokens, max_len / 2 + spec.prompt_tokens);
    const std::vector<std::int64_t> salt{7};
    if (pick(0, 4) != 0) spec.prompt_token_ids = ids;
    if (pick(0, 5) == 0) spec.extra_keys = salt;
    if (!backend_->can_admit(spec, initial)) return;
    backend_->admit(next_, spec, initial);
    live_[next_++] = spec.final_tokens;
  }
  void grow() {
    const SeqId id = any_live();
    if (backend_->is_swapped(id)) return;
    const std::int64_t n = pick(0, 3) == 0 ? pick(1, 3 * bs_) : 1;  // mostly decode steps, sometimes chunks
    if (backend_->can_grow(id, n)) backend_->grow(id, n);
  }
  void fork() {
    const SeqId parent = any_live();
    if (backend_->is_swapped(parent)) return;
    backend_->fork(parent, next_);
    live_[next_++] = live_.at(parent);
  }
  void release() {
    const SeqId id = any_live();
    backend_->release(id);
    live_.erase(id);
  }
  void swap() {
    const SeqId id = any_live();
    if (!backend_->is_swapped(id)) {
      backend_->swap_out(id);
      ++swaps_;
    } else if (backend_->can_swap_in(id)) {
      backend_->swap_in(id);
    }
  }

  std::int64_t bs_;
  std::mt19937 rng_;
  std::unique_ptr<PagedBackend> backend_;
  std::vector<std::int32_t> families_[3];
  std::map<SeqId, std::int64_t> live_;  // live sequences and their final_tokens
  SeqId next_ = 1;
  std::int64_t swaps_ = 0;
};

class IncrementalAccounting : public ::testing::TestWithParam<Case> {};

TEST_P(IncrementalAccounting, BreakdownEqualsFullRecountAfterEveryOperation) {
  const Case c = GetParam();
  std::int64_t cow = 0, hits = 0, swaps = 0;
  for (std::uint32_t seed = 1; seed <= 4; ++seed) {
    RandomDriver d(c, seed * 7919 + static_cast<std::uint32_t>(c.block_size));
    for (int n = 0; n < 1500; ++n) ASSERT_TRUE(d.step(n)) << "seed " << seed;
    cow += d.cow_copies();
    hits += d.hits();
    swaps += d.swaps();
  }
  // The random walks did reach the interesting paths.
  if (c.block_size > 1) {  // block size 1: no partly filled block to copy
    EXPECT_GT(cow, 0);
  }
  EXPECT_GT(swaps, 0);
  if (c.mode != PrefixCacheMode::none) {
    EXPECT_GT(hits, 0);
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::int32_t bs : {1, 3, 7, 16, 256})
    for (const PrefixCacheMode mode : {PrefixCacheMode::none, PrefixCacheMode::hash, PrefixCacheMode::radix})
      out.push_back({bs, mode, false});
  out.push_back({3, PrefixCacheMode::hash, true});
  out.push_back({16, PrefixCacheMode::radix, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(PagedBackend, IncrementalAccounting, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return "b" + std::to_string(info.param.block_size) + "_" +
                                  std::string(to_string(info.param.mode)) + (info.param.storage ? "_storage" : "");
                         });

TEST(PagedBackend, BreakdownCostDoesNotGrowWithThePool) {
  // A pool of four million blocks: every breakdown used to allocate and scan all of them.
  PagedConfig cfg;
  cfg.model = testing::tiny_model();
  cfg.block_size = 1;
  cfg.capacity_bytes = static_cast<std::size_t>(4) << 20 << 9;  // 4 Mi blocks of one 512-byte token
  PagedBackend b(cfg);
  b.admit(1, {10, 20}, 10);
  std::size_t tokens = 0;
  for (int i = 0; i < 20000; ++i) tokens += b.breakdown().token_states;  // ~minutes if each scanned the pool
  EXPECT_EQ(tokens, std::size_t{20000} * 10 * 512);
}

}  // namespace
}  // namespace kvlab
