#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "alloc/contiguous/contiguous_backend.hpp"
#include "alloc/core/error.hpp"
#include "alloc/memory/statistics_adaptor.hpp"
#include "kernels/attention.hpp"
#include "kernels/reference_attention.hpp"
#include "paged/paged_backend.hpp"
#include "tests/support/kv_fixture.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

constexpr std::size_t kToken = 512;  // tiny model bytes per token

PagedConfig config(std::int32_t block_size, std::int64_t capacity_tokens, MemoryResource* mr = nullptr) {
  PagedConfig c;
  c.model = testing::tiny_model();
  c.capacity_bytes = static_cast<std::size_t>(capacity_tokens) * kToken;
  c.block_size = block_size;
  c.max_seq_len = 4096;
  c.memory = mr;
  return c;
}

/// Writes a value derived from (sequence tag, token, layer, K|V, element) into every written slot.
float pattern(int tag, std::int64_t t, int layer, int kv, int e) {
  return static_cast<float>(((tag * 131 + t) * 7 + layer * 3 + kv) % 1000 + e % 7) * 0.25f;
}
void write_tokens(PagedBackend& b, SeqId id, int tag, std::int64_t from, std::int64_t to) {
  b.prepare_batch({&id, 1});
  for (int layer = 0; layer < 2; ++layer) {
    const PagedKv<half_t> v = as_paged<half_t>(b.layer_view(layer));
    for (std::int64_t t = from; t < to; ++t)
      for (int h = 0; h < 2; ++h)
        for (int d = 0; d < 32; ++d) {
          v.k(0, t, h)[d] = from_float<half_t>(pattern(tag, t, layer, 0, h * 32 + d));
          v.v(0, t, h)[d] = from_float<half_t>(pattern(tag, t, layer, 1, h * 32 + d));
        }
  }
}
/// Number of (token, layer, K|V, element) values of `id` that differ from the pattern of `tag`.
int count_mismatches(PagedBackend& b, SeqId id, int tag, std::int64_t from, std::int64_t to) {
  b.prepare_batch({&id, 1});
  int bad = 0;
  for (int layer = 0; layer < 2; ++layer) {
    const PagedKv<half_t> v = as_paged<half_t>(b.layer_view(layer));
    for (std::int64_t t = from; t < to; ++t)
      for (int h = 0; h < 2; ++h)
        for (int d = 0; d < 32; ++d) {
          bad += to_float(v.k(0, t, h)[d]) != to_float(from_float<half_t>(pattern(tag, t, layer, 0, h * 32 + d)));
          bad += to_float(v.v(0, t, h)[d]) != to_float(from_float<half_t>(pattern(tag, t, layer, 1, h * 32 + d)));
        }
  }
  return bad;
}

TEST(PagedBackend, BlockSizeAnyIntegerFrom1To1024) {
  for (int bs : {1, 3, 7, 17, 100, 1024}) {
    PagedBackend b(config(bs, 2048));
    b.admit(1, {10, 20}, 10);
    EXPECT_EQ(b.block_table(1).size(), static_cast<std::size_t>((10 + bs - 1) / bs)) << bs;
    b.grow(1, 1);
    EXPECT_EQ(b.block_table(1).size(), static_cast<std::size_t>((11 + bs - 1) / bs)) << bs;
    b.release(1);
  }
  EXPECT_THROW(PagedBackend(config(0, 100)), InvalidArgument);
  EXPECT_THROW(PagedBackend(config(1025, 4096)), InvalidArgument);
  EXPECT_THROW(PagedBackend(config(16, 15)), InvalidArgument);  // capacity below one block
}

