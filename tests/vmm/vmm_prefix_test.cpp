// Page-granular prefix sharing in the vmm backend (VmmConfig::prefix_cache, docs/vmm.md): the same
// physical pages mapped into several slots, whole rows only, hits known by hand, bytes compared,
// reference counts, accounting, no leaks, the CUDA double's contract, out of memory without side
// effects, and a randomized workload that checks bytes and books after every operation.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "alloc/core/error.hpp"
#include "tests/vmm/vmm_test_support.hpp"
#if KVLAB_HAS_CUDA_HEADERS
#include "alloc/cuda/emulated/cuda_driver_double.hpp"
#include "vmm/cuda_vm_driver.hpp"
#endif

namespace kvlab {
namespace {

using testing::kKiB;
using testing::tiny_vmm;

std::shared_ptr<PosixVmDriver> posix(std::size_t bytes) { return std::make_shared<PosixVmDriver>(bytes); }

VmmConfig prefix_vmm(std::size_t capacity, std::shared_ptr<VmDriver> driver, VmmLayout layout = VmmLayout::per_layer,
                     bool defer = true, std::int64_t max_seq_len = 512, int max_batch = 8) {
  VmmConfig c = tiny_vmm(4 * kKiB, capacity, std::move(driver), layout, max_seq_len, max_batch);
  c.prefix_cache = true;
  c.deferred_reclamation = defer;
  return c;
}

/// Token ids 0..n-1 of prompt `group` (different groups share nothing).
std::vector<std::int32_t> ids(std::int64_t n, std::int32_t group, std::int64_t same_as_group_until = 0,
                              std::int32_t other = -1) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (std::int64_t t = 0; t < n; ++t)
    v[static_cast<std::size_t>(t)] = (t < same_as_group_until ? other : group) * 100000 + static_cast<std::int32_t>(t);
  return v;
}

SequenceSpec spec(const std::vector<std::int32_t>& prompt, std::int64_t final_tokens) {
  SequenceSpec s;
  s.prompt_tokens = static_cast<std::int64_t>(prompt.size());
  s.final_tokens = final_tokens;
  s.prompt_token_ids = prompt;
  return s;
}

/// Per-token tags: what a token's KV is derived from. A prompt token's tag chains the ids up to it
/// (two prompts with the same prefix have the same KV there); a generated token's is unique.
std::vector<std::int64_t> prompt_tags(const std::vector<std::int32_t>& prompt) {
  std::vector<std::int64_t> tags;
  std::uint64_t h = 1469598103934665603ull;
  for (const std::int32_t id : prompt) {
    h = (h ^ static_cast<std::uint32_t>(id)) * 1099511628211ull;
    tags.push_back(static_cast<std::int64_t>(h % 1000003));
  }
  return tags;
}

void write(VmmBackend& b, SeqId id, const std::vector<std::int64_t>& tags, std::int64_t from, std::int64_t to) {
  const SeqId one[] = {id};
  b.prepare_batch(one);
  const ModelGeometry& m = b.model();
  for (int layer = 0; layer < m.num_layers; ++layer) {
    const auto v = as_contiguous<half_t>(b.layer_view(layer));
    for (std::int64_t t = from; t < to; ++t)
      for (int h = 0; h < m.num_kv_heads; ++h)
        for (int d = 0; d < m.head_dim; ++d) {
          v.k(0, t, h)[d] = testing::pattern(tags[static_cast<std::size_t>(t)], layer, 0, t, h, d);
          v.v(0, t, h)[d] = testing::pattern(tags[static_cast<std::size_t>(t)], layer, 1, t, h, d);
        }
  }
}

/// Elements of tokens [0, to) of `id` that differ from their tags' pattern.
std::int64_t mismatches(VmmBackend& b, SeqId id, const std::vector<std::int64_t>& tags, std::int64_t to) {
  const SeqId one[] = {id};
  b.prepare_batch(one);
  const ModelGeometry& m = b.model();
  std::int64_t bad = 0;
  for (int layer = 0; layer < m.num_layers; ++layer) {
    const auto v = as_contiguous<half_t>(b.layer_view(layer));
    for (std::int64_t t = 0; t < to; ++t)
      for (int h = 0; h < m.num_kv_heads; ++h)
        for (int d = 0; d < m.head_dim; ++d) {
          const std::int64_t tag = tags[static_cast<std::size_t>(t)];
          bad += to_float(v.k(0, t, h)[d]) != to_float(testing::pattern(tag, layer, 0, t, h, d));
          bad += to_float(v.v(0, t, h)[d]) != to_float(testing::pattern(tag, layer, 1, t, h, d));
        }
  }
  return bad;
}

/// A prompt admitted whole, its non-cached tokens written (what a prefill would do).
void admit_and_prefill(VmmBackend& b, SeqId id, const std::vector<std::int32_t>& prompt, std::int64_t final_tokens) {
  const std::int64_t n = static_cast<std::int64_t>(prompt.size());
  b.admit(id, spec(prompt, final_tokens), n);
  write(b, id, prompt_tags(prompt), b.cached_tokens(id), n);
}

class VmmPrefixLayouts : public ::testing::TestWithParam<VmmLayout> {};

TEST_P(VmmPrefixLayouts, TwoAndAHalfSharedRowsShareTwoWholeRows) {
  auto driver = posix(512 * kKiB);
  VmmBackend b(prefix_vmm(512 * kKiB, driver, GetParam()));
  const std::int64_t R = b.block_tokens();  // 32 tokens a 4 KiB row per layer, 16 with the megacache
  ASSERT_EQ(R, GetParam() == VmmLayout::per_layer ? 32 : 16);
  ASSERT_EQ(b.block_rows(), 1);
  const std::int64_t n = 2 * R + R / 2;  // 2.5 rows
  const auto a = ids(n, 1);
  admit_and_prefill(b, 1, a, n + 10);
  EXPECT_EQ(b.cached_tokens(1), 0);
  // The same 2.5 rows plus 20 tokens of its own: two whole rows are shared, the half row is not.
  auto bp = ids(n + 20, 2, n, 1);
  admit_and_prefill(b, 2, bp, n + 30);
  EXPECT_EQ(b.cached_tokens(2), 2 * R);
  for (int t = 0; t < b.num_tensors(); ++t) {
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(b.page_at(2, t, r), b.page_at(1, t, r)) << "tensor " << t << " row " << r;
      EXPECT_EQ(b.page_mappings(b.page_at(1, t, r)), 2);
    }
    EXPECT_NE(b.page_at(2, t, 2), b.page_at(1, t, 2)) << "a partly filled row is never shared";
    EXPECT_EQ(b.page_mappings(b.page_at(1, t, 2)), 1);
  }
  // Each sequence writes past the shared rows into its own pages: the other's bytes stay.
  b.grow(1, 10);
  auto ta = prompt_tags(a);
  for (int i = 0; i < 10; ++i) ta.push_back(500000 + i);
  write(b, 1, ta, n, n + 10);
  b.grow(2, 10);
  auto tb = prompt_tags(bp);
  for (int i = 0; i < 10; ++i) tb.push_back(600000 + i);
  write(b, 2, tb, n + 20, n + 30);
  EXPECT_EQ(mismatches(b, 1, ta, n + 10), 0);
  EXPECT_EQ(mismatches(b, 2, tb, n + 30), 0);
  const PrefixCacheStats ps = b.prefix_cache_stats();
  EXPECT_EQ(ps.hits, 2 * R);
  EXPECT_EQ(ps.queries, n + n + 20);
  EXPECT_EQ(ps.inserted_blocks, 2 + 1);  // a's two rows, then b's third (its own content)
  EXPECT_EQ(b.stats().shared_maps, 2 * b.num_tensors());
  EXPECT_EQ(b.stats().shared_pages, 2 * b.num_tensors());
  EXPECT_EQ(driver->usage().mappings, static_cast<std::size_t>(b.stats().mappings));
  EXPECT_EQ(b.stats().mappings, b.stats().mapped_pages + 2 * b.num_tensors());
  b.release(1);
  b.release(2);
}

TEST_P(VmmPrefixLayouts, TheLastPromptTokenIsAlwaysComputed) {
  VmmBackend b(prefix_vmm(512 * kKiB, posix(512 * kKiB), GetParam()));
  const std::int64_t R = b.block_tokens();
  const auto a = ids(2 * R, 1);  // exactly two rows
  admit_and_prefill(b, 1, a, 2 * R);
  admit_and_prefill(b, 2, a, 2 * R);
  EXPECT_EQ(b.cached_tokens(2), R) << "the same prompt: its last row holds the last token, recomputed";
  EXPECT_NE(b.page_at(2, 0, 1), b.page_at(1, 0, 1));
  const auto longer = ids(2 * R + 1, 1);
  admit_and_prefill(b, 3, longer, 2 * R + 1);
  EXPECT_EQ(b.cached_tokens(3), 2 * R);
  // An admission of fewer tokens than the prompt (a prefill chunk) looks up only those.
  b.admit(4, spec(longer, 2 * R + 1), R + 1);
  EXPECT_EQ(b.cached_tokens(4), R);
  const auto short_prompt = ids(R, 1);
  b.admit(5, spec(short_prompt, R), R);
  EXPECT_EQ(b.cached_tokens(5), 0) << "less than one row after the cap";
  // Without ids nothing is looked up or entered.
  b.admit(6, {3 * R, 3 * R}, 3 * R);
  EXPECT_EQ(b.cached_tokens(6), 0);
  for (SeqId id = 1; id <= 6; ++id) b.release(id);
}