TEST(PagedBackend, BeamsShareThePromptBlocks) {
  // 64-token prompt at block size 16 (4 blocks), forked into 4 beams that each append 10 tokens:
  // each beam needs one block of its own, so 4 shared + 4 = 8 blocks instead of 4 x 5 = 20.
  PagedBackend b(config(16, 4096));
  b.admit(0, {64, 74}, 64);
  for (SeqId beam = 1; beam < 4; ++beam) b.fork(0, beam);
  EXPECT_EQ(b.pool().num_used(), 4);  // forks share everything
  for (SeqId beam = 0; beam < 4; ++beam) b.grow(beam, 10);
  EXPECT_EQ(b.pool().num_used(), 8);
  EXPECT_EQ(b.cow_copies(), 0);  // the prompt ends on a block boundary: nothing to copy
  EXPECT_EQ(b.breakdown().shared_savings, 12u * 16 * kToken);
  // With a 256-token prompt: 16 shared prompt blocks instead of 64.
  PagedBackend big(config(16, 8192));
  big.admit(0, {256, 266}, 256);
  for (SeqId beam = 1; beam < 4; ++beam) big.fork(0, beam);
  EXPECT_EQ(big.pool().num_used(), 16);
  EXPECT_EQ(big.breakdown().shared_savings, 48u * 16 * kToken);
  for (SeqId beam = 0; beam < 4; ++beam) big.release(beam);
  for (BlockId i = 0; i < big.pool().num_blocks(); ++i) ASSERT_EQ(big.pool().ref_count(i), 0);
}

TEST(PagedBackend, AppendingIntoASharedPartialBlockCopiesIt) {
  PagedBackend b(config(16, 4096));
  b.admit(0, {20, 40}, 20);  // second block holds 4 tokens
  b.fork(0, 1);
  EXPECT_EQ(b.pool().num_used(), 2);
  EXPECT_EQ(b.block_table(0), b.block_table(1));
  b.grow(1, 1);  // copy-on-write of the shared partial block
  EXPECT_EQ(b.cow_copies(), 1);
  EXPECT_EQ(b.pool().num_used(), 3);
  EXPECT_EQ(b.block_table(0)[0], b.block_table(1)[0]);
  EXPECT_NE(b.block_table(0)[1], b.block_table(1)[1]);
  b.grow(0, 1);  // the parent is now the only holder of its block: no copy
  EXPECT_EQ(b.cow_copies(), 1);
  EXPECT_EQ(b.pool().ref_count(b.block_table(0)[1]), 1);
}

TEST(PagedBackend, CopyOnWriteLeavesTheSiblingsBytesIntact) {
  StatisticsAdaptor stats(host_memory_resource());
  {
    PagedBackend b(config(7, 700, &stats));
    b.admit(0, {10, 30}, 10);
    write_tokens(b, 0, /*tag=*/1, 0, 10);
    b.fork(0, 1);
    b.grow(1, 2);  // copies block 1 (tokens 7..9) for the child
    write_tokens(b, 1, /*tag=*/2, 10, 12);
    b.grow(0, 3);
    write_tokens(b, 0, /*tag=*/3, 10, 13);
    EXPECT_EQ(count_mismatches(b, 0, 1, 0, 10), 0);  // parent's prompt
    EXPECT_EQ(count_mismatches(b, 1, 1, 0, 10), 0);  // child's copy of it
    EXPECT_EQ(count_mismatches(b, 1, 2, 10, 12), 0);
    EXPECT_EQ(count_mismatches(b, 0, 3, 10, 13), 0);
    EXPECT_GT(count_mismatches(b, 0, 2, 10, 12), 0);  // the check can fail: different tags differ
    b.release(0);
    b.release(1);
    EXPECT_EQ(b.pool().num_used(), 0);
  }
  EXPECT_EQ(stats.statistics().current_bytes, 0u);
}

TEST(PagedBackend, SwapOutThenInRestoresIdenticalBytes) {
  StatisticsAdaptor swap(host_memory_resource());
  PagedConfig c = config(3, 30, &host_memory_resource());  // 10 blocks
  c.swap_memory = &swap;
  PagedBackend b(c);
  b.admit(0, {25, 40}, 25);
  write_tokens(b, 0, 5, 0, 25);
  const std::vector<BlockId> before = b.block_table(0);
  b.swap_out(0);
  EXPECT_TRUE(b.is_swapped(0));
  EXPECT_EQ(b.pool().num_used(), 0);
  EXPECT_EQ(swap.statistics().current_bytes, before.size() * 3 * kToken);
  // Another sequence takes the freed blocks and overwrites them.
  b.admit(1, {25, 25}, 25);
  write_tokens(b, 1, 6, 0, 25);
  EXPECT_FALSE(b.can_swap_in(0));
  EXPECT_THROW(b.swap_in(0), OutOfMemory);
  EXPECT_TRUE(b.is_swapped(0));
  b.release(1);
  b.swap_in(0);
  EXPECT_FALSE(b.is_swapped(0));
  EXPECT_EQ(b.length(0), 25);
  EXPECT_EQ(count_mismatches(b, 0, 5, 0, 25), 0);
  EXPECT_EQ(swap.statistics().current_bytes, 0u);
  b.release(0);
}