TEST_P(VmmPrefixLayouts, ForkSharesFullRowsAndCopiesThePartialRow) {
  auto driver = posix(512 * kKiB);
  VmmBackend b(prefix_vmm(512 * kKiB, driver, GetParam()));
  const std::int64_t R = b.block_tokens();
  const auto a = ids(2 * R + 5, 1);
  admit_and_prefill(b, 1, a, 4 * R);
  const std::int64_t maps_before = b.stats().critical_maps;
  b.fork(1, 2);
  EXPECT_EQ(b.cached_tokens(2), 0);
  for (int t = 0; t < b.num_tensors(); ++t) {
    EXPECT_EQ(b.page_at(2, t, 0), b.page_at(1, t, 0));
    EXPECT_EQ(b.page_at(2, t, 1), b.page_at(1, t, 1));
    EXPECT_NE(b.page_at(2, t, 2), b.page_at(1, t, 2));
  }
  EXPECT_EQ(b.stats().critical_maps - maps_before, 3 * b.num_tensors()) << "2 shared + 1 copied row";
  auto tags = prompt_tags(a);
  EXPECT_EQ(mismatches(b, 2, tags, 2 * R + 5), 0);
  auto t1 = tags, t2 = tags;
  for (int i = 0; i < R; ++i) {
    t1.push_back(700000 + i);
    t2.push_back(800000 + i);
  }
  b.grow(1, R);
  b.grow(2, R);
  write(b, 1, t1, 2 * R + 5, 3 * R + 5);
  write(b, 2, t2, 2 * R + 5, 3 * R + 5);
  EXPECT_EQ(mismatches(b, 1, t1, 3 * R + 5), 0);
  EXPECT_EQ(mismatches(b, 2, t2, 3 * R + 5), 0);
  b.release(1);
  EXPECT_EQ(mismatches(b, 2, t2, 3 * R + 5), 0);
  b.release(2);
  EXPECT_EQ(driver->usage().mappings, static_cast<std::size_t>(b.stats().mappings));
}

// Issue 17: a 129-token prompt prefilled as 32 + 97 enters the blocks of both chunks, so the next
// identical prompt hits 128 tokens (4 blocks of 32 per layer, 8 of 16 with the megacache), and
// decode blocks are entered as soon as they are complete when the spec gives their ids.
TEST_P(VmmPrefixLayouts, EveryCompleteBlockIsEnteredAcrossChunksAndDecode) {
  VmmBackend b(prefix_vmm(512 * kKiB, posix(512 * kKiB), GetParam()));
  const std::int64_t R = b.block_tokens();
  const auto p = ids(129, 1);
  b.admit(1, spec(p, 130), 32);
  EXPECT_EQ(b.prefix_cache_stats().inserted_blocks, 32 / R);
  EXPECT_EQ(b.cached_prefix_tokens(spec(p, 130)), 32);
  b.grow(1, 97);
  EXPECT_EQ(b.prefix_cache_stats().inserted_blocks, 128 / R);
  EXPECT_EQ(b.cached_prefix_tokens(spec(p, 130)), 128);
  b.admit(2, spec(p, 130), 129);
  EXPECT_EQ(b.cached_tokens(2), 128);
  b.release(2);
  // Decode: ids for 2R generated tokens after a 129-token prompt (different from p's).
  auto with_output = ids(129 + 2 * R, 2);
  SequenceSpec s = spec(std::vector<std::int32_t>(with_output.begin(), with_output.begin() + 129), 129 + 2 * R);
  s.prompt_token_ids = with_output;
  b.admit(3, s, 129);
  const std::int64_t before = b.prefix_cache_stats().inserted_blocks;
  b.grow(3, 2 * R);  // 129 + 2R tokens: blocks up to (129 + 2R) / R complete
  EXPECT_EQ(b.prefix_cache_stats().inserted_blocks - before, 2);
  auto next_turn = with_output;
  next_turn.push_back(7);
  b.admit(4, spec(next_turn, 200), static_cast<std::int64_t>(next_turn.size()));
  EXPECT_EQ(b.cached_tokens(4), (129 + 2 * R) / R * R);
  // Without ids for the generated tokens nothing past the prompt is entered.
  b.admit(5, spec(ids(129, 3), 129 + 2 * R), 129);
  const std::int64_t at = b.prefix_cache_stats().inserted_blocks;
  b.grow(5, 2 * R);
  EXPECT_EQ(b.prefix_cache_stats().inserted_blocks, at);
  for (SeqId id : {1, 3, 4, 5}) b.release(id);
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, VmmPrefixLayouts, ::testing::Values(VmmLayout::per_layer, VmmLayout::megacache),
                         [](const auto& info) {
                           return info.param == VmmLayout::per_layer ? "per_layer" : "megacache";
                         });