TEST(PagedBackend, ExhaustionIsOutOfMemoryWithNoStateChange) {
  PagedBackend b(config(16, 64));  // 4 blocks
  b.admit(0, {40, 60}, 40);        // 3 blocks, the last holds 8 tokens
  b.fork(0, 1);
  EXPECT_FALSE(b.can_admit({17, 17}, 17));
  EXPECT_THROW(b.admit(2, {17, 17}, 17), OutOfMemory);
  EXPECT_TRUE(b.can_grow(1, 1));   // one copy-on-write block is free
  EXPECT_FALSE(b.can_grow(1, 9));  // copy + a new block: two needed, one free
  const auto table = b.block_table(1);
  EXPECT_THROW(b.grow(1, 9), OutOfMemory);
  EXPECT_EQ(b.block_table(1), table);
  EXPECT_EQ(b.length(1), 40);
  EXPECT_EQ(b.pool().num_used(), 3);
  EXPECT_EQ(b.pool().ref_count(table[2]), 2);
  b.release(0);
  b.release(1);
  for (BlockId i = 0; i < 4; ++i) EXPECT_EQ(b.pool().ref_count(i), 0);
}

TEST(PagedBackend, AccountingCountsSharedBlocksOnce) {
  PagedBackend b(config(16, 1600));
  b.admit(0, {20, 30}, 20);  // 2 blocks: 20 written, 10 more to come, 2 never
  MemoryBreakdown m = b.breakdown();
  EXPECT_EQ(m.token_states, 20 * kToken);
  EXPECT_EQ(m.reserved, 10 * kToken);
  EXPECT_EQ(m.internal_fragmentation, 2 * kToken);
  EXPECT_EQ(m.external_fragmentation, 0u);
  b.fork(0, 1);
  m = b.breakdown();
  EXPECT_EQ(m.token_states, 20 * kToken);  // not 40
  EXPECT_EQ(m.shared_savings, 32 * kToken);
  EXPECT_EQ(m.capacity, 1600 * kToken);
  EXPECT_NEAR(MemoryFractions::of(m).sum(), 1.0, 1e-12);
}