TEST(VmmPrefix, UnmappingOneSharerLeavesTheOthersBytesIntact) {
  for (const bool defer : {false, true}) {
    auto driver = posix(512 * kKiB);
    {
      VmmBackend b(prefix_vmm(512 * kKiB, driver, VmmLayout::per_layer, defer));
      const auto a = ids(100, 1);
      admit_and_prefill(b, 1, a, 100);
      admit_and_prefill(b, 2, a, 100);
      ASSERT_EQ(b.cached_tokens(2), 96);
      const PageId shared = b.page_at(2, 3, 1);
      EXPECT_EQ(b.page_mappings(shared), 2);
      b.release(1);
      EXPECT_EQ(b.page_mappings(shared), defer ? 2 : 1) << "a free slot keeps its mappings only with deferral";
      EXPECT_EQ(mismatches(b, 2, prompt_tags(a), 100), 0) << "defer " << defer;
      // And the other way round: the sequence that hit goes, a third one hits what is left.
      admit_and_prefill(b, 3, a, 100);
      EXPECT_EQ(b.cached_tokens(3), 96);
      b.release(2);
      EXPECT_EQ(mismatches(b, 3, prompt_tags(a), 100), 0);
      b.release(3);
      EXPECT_EQ(driver->usage().mappings, static_cast<std::size_t>(b.stats().mappings));
      if (!defer) {
        EXPECT_EQ(driver->usage().mappings, 0u);
      }
    }
    EXPECT_TRUE(driver->usage().empty()) << "defer " << defer;
  }
}

TEST(VmmPrefix, AccountingCountsASharedPageOnce) {
  VmmBackend b(prefix_vmm(512 * kKiB, nullptr));                                   // accounting only: the same books
  const std::int64_t tok = static_cast<std::int64_t>(b.token_bytes_per_tensor());  // 128
  const std::int64_t T = b.num_tensors();
  const auto a = ids(80, 1);
  b.admit(1, spec(a, 80), 80);
  auto bp = ids(100, 2, 80, 1);
  b.admit(2, spec(bp, 100), 100);
  ASSERT_EQ(b.cached_tokens(2), 64);
  const MemoryBreakdown m = b.breakdown();
  EXPECT_EQ(m.shared_savings, static_cast<std::size_t>(2 * T * 4096));
  EXPECT_EQ(m.token_states, static_cast<std::size_t>(T * (80 + 100 - 64) * tok));
  // Pages: a 3 rows, b 1 more row... 4 rows of its own (100 tokens): 3 + 4 - 2 shared = 5 rows.
  EXPECT_EQ(m.internal_fragmentation, static_cast<std::size_t>(T * (5 * 4096 - (80 + 100 - 64) * tok)));
  EXPECT_EQ(b.stats().mapped_pages, 5 * T);
  testing::expect_consistent(b);
  b.release(1);
  b.release(2);
  EXPECT_EQ(b.breakdown().used(), 0u);
  EXPECT_EQ(b.breakdown().cached, static_cast<std::size_t>(5 * T * 4096)) << "cached pages count as free";
  EXPECT_EQ(b.breakdown().shared_savings, 0u);
}