TEST(PagedBackend, AttentionThroughThePagedViewEqualsTheContiguousBackend) {
  // The same KV written into a contiguous backend and into paged backends of several block
  // sizes; host attention through each view must agree with the float64 reference and each other.
  const std::vector<std::int64_t> lens = {37, 1, 130, 64, 91};  // prime batch of 5
  for (int bs : {1, 3, 7, 16, 17, 256}) {
    ContiguousConfig cc;
    cc.model = testing::tiny_model();
    cc.capacity_bytes = 4096 * kToken;
    cc.max_seq_len = 256;
    cc.policy = ReservationPolicy::oracle;
    cc.memory = &host_memory_resource();
    ContiguousBackend contiguous(cc);
    PagedBackend paged(config(bs, 4096, &host_memory_resource()));
    std::vector<SeqId> ids;
    for (std::size_t i = 0; i < lens.size(); ++i) {
      ids.push_back(static_cast<SeqId>(i));
      contiguous.admit(ids.back(), {lens[i], lens[i]}, lens[i]);
      paged.admit(ids.back(), {lens[i], lens[i]}, lens[i]);
    }
    const PreparedBatch pc = contiguous.prepare_batch(ids);
    const PreparedBatch pp = paged.prepare_batch(ids);
    std::mt19937_64 rng(bs);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    for (int layer = 0; layer < 2; ++layer) {
      const auto cv = as_contiguous<half_t>(contiguous.layer_view(layer));
      const auto pv = as_paged<half_t>(paged.layer_view(layer));
      for (std::size_t s = 0; s < lens.size(); ++s)
        for (std::int64_t t = 0; t < lens[s]; ++t)
          for (int h = 0; h < 2; ++h)
            for (int d = 0; d < 32; ++d) {
              const half_t k = from_float<half_t>(uni(rng)), v = from_float<half_t>(uni(rng));
              cv.k(static_cast<int>(s), t, h)[d] = pv.k(static_cast<int>(s), t, h)[d] = k;
              cv.v(static_cast<int>(s), t, h)[d] = pv.v(static_cast<int>(s), t, h)[d] = v;
            }
    }
    std::vector<float> q(lens.size() * 4 * 32);
    for (auto& x : q) x = uni(rng);
    for (int layer = 0; layer < 2; ++layer) {
      AttentionParams p;
      p.batch = static_cast<int>(lens.size());
      p.num_q_heads = 4;
      p.num_kv_heads = 2;
      p.head_dim = 32;
      p.scale = 0.17677669f;
      p.q = q.data();
      p.seq_lens = pc.seq_lens;
      std::vector<float> out_c(q.size(), NAN), out_p(q.size(), NAN);
      p.out = out_c.data();
      host_attention(p, contiguous.layer_view(layer));
      p.out = out_p.data();
      p.seq_lens = pp.seq_lens;
      host_attention(p, paged.layer_view(layer));
      std::vector<double> ref;
      reference_attention(p, as_paged<half_t>(paged.layer_view(layer)), ref);
      testing::expect_matches_reference(out_c, ref, {}, "contiguous bs=" + std::to_string(bs));
      testing::expect_matches_reference(out_p, ref, {}, "paged bs=" + std::to_string(bs));
      for (std::size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(out_c[i], out_p[i], 1e-5) << bs;
    }
  }
}

/// llama-3-8b at block 16: 32 KiB per block and plane, so a 2 MiB region holds 64 blocks.
PagedConfig llama_config(std::int64_t blocks, bool region) {
  PagedConfig c;
  c.model = model_preset("llama-3-8b");
  c.block_size = 16;
  c.capacity_bytes = static_cast<std::size_t>(blocks) * 16 * c.model.kv_bytes_per_token();
  c.region_placement = region;
  return c;
}

/// Steps where a sequence's next block does not follow its last in address order.
int jumps(const std::vector<BlockId>& table) {
  int n = 0;
  for (std::size_t i = 1; i < table.size(); ++i) n += table[i] != table[i - 1] + 1;
  return n;
}

TEST(PagedBackend, RegionPlacementKeepsSequencesGrowingTogetherInOrder) {
  // Four sequences decoding side by side, one block each per step, 101 blocks each, in a pool of
  // 8 regions of 64 blocks: each runs in order through one region, then through a fresh one.
  // Under lifo the same steps interleave them block by block.
  for (const bool region : {false, true}) {
    PagedBackend b(llama_config(512, region));
    EXPECT_EQ(b.pool().region_blocks(), region ? 64 : 1);
    EXPECT_EQ(b.name(), region ? "paged-b16-region" : "paged-b16");
    for (SeqId id = 0; id < 4; ++id) b.admit(id, {16, 4096}, 16);
    for (int step = 0; step < 100; ++step)
      for (SeqId id = 0; id < 4; ++id) b.grow(id, 16);
    for (SeqId id = 0; id < 4; ++id) {
      const auto& table = b.block_table(id);
      ASSERT_EQ(table.size(), 101u);
      if (region) {
        EXPECT_EQ(jumps(table), 1) << id;
        EXPECT_EQ(table.front(), id * 64);
        EXPECT_EQ(table[64], (id + 4) * 64);
      } else {
        EXPECT_EQ(jumps(table), 100) << id;
      }
    }
  }
  // A region is one 2 MiB of a plane whatever the block size: 8 blocks of 128 tokens.
  PagedConfig c = llama_config(64, true);
  c.block_size = 128;
  EXPECT_EQ(PagedBackend(c).pool().region_blocks(), 8);
  c.prefix_cache = PrefixCacheMode::hash;
  EXPECT_THROW(PagedBackend{c}, InvalidArgument);
  c.prefix_cache = PrefixCacheMode::radix;
  EXPECT_NO_THROW(PagedBackend{c});
}

TEST(PagedBackend, RegionPlacementPassesEachBlockItsPredecessor) {
  // 64 blocks per region. Copy-on-write follows the block before the copied one; swap-in refills
  // in order; growth continues after the last block.
  PagedBackend b(llama_config(512, true));
  b.admit(0, {20, 100}, 20);  // blocks 0, 1 (the second partial)
  EXPECT_EQ(b.block_table(0), (std::vector<BlockId>{0, 1}));
  b.fork(0, 1);
  b.grow(1, 1);  // copy-on-write of block 1: the copy follows block 0 (2), not a fresh region (64)
  EXPECT_EQ(b.block_table(1), (std::vector<BlockId>{0, 2}));
  b.grow(1, 30);  // 51 tokens: a fourth block after the third
  EXPECT_EQ(b.block_table(1), (std::vector<BlockId>{0, 2, 3, 4}));
  b.swap_out(1);
  b.admit(2, {16, 16}, 16);  // region 1 (64 free) against region 0 (63)
  EXPECT_EQ(b.block_table(2), (std::vector<BlockId>{64}));
  b.swap_in(1);  // regions 0 and 1 hold blocks, 2-7 none: the lowest of those, in order
  EXPECT_EQ(b.block_table(1), (std::vector<BlockId>{128, 129, 130, 131}));
}

/// Token ids for the twin test: one of 3 shared system prompts of 40 tokens, then the request's own.
std::vector<std::int32_t> twin_ids(std::mt19937& rng, std::int64_t n) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  const auto group = static_cast<std::int32_t>(rng() % 3);
  for (std::int64_t i = 0; i < n; ++i)
    ids[static_cast<std::size_t>(i)] =
        i < 40 ? group * 1000 + static_cast<std::int32_t>(i) : static_cast<std::int32_t>(rng() % 50000);
  return ids;
}