TEST(VmmPrefix, FreePagesKeepTheirPrefixUntilReusedOldestFirst) {
  // No deferral: a finished sequence's pages are unmapped at once, but keep their index entries
  // in the pool's LRU order; a hit maps them again, a new sequence takes the oldest first.
  auto driver = posix(64 * kKiB);
  VmmBackend b(prefix_vmm(64 * kKiB, driver, VmmLayout::per_layer, false));  // 16 pages: 4 rows
  const auto a = ids(64, 1);
  admit_and_prefill(b, 1, a, 64);  // 2 rows
  const PageId a0 = b.page_at(1, 0, 0);
  b.release(1);
  EXPECT_EQ(driver->usage().mappings, 0u);
  EXPECT_EQ(b.free_pages(), 16);
  const auto a2 = ids(65, 1);
  admit_and_prefill(b, 2, a2, 65);
  EXPECT_EQ(b.cached_tokens(2), 64) << "revived from free pages";
  EXPECT_EQ(b.page_at(2, 0, 0), a0);
  EXPECT_EQ(mismatches(b, 2, prompt_tags(a2), 65), 0);
  b.release(2);
  // Another prompt takes a row: the never-used pages go first, the cached ones stay.
  admit_and_prefill(b, 3, ids(20, 3), 20);
  b.release(3);
  EXPECT_EQ(b.prefix_cache_stats().evictions, 0);
  admit_and_prefill(b, 4, a2, 65);
  EXPECT_EQ(b.cached_tokens(4), 64);
  b.release(4);
  // A prompt of 4 rows needs every page: the cached prefixes are evicted.
  admit_and_prefill(b, 5, ids(128, 5), 128);
  b.release(5);
  EXPECT_GT(b.prefix_cache_stats().evictions, 0);
  admit_and_prefill(b, 6, a2, 65);
  EXPECT_EQ(b.cached_tokens(6), 0);
  b.release(6);
}

TEST(VmmPrefix, AHitNeedsNoFreshPagesForItsSharedRows) {
  VmmBackend b(prefix_vmm(48 * kKiB, nullptr));  // 12 pages: 3 rows of 4 tensors
  const auto a = ids(64, 1);
  b.admit(1, spec(a, 64), 64);  // 2 rows
  EXPECT_FALSE(b.can_admit({64, 64}, 64)) << "2 more rows do not fit without sharing";
  auto bp = ids(64, 2, 33, 1);  // shares row 0 (and a token of row 1): one fresh row
  EXPECT_TRUE(b.can_admit(spec(bp, 64), 64));
  b.admit(2, spec(bp, 64), 64);
  EXPECT_EQ(b.cached_tokens(2), 32);
  EXPECT_EQ(b.free_pages(), 0);
  testing::expect_consistent(b);
}

TEST(VmmPrefix, OutOfMemoryLeavesNothingBehind) {
  auto driver = posix(48 * kKiB);
  VmmBackend b(prefix_vmm(48 * kKiB, driver));  // 12 pages
  const auto a = ids(64, 1);
  admit_and_prefill(b, 1, a, 64);
  auto too_long = ids(130, 2, 64, 1);  // shares 2 rows, needs 3 more rows and there is 1
  const auto snapshot = [&] {
    const VmmStats s = b.stats();
    const PrefixCacheStats p = b.prefix_cache_stats();
    const MemoryBreakdown m = b.breakdown();
    return std::vector<std::int64_t>{s.mapped_pages,
                                     s.mappings,
                                     s.critical_maps,
                                     s.critical_unmaps,
                                     p.hits,
                                     p.queries,
                                     p.inserted_blocks,
                                     p.evictions,
                                     static_cast<std::int64_t>(m.token_states),
                                     static_cast<std::int64_t>(m.shared_savings),
                                     static_cast<std::int64_t>(driver->usage().mappings),
                                     b.free_pages(),
                                     b.page_mappings(b.page_at(1, 0, 0))};
  };
  const auto before = snapshot();
  EXPECT_FALSE(b.can_admit(spec(too_long, 130), 130));
  EXPECT_THROW(b.admit(2, spec(too_long, 130), 130), OutOfMemory);
  EXPECT_FALSE(b.contains(2));
  EXPECT_EQ(snapshot(), before);
  // A driver failure halfway through the shared maps: rolled back, the books equal the driver's.
  auto fits = ids(70, 3, 64, 1);  // 2 shared rows + 1 fresh row
  for (int nth = 1; nth <= 12; ++nth) {
    int calls = 0;
    driver->set_fault_hook(
        [&](VmCall c) { return c == VmCall::map && ++calls == nth ? VmFault::out_of_memory : VmFault::none; });
    bool admitted = false;
    try {
      b.admit(3, spec(fits, 70), 70);
      admitted = true;
    } catch (const OutOfMemory&) {
    }
    driver->set_fault_hook({});
    EXPECT_FALSE(admitted) << nth;  // the admission makes 12 maps: 8 shared, 4 fresh
    EXPECT_FALSE(b.contains(3));
    EXPECT_EQ(driver->usage().mappings, static_cast<std::size_t>(b.stats().mappings)) << nth;
    EXPECT_EQ(b.page_mappings(b.page_at(1, 0, 0)), 1) << nth;
    EXPECT_EQ(mismatches(b, 1, prompt_tags(a), 64), 0);
  }
  b.admit(3, spec(fits, 70), 70);
  EXPECT_EQ(b.cached_tokens(3), 64);
  b.release(1);
  b.release(3);
}