/// One random operation (admit with token ids, grow, fork, swap out or in, release) applied to
/// both twins, after checking both answer the same yes/no question the same way.
struct Twins {
  PagedBackend& lifo;
  PagedBackend& region;
  std::vector<SeqId> live;
  SeqId next = 0;
  int swaps = 0, forks = 0;

  void random_op(std::mt19937& rng) {
    const int kind = static_cast<int>(rng() % 6);
    const SeqId id = live.empty() ? -1 : live[rng() % live.size()];
    if (kind == 0 || live.empty()) {
      const std::int64_t prompt = 1 + rng() % 60;
      const auto ids = twin_ids(rng, prompt);
      const SequenceSpec spec{prompt, prompt + static_cast<std::int64_t>(rng() % 60), ids};
      ASSERT_EQ(lifo.can_admit(spec, prompt), region.can_admit(spec, prompt));
      if (!lifo.can_admit(spec, prompt)) return;
      lifo.admit(next, spec, prompt);
      region.admit(next, spec, prompt);
      live.push_back(next++);
    } else if (kind == 1 && !lifo.is_swapped(id)) {
      ASSERT_EQ(lifo.can_grow(id, 5), region.can_grow(id, 5));
      if (!lifo.can_grow(id, 5)) return;
      lifo.grow(id, 5);
      region.grow(id, 5);
    } else if (kind == 2 && !lifo.is_swapped(id)) {
      lifo.fork(id, next);
      region.fork(id, next);
      live.push_back(next++);
      ++forks;
    } else if (kind == 3 && !lifo.is_swapped(id)) {
      lifo.swap_out(id);
      region.swap_out(id);
      ++swaps;
    } else if (kind == 4 && lifo.is_swapped(id)) {
      ASSERT_EQ(lifo.can_swap_in(id), region.can_swap_in(id));
      if (!lifo.can_swap_in(id)) return;
      lifo.swap_in(id);
      region.swap_in(id);
    } else if (kind == 5) {
      lifo.release(id);
      region.release(id);
      live.erase(std::find(live.begin(), live.end(), id));
    }
  }