TEST(VmmPrefix, ExtraKeysAndIdsAreVerified) {
  VmmBackend b(prefix_vmm(512 * kKiB, nullptr));
  const auto a = ids(100, 1);
  const std::int64_t salt_a[] = {7}, salt_b[] = {8};
  SequenceSpec sa = spec(a, 100);
  sa.extra_keys = salt_a;
  b.admit(1, sa, 100);
  SequenceSpec sb = spec(a, 100);
  sb.extra_keys = salt_b;
  b.admit(2, sb, 100);
  EXPECT_EQ(b.cached_tokens(2), 0) << "another tenant's salt";
  b.admit(3, sa, 100);
  EXPECT_EQ(b.cached_tokens(3), 96);
  auto diverge = a;
  diverge[40] = -5;  // row 1 differs
  b.admit(4, spec(diverge, 100), 100);
  EXPECT_EQ(b.cached_tokens(4), 0) << "no salt: a different first block";
  SequenceSpec sd = spec(diverge, 100);
  sd.extra_keys = salt_a;
  b.admit(5, sd, 100);
  EXPECT_EQ(b.cached_tokens(5), 32);
  SequenceSpec bad = spec(a, 100);
  bad.prompt_tokens = 101;
  bad.final_tokens = 101;
  EXPECT_THROW(b.admit(6, bad, 101), InvalidArgument) << "fewer ids than prompt tokens";
}

TEST(VmmPrefix, BlocksOfSeveralRowsWhenATokenDoesNotDivideThePage) {
  VmmConfig c = prefix_vmm(1024 * kKiB, nullptr, VmmLayout::per_layer, true, 1024);
  c.model.head_dim = 24;  // 96 bytes a token per tensor: lcm(4096, 96) = 12288 = 3 rows of 128 tokens
  c.driver = posix(1024 * kKiB);
  VmmBackend b(c);
  EXPECT_EQ(b.block_rows(), 3);
  EXPECT_EQ(b.block_tokens(), 128);
  const auto a = ids(300, 1);
  admit_and_prefill(b, 1, a, 300);
  admit_and_prefill(b, 2, a, 300);
  EXPECT_EQ(b.cached_tokens(2), 256);
  for (int r = 0; r < 6; ++r) EXPECT_EQ(b.page_at(2, 1, r), b.page_at(1, 1, r));
  EXPECT_NE(b.page_at(2, 1, 6), b.page_at(1, 1, 6));
  EXPECT_EQ(mismatches(b, 2, prompt_tags(a), 300), 0);
  b.release(1);
  b.release(2);
}