  void expect_same_accounting(int op) const {
    const MemoryBreakdown a = lifo.breakdown(), r = region.breakdown();
    ASSERT_EQ(a.token_states, r.token_states) << op;
    ASSERT_EQ(a.reserved, r.reserved) << op;
    ASSERT_EQ(a.internal_fragmentation, r.internal_fragmentation) << op;
    ASSERT_EQ(a.external_fragmentation, r.external_fragmentation) << op;
    ASSERT_EQ(a.shared_savings, r.shared_savings) << op;
    ASSERT_EQ(a.cached, r.cached) << op;
    ASSERT_EQ(lifo.pool().num_free(), region.pool().num_free()) << op;
    ASSERT_EQ(lifo.cow_copies(), region.cow_copies()) << op;
    const PrefixCacheStats pa = lifo.prefix_cache_stats(), pr = region.prefix_cache_stats();
    ASSERT_EQ(pa.hits, pr.hits) << op;
    ASSERT_EQ(pa.hit_blocks, pr.hit_blocks) << op;
    ASSERT_EQ(pa.queries, pr.queries) << op;
    ASSERT_EQ(pa.evictions, pr.evictions) << op;
    ASSERT_EQ(pa.inserted_blocks, pr.inserted_blocks) << op;
  }

  /// Resident sequences of the region twin whose blocks span more than one region of `blocks`.
  [[nodiscard]] int spanning(int blocks) const {
    int n = 0;
    for (const SeqId s : live)
      if (!region.is_swapped(s)) {
        const auto& t = region.block_table(s);
        n += !t.empty() && t.front() / blocks != t.back() / blocks;
      }
    return n;
  }

  /// Bytes written through the region twin's tables read back, none overwritten by another
  /// sequence. (Swapped sequences and those sharing blocks are released first: a write here
  /// bypasses copy-on-write.)
  void expect_bytes_read_back() {
    std::erase_if(live, [&](SeqId s) { return region.is_swapped(s) ? (region.release(s), true) : false; });
    for (bool shared = true; shared;) {
      shared = false;
      for (auto it = live.begin(); it != live.end() && !shared; ++it) {
        const auto& table = region.block_table(*it);
        shared = std::any_of(table.begin(), table.end(), [&](BlockId b) { return region.pool().ref_count(b) > 1; });
        if (shared) {
          region.release(*it);
          live.erase(it);
        }
      }
    }
    ASSERT_GT(live.size(), 3u);
    for (std::size_t i = 0; i < live.size(); ++i)
      write_tokens(region, live[i], static_cast<int>(i), 0, region.length(live[i]));
    for (std::size_t i = 0; i < live.size(); ++i)
      EXPECT_EQ(count_mismatches(region, live[i], static_cast<int>(i), 0, region.length(live[i])), 0);
  }
};

TEST(PagedBackend, RegionPlacementChangesWhichBlocksNeverHowMany) {
  // The same random admits (with token ids that share prefixes), growth, forks (copy-on-write),
  // swaps and releases on a lifo twin and a region twin of 10 regions of 9 blocks, without a
  // prefix cache and with the radix cache: every accounting figure, cache counter and yes/no
  // answer agree after every operation.
  for (const PrefixCacheMode mode : {PrefixCacheMode::none, PrefixCacheMode::radix}) {
    PagedConfig lifo_config = config(7, 600, &host_memory_resource());  // 85 blocks of 896 B per plane
    lifo_config.prefix_cache = mode;
    PagedConfig region_config = lifo_config;
    region_config.region_placement = true;
    region_config.region_bytes = 8192;
    PagedBackend lifo(lifo_config), region(region_config);
    ASSERT_EQ(region.pool().region_blocks(), 9);
    Twins twins{lifo, region, {}};
    std::mt19937 rng(17);
    int spanning = 0;
    for (int op = 0; op < 3000; ++op) {
      twins.random_op(rng);
      lifo.begin_step();
      region.begin_step();
      twins.expect_same_accounting(op);
      if (HasFatalFailure()) return;
      spanning += twins.spanning(9);
    }
    EXPECT_GT(twins.swaps, 50);
    EXPECT_GT(twins.forks, 50);
    EXPECT_GT(lifo.cow_copies(), 10);
    EXPECT_GT(spanning, 100);  // sequences did span regions
    if (mode == PrefixCacheMode::radix) {
      EXPECT_GT(lifo.prefix_cache_stats().hits, 1000);
    }
    twins.expect_bytes_read_back();
  }
}

}  // namespace
}  // namespace kvlab