TEST(VmmPrefix, OverlapAndEagerPagesNeverTouchSharedRows) {
  auto driver = posix(1024 * kKiB);
  VmmConfig c = prefix_vmm(1024 * kKiB, driver);
  c.overlap = true;
  c.eager_tokens = 20;
  VmmBackend b(c);
  const auto a = ids(90, 1);
  std::vector<SeqId> live;
  std::map<SeqId, std::vector<std::int64_t>> tags;
  for (SeqId id = 1; id <= 4; ++id) {
    admit_and_prefill(b, id, a, 400);
    tags[id] = prompt_tags(a);
    live.push_back(id);
  }
  EXPECT_EQ(b.prefix_cache_stats().hits, 3 * 64);
  std::vector<PageId> row0;
  for (int t = 0; t < b.num_tensors(); ++t) row0.push_back(b.page_at(1, t, 0));
  for (int step = 0; step < 120; ++step) {
    b.prefetch(live, 1);
    for (SeqId id : live) ASSERT_EQ(mismatches(b, id, tags[id], b.length(id)), 0) << step;
    b.begin_step();
    for (SeqId id : live) {
      const std::int64_t len = b.length(id);
      b.grow(id, 1);
      tags[id].push_back(id * 10000 + len);
      write(b, id, tags[id], len, len + 1);
    }
  }
  for (SeqId id : live) {
    EXPECT_EQ(mismatches(b, id, tags[id], b.length(id)), 0);
    for (int t = 0; t < b.num_tensors(); ++t) EXPECT_EQ(b.page_at(id, t, 0), row0[static_cast<std::size_t>(t)]);
  }
  EXPECT_GT(b.stats().background_maps, 0);
  for (SeqId id : live) b.release(id);
  EXPECT_EQ(driver->usage().mappings, static_cast<std::size_t>(b.stats().mappings));
}

#if KVLAB_HAS_CUDA_HEADERS
TEST(VmmPrefix, TheCudaDoubleAcceptsOneHandleMappedInTwoSlots) {
  CudaDriverDoubleConfig dc;
  dc.granularity = 4 * kKiB;
  dc.capacity = std::size_t{8} << 20;
  dc.poison_byte = 0x7f;
  CudaDriverDouble dbl(dc);
  {
    auto driver = std::make_shared<CudaVmDriver>(dbl.api(), CudaVmOptions{0, true});
    VmmBackend b(prefix_vmm(256 * kKiB, driver));
    const auto a = ids(100, 1);
    admit_and_prefill(b, 1, a, 130);
    admit_and_prefill(b, 2, a, 130);
    b.fork(2, 3);
    EXPECT_EQ(b.cached_tokens(2), 96);
    EXPECT_EQ(b.page_mappings(b.page_at(1, 0, 0)), 3);
    EXPECT_EQ(dbl.usage().mappings, static_cast<std::size_t>(b.stats().mappings));
    EXPECT_LT(static_cast<std::size_t>(b.stats().mapped_pages), dbl.usage().mappings);
    for (SeqId id : {1, 2, 3}) EXPECT_EQ(mismatches(b, id, prompt_tags(a), 100), 0);
    b.release(1);
    EXPECT_EQ(mismatches(b, 3, prompt_tags(a), 100), 0);
    b.release(2);
    b.release(3);
  }
  EXPECT_TRUE(dbl.usage().empty()) << dbl.leak_report();
  const auto v = dbl.violations();
  EXPECT_TRUE(v.empty()) << v.front();
}
#endif

/// Random admits (prompts from a few shared-prefix groups), prefill chunks, growth, forks and
/// releases under memory pressure; after every operation every live sequence's bytes are checked
/// and the books must equal the driver's.
struct RandomCase {
  VmmLayout layout;
  bool defer;
  bool accounting_only;
};

class VmmPrefixRandom : public ::testing::TestWithParam<RandomCase> {};

/// One random run's operations and what every live sequence must hold.
struct RandomRun {
  VmmBackend& b;
  bool write_bytes;
  std::mt19937_64 rng;
  std::map<SeqId, std::vector<std::int64_t>> tags;    // expected tag of every written token
  std::map<SeqId, std::vector<std::int64_t>> prompt;  // tags of the whole prompt (its ids are in the spec)
  std::map<SeqId, std::int64_t> final_len;
  SeqId next = 1;
  std::int64_t hits = 0, ooms = 0;

  std::map<SeqId, std::vector<std::int64_t>>::iterator any_live() {
    auto it = tags.begin();
    std::advance(it, static_cast<long>(rng() % tags.size()));
    return it;
  }
  void admit(int op) {
    const auto group = static_cast<std::int32_t>(rng() % 3);
    const std::int64_t shared = 20 + static_cast<std::int64_t>(rng() % 60);
    const std::int64_t n = shared + 1 + static_cast<std::int64_t>(rng() % 40);
    const auto prompt = ids(n, 100 + op, shared, group);
    const std::int64_t chunk = rng() % 3 == 0 ? 1 + static_cast<std::int64_t>(rng() % n) : n;
    const SequenceSpec sp = spec(prompt, n + 30);
    const bool can = b.can_admit(sp, chunk);
    try {
      b.admit(next, sp, chunk);
    } catch (const OutOfMemory&) {
      ++ooms;
      EXPECT_FALSE(can);
      return;
    }
    EXPECT_TRUE(can);
    hits += b.cached_tokens(next);
    EXPECT_LE(b.cached_tokens(next), chunk - 1);
    tags[next] = prompt_tags(prompt);
    this->prompt[next] = tags[next];
    tags[next].resize(static_cast<std::size_t>(chunk));
    final_len[next] = n + 30;
    if (write_bytes) write(b, next, tags[next], b.cached_tokens(next), chunk);
    ++next;
  }
  void grow() {
    const auto it = any_live();
    const SeqId id = it->first;
    const std::int64_t len = b.length(id), g = 1 + static_cast<std::int64_t>(rng() % 12);
    if (len + g > final_len[id]) return;
    if (!b.can_grow(id, g)) {
      EXPECT_THROW(b.grow(id, g), OutOfMemory);
      return;
    }
    b.grow(id, g);
    // The rest of the prompt first (a later prefill chunk: the spec gave its ids, so the backend
    // may enter its blocks), then generated tokens.
    const auto& p = prompt[id];
    for (std::int64_t t = len; t < len + g; ++t)
      it->second.push_back(t < static_cast<std::int64_t>(p.size()) ? p[static_cast<std::size_t>(t)]
                                                                   : static_cast<std::int64_t>(id * 1000 + t));
    if (write_bytes) write(b, id, it->second, len, len + g);
  }
  void fork() {
    const auto it = any_live();
    try {
      b.fork(it->first, next);
    } catch (const OutOfMemory&) {
      return;
    }
    tags[next] = it->second;
    prompt[next] = prompt[it->first];
    final_len[next] = final_len[it->first];
    ++next;
  }
  void release() {
    const auto it = any_live();
    b.release(it->first);
    final_len.erase(it->first);
    prompt.erase(it->first);
    tags.erase(it);
  }
};

TEST_P(VmmPrefixRandom, BytesAndBooksHold) {
  const RandomCase rc = GetParam();
  const std::size_t capacity = 160 * kKiB;  // 40 pages
  auto driver = rc.accounting_only ? nullptr : posix(capacity);
  {
    VmmBackend b(prefix_vmm(capacity, driver, rc.layout, rc.defer, 256, 6));
    RandomRun run{b, !rc.accounting_only, std::mt19937_64(rc.defer * 2 + (rc.layout == VmmLayout::megacache)), {}, {},
                  {}};
    for (int op = 0; op < 600; ++op) {
      const int what = static_cast<int>(run.rng() % 10);
      if (what < 4) {
        run.admit(op);
      } else if (!run.tags.empty()) {
        if (what < 7) {
          run.grow();
        } else if (what < 8) {
          run.fork();
        } else {
          run.release();
        }
      }
      if (!rc.accounting_only) {
        for (const auto& [id, tg] : run.tags)
          ASSERT_EQ(mismatches(b, id, tg, b.length(id)), 0) << "op " << op << " seq " << id;
        ASSERT_EQ(driver->usage().mappings, static_cast<std::size_t>(b.stats().mappings)) << op;
      }
      const MemoryBreakdown m = b.breakdown();
      ASSERT_LE(m.used(), m.capacity) << op;
      ASSERT_LE(m.token_states, m.capacity) << op;
    }
    EXPECT_GT(run.hits, 0);
    EXPECT_GT(run.ooms + b.prefix_cache_stats().evictions, 0) << "the case must reach memory pressure";
    EXPECT_GT(b.stats().shared_maps, 0);
    if (rc.defer) {
      EXPECT_GT(b.stats().truncated_pages, 0) << "reused free slots held shared or cached pages";
    }
    for (const auto& [id, tg] : run.tags) b.release(id);
    EXPECT_EQ(b.breakdown().used(), 0u);
  }
  if (driver) {
    EXPECT_TRUE(driver->usage().empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, VmmPrefixRandom,
                         ::testing::Values(RandomCase{VmmLayout::per_layer, true, false},
                                           RandomCase{VmmLayout::per_layer, false, false},
                                           RandomCase{VmmLayout::megacache, true, false},
                                           RandomCase{VmmLayout::per_layer, true, true}),
                         [](const auto& info) {
                           const RandomCase& c = info.param;
                           return std::string(c.layout == VmmLayout::per_layer ? "per_layer" : "mega") +
                                  (c.defer ? "_defer" : "_nodefer") + (c.accounting_only ? "_accounting" : "");
                         });

}  // namespace
}  // namespace kvlab
