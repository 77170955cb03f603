// Prefix caching in the paged backend: vLLM v1 block hashes (hash) and SGLang's radix tree (radix).
// Answers are computed by hand in the comments; block size 16 unless stated.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "alloc/backend/block_hash.hpp"
#include "alloc/core/error.hpp"
#include "paged/paged_backend.hpp"
#include "paged/hash_prefix_cache.hpp"
#include "paged/radix_cache.hpp"
#include "tests/support/tiny_model.hpp"
#include "tests/paged/prefix_cache_access.hpp"

namespace kvlab {
namespace {

constexpr std::size_t kToken = 512;  // tiny model bytes per token
using Tokens = std::vector<std::int32_t>;

PagedConfig config(PrefixCacheMode mode, std::int32_t num_blocks, std::int32_t block_size = 16) {
  PagedConfig c;
  c.model = testing::tiny_model();
  c.capacity_bytes = static_cast<std::size_t>(num_blocks) * static_cast<std::size_t>(block_size) * kToken;
  c.block_size = block_size;
  c.max_seq_len = 1 << 20;
  c.prefix_cache = mode;
  return c;
}

/// n consecutive ids from `first`.
Tokens seq(std::int32_t first, std::int64_t n) {
  Tokens t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}
Tokens cat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
/// A spec for a prompt of these ids that will produce `output` more tokens.
SequenceSpec spec_of(const Tokens& ids, std::int64_t output = 0) {
  SequenceSpec s;
  s.prompt_tokens = static_cast<std::int64_t>(ids.size());
  s.final_tokens = s.prompt_tokens + output;
  s.prompt_token_ids = ids;
  return s;
}
void admit(PagedBackend& b, SeqId id, const Tokens& ids, std::int64_t output = 0) {
  b.admit(id, spec_of(ids, output), static_cast<std::int64_t>(ids.size()));
}
std::int64_t peek(const PagedBackend& b, const Tokens& ids) {
  return b.lookup_cached_tokens(spec_of(ids), static_cast<std::int64_t>(ids.size()));
}
void check(const PagedBackend& b) {
  if (testing::radix_cache(b) != nullptr) testing::radix_cache(b)->check_invariants();
  EXPECT_NEAR(MemoryFractions::of(b.breakdown()).sum(), 1.0, 1e-12);
}

class PrefixCache : public ::testing::TestWithParam<PrefixCacheMode> {};

TEST_P(PrefixCache, SecondSequenceReusesThe48SharedTokens) {
  PagedBackend b(config(GetParam(), 8));
  const Tokens shared = seq(100, 48);
  const Tokens a = cat(shared, seq(5000, 16));   // 64 tokens: 4 full blocks, all entered
  const Tokens bb = cat(shared, seq(6000, 10));  // 58 tokens: cap (58-1)/16 = 3 blocks -> 48
  const Tokens c = shared;                       // 48 tokens: cap (48-1)/16 = 2 blocks -> 32
  const Tokens d = cat(shared, seq(7000, 1));    // 49 tokens: cap 48/16 = 3 blocks -> 48
  admit(b, 1, a);
  EXPECT_EQ(b.cached_tokens(1), 0);
  admit(b, 2, bb);
  EXPECT_EQ(b.cached_tokens(2), 48);
  admit(b, 3, c);
  EXPECT_EQ(b.cached_tokens(3), 32);
  admit(b, 4, d);
  EXPECT_EQ(b.cached_tokens(4), 48);
  const std::vector<BlockId> ta = b.block_table(1);
  for (SeqId s : {2, 4}) EXPECT_TRUE(std::equal(ta.begin(), ta.begin() + 3, b.block_table(s).begin())) << s;
  EXPECT_TRUE(std::equal(ta.begin(), ta.begin() + 2, b.block_table(3).begin()));
  EXPECT_NE(b.block_table(3)[2], ta[2]);  // recomputed: its own block, not entered twice
  // Blocks: A 4, B +1, C +1, D +1 = 7 of 8.
  EXPECT_EQ(b.pool().num_free(), 1);
  const PrefixCacheStats st = b.prefix_cache_stats();
  EXPECT_EQ(st.queries, 64 + 58 + 48 + 49);
  EXPECT_EQ(st.hits, 48 + 32 + 48);
  EXPECT_EQ(st.inserted_blocks, 4);
  EXPECT_EQ(st.evictions, 0);
  const std::int32_t tree = GetParam() == PrefixCacheMode::radix ? 1 : 0;  // the tree's own reference
  EXPECT_EQ(b.pool().ref_count(ta[0]), 4 + tree);
  EXPECT_EQ(b.pool().ref_count(ta[2]), 3 + tree);
  EXPECT_EQ(b.pool().ref_count(ta[3]), 1 + tree);
  EXPECT_EQ(b.pool().ref_count(b.block_table(3)[2]), 1);
  // Shared blocks counted once: 64 + 10 + 0 + 1 written tokens beyond the shared ones... the
  // accounting counts each physical block's most-filled holder: 3 shared blocks of 16, A's 4th
  // block 16, and the private blocks of B (10), C (16), D (1).
  const MemoryBreakdown m = b.breakdown();
  EXPECT_EQ(m.token_states, (48 + 16 + 10 + 16 + 1) * kToken);
  EXPECT_EQ(m.shared_savings, (4 + 4 + 3 + 4 - 7) * 16 * kToken);
  EXPECT_EQ(m.cached, 0u);
  check(b);
  for (SeqId s = 1; s <= 4; ++s) b.release(s);
  check(b);
  // Everything back to zero (hash) or to the tree's single reference (radix).
  for (BlockId i = 0; i < 8; ++i) {
    const bool in_cache = std::find(ta.begin(), ta.end(), i) != ta.end();
    EXPECT_EQ(b.pool().ref_count(i), in_cache ? tree : 0) << i;
  }
  EXPECT_EQ(b.num_cached_free_blocks(), 4);
  EXPECT_EQ(b.breakdown().cached, 4 * 16 * kToken);
  EXPECT_EQ(b.breakdown().free(), b.breakdown().capacity);  // cached blocks are free memory
  EXPECT_EQ(b.available_blocks(), 8);
}

TEST_P(PrefixCache, LastTokenRule) {
  PagedBackend b(config(GetParam(), 16));
  admit(b, 1, seq(0, 16));
  admit(b, 2, seq(0, 16));  // one full block, fully cached: cap (16-1)/16 = 0 blocks
  EXPECT_EQ(b.cached_tokens(2), 0);
  admit(b, 3, seq(0, 17));  // cap 16/16 = 1
  EXPECT_EQ(b.cached_tokens(3), 16);
  admit(b, 4, seq(0, 32));  // entered by 4: blocks [0,16) cached, [16,32) new
  admit(b, 5, seq(0, 32));  // cap 31/16 = 1 block although both blocks are cached
  EXPECT_EQ(b.cached_tokens(5), 16);
  admit(b, 6, seq(0, 33));
  EXPECT_EQ(b.cached_tokens(6), 32);
  SequenceSpec empty_prompt;
  b.admit(7, empty_prompt, 0);
  EXPECT_EQ(b.cached_tokens(7), 0);
  // initial_tokens below the prompt: only the tokens admitted count (cap 31/16 = 1).
  const Tokens p = seq(0, 40);
  b.admit(8, spec_of(p), 32);
  EXPECT_EQ(b.cached_tokens(8), 16);
  check(b);
}

TEST_P(PrefixCache, TokenIdsShorterThanThePromptAreRejected) {
  PagedBackend b(config(GetParam(), 8));
  const Tokens ids = seq(0, 20);
  SequenceSpec s = spec_of(ids);
  s.prompt_tokens = 21;
  s.final_tokens = 21;
  EXPECT_THROW((void)b.can_admit(s, 21), InvalidArgument);
  EXPECT_THROW(b.admit(1, s, 21), InvalidArgument);
  EXPECT_FALSE(b.contains(1));
  s.prompt_tokens = 19;  // more ids than the prompt: the first 19 are used
  b.admit(1, s, 19);
  EXPECT_EQ(b.length(1), 19);
}

TEST_P(PrefixCache, FailedAdmissionChangesNothing) {
  // 4 blocks. A's 48-token prompt is cached in blocks no sequence holds; X = A's 48 tokens + 32
  // more needs 5 blocks: 3 hits (cap 79/16 = 4, 3 cached) + 2 new, but reviving the 3 hits
  // leaves 1 block available.
  PagedBackend b(config(GetParam(), 4));
  const Tokens a = seq(0, 48);
  admit(b, 1, a);
  b.release(1);
  const auto free_before = b.pool().free_list();
  const std::string tree_before = testing::radix_cache(b) ? testing::radix_cache(b)->dump() : "";
  const PrefixCacheStats st_before = b.prefix_cache_stats();
  const Tokens x = cat(a, seq(900, 32));
  EXPECT_FALSE(b.can_admit(spec_of(x), 80));
  EXPECT_THROW(admit(b, 2, x), OutOfMemory);
  // A partial match (would split a radix node) that fails: 2 hits + 3 new, 2 available.
  const Tokens y = cat(seq(0, 32), seq(900, 48));
  EXPECT_FALSE(b.can_admit(spec_of(y), 80));
  EXPECT_THROW(admit(b, 3, y), OutOfMemory);
  EXPECT_EQ(b.pool().free_list(), free_before);  // LRU order included
  if (testing::radix_cache(b)) {
    EXPECT_EQ(testing::radix_cache(b)->dump(), tree_before);
  }
  const PrefixCacheStats st = b.prefix_cache_stats();
  EXPECT_EQ(st.queries, st_before.queries);
  EXPECT_EQ(st.hits, st_before.hits);
  EXPECT_EQ(st.evictions, 0);
  EXPECT_EQ(b.num_sequences(), 0u);
  EXPECT_EQ(b.num_cached_free_blocks(), 3);
  EXPECT_EQ(peek(b, a), 32);
  // 64 tokens: 3 hits + 1 new block fits exactly.
  const Tokens z = cat(a, seq(900, 16));
  EXPECT_TRUE(b.can_admit(spec_of(z), 64));
  admit(b, 4, z);
  EXPECT_EQ(b.cached_tokens(4), 48);
  EXPECT_EQ(b.available_blocks(), 0);
  check(b);
}

TEST_P(PrefixCache, ForkAndCopyOnWriteKeepRefcountsRight) {
  PagedBackend b(config(GetParam(), 16));
  const Tokens p = seq(0, 40);  // 2 full blocks entered, 1 partial block (8 tokens)
  admit(b, 1, p, 10);
  b.fork(1, 2);
  const std::int32_t tree = GetParam() == PrefixCacheMode::radix ? 1 : 0;
  const auto t = b.block_table(1);
  EXPECT_EQ(b.pool().ref_count(t[0]), 2 + tree);
  EXPECT_EQ(b.pool().ref_count(t[2]), 2);
  EXPECT_EQ(b.cached_tokens(2), 0);  // a fork has no prefill to skip
  b.grow(2, 1);                      // copy-on-write of the shared partial block
  EXPECT_EQ(b.cow_copies(), 1);
  EXPECT_EQ(b.pool().ref_count(t[2]), 1);
  admit(b, 3, p);
  EXPECT_EQ(b.cached_tokens(3), 32);
  EXPECT_EQ(b.pool().ref_count(t[0]), 3 + tree);
  check(b);
  b.release(1);
  check(b);
  EXPECT_EQ(b.pool().ref_count(t[0]), 2 + tree);
  b.release(2);
  b.release(3);
  check(b);
  for (BlockId i = 0; i < 16; ++i) EXPECT_EQ(b.pool().ref_count(i), i == t[0] || i == t[1] ? tree : 0) << i;
  EXPECT_EQ(b.num_cached_free_blocks(), 2);
}

TEST_P(PrefixCache, SwapOutKeepsCacheEntriesAndSwapInIsPrivate) {
  PagedConfig c = config(GetParam(), 16);
  c.memory = &host_memory_resource();
  PagedBackend b(c);
  const Tokens p = seq(0, 48);
  admit(b, 1, p, 4);
  admit(b, 2, p, 4);
  EXPECT_EQ(b.cached_tokens(2), 32);
  b.swap_out(2);
  check(b);
  EXPECT_EQ(peek(b, p), 32);  // the device bytes of cached blocks are untouched
  b.swap_out(1);
  check(b);
  EXPECT_EQ(peek(b, p), 32);
  EXPECT_EQ(b.num_cached_free_blocks(), 3);
  b.swap_in(1);
  b.swap_in(2);
  check(b);
  for (BlockId blk : b.block_table(2))  // swapped-in copies are private
    EXPECT_EQ(b.pool().ref_count(blk), 1);
  EXPECT_EQ(b.cached_tokens(2), 32);  // still what admit found
  b.release(1);
  b.release(2);
  check(b);
  EXPECT_EQ(peek(b, p), 32);
}

TEST_P(PrefixCache, ExtraKeysSeparateTenants) {
  PagedBackend b(config(GetParam(), 32));
  const Tokens p = seq(0, 64);
  const std::vector<std::int64_t> tenant_a = {7}, tenant_b = {8};
  SequenceSpec s = spec_of(p);
  s.extra_keys = tenant_a;
  b.admit(1, s, 64);
  b.admit(2, s, 64);
  EXPECT_EQ(b.cached_tokens(2), 48);
  s.extra_keys = tenant_b;
  b.admit(3, s, 64);
  EXPECT_EQ(b.cached_tokens(3), 0);
  b.admit(4, spec_of(p), 64);  // no salt: a third namespace
  EXPECT_EQ(b.cached_tokens(4), 0);
  b.admit(5, s, 64);
  EXPECT_EQ(b.cached_tokens(5), 48);
  check(b);
}

// Issue 17. vLLM's "129 tokens make sure the first 128 are cached" case, prefilled in two chunks
// (32, then 97): every block is entered as soon as it is full, whatever chunk filled it, so the
// next identical prompt hits the 8 full blocks (cap (129 - 1) / 16 = 8), not the 2 of the first
// chunk.
TEST_P(PrefixCache, ChunkedPrefillCachesTheBlocksOfEveryChunk) {
  PagedBackend b(config(GetParam(), 32));
  const Tokens p = seq(101, 129);
  b.admit(1, spec_of(p, 1), 32);
  EXPECT_EQ(b.prefix_cache_stats().inserted_blocks, 2);
  EXPECT_EQ(peek(b, p), 32);
  b.grow(1, 97);  // tokens [32, 129): blocks 2..7 fill, block 8 holds one token
  EXPECT_EQ(b.prefix_cache_stats().inserted_blocks, 8);
  EXPECT_EQ(peek(b, p), 128);
  admit(b, 2, p);  // while 1 still runs
  EXPECT_EQ(b.cached_tokens(2), 128);
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(b.block_table(2)[i], b.block_table(1)[i]) << i;
  b.release(1);
  b.release(2);
  admit(b, 3, p);  // and after both finished: the blocks wait in the cache
  EXPECT_EQ(b.cached_tokens(3), 128);
  const PrefixCacheStats st = b.prefix_cache_stats();
  EXPECT_EQ(st.lookups, 3);
  EXPECT_EQ(st.hit_blocks, 16);
  EXPECT_EQ(st.hits, 256);
  EXPECT_EQ(st.inserted_blocks, 8);  // the identical prompts enter nothing new
  check(b);
}

// vLLM v1's decode scenario (tests/v1/core/test_prefix_caching.py, test_decode): block size 16, a
// 55-token prompt (3 full blocks and 7 tokens); 4 generated tokens fill no block; 19 more fill
// block 3 (tokens 48..63, the first 9 of them generated) and start block 4, which stays uncached.
// A new request whose prompt is the first sequence's prompt and output hits block 3 too.
TEST_P(PrefixCache, DecodeBlocksAreCachedAsSoonAsTheyAreFull) {
  PagedBackend b(config(GetParam(), 11));
  Tokens common;
  for (std::int32_t i = 0; i < 3; ++i) common.insert(common.end(), 16, i);
  const Tokens prompt = cat(common, Tokens(7, 3));
  const Tokens all = cat(cat(prompt, Tokens(4, 8)), Tokens(19, 7));  // 78 ids: prompt and output
  SequenceSpec s = spec_of(prompt, 23);
  s.prompt_token_ids = all;  // the ids of the tokens it will generate are known
  b.admit(1, s, 55);
  ASSERT_EQ(b.block_table(1).size(), 4u);
  EXPECT_EQ(b.prefix_cache_stats().inserted_blocks, 3);  // the partial block 3 has no hash
  b.grow(1, 4);                                          // 59 tokens: no new block, block 3 still partial
  EXPECT_EQ(b.block_table(1).size(), 4u);
  EXPECT_EQ(b.prefix_cache_stats().inserted_blocks, 3);
  b.grow(1, 19);  // 78 tokens: block 3 full (cached), one new block 4 (partial, not cached)
  ASSERT_EQ(b.block_table(1).size(), 5u);
  EXPECT_EQ(b.prefix_cache_stats().inserted_blocks, 4);
  if (const HashPrefixCache* h = testing::hash_cache(b)) {
    EXPECT_TRUE(h->is_cached(b.block_table(1)[3]));
    EXPECT_FALSE(h->is_cached(b.block_table(1)[4]));
  } else {
    EXPECT_EQ(testing::radix_cache(b)->cached_blocks(), 4);
  }
  // prompt + output as the next prompt (a chat's next turn): cap (78 - 1) / 16 = 4 blocks.
  admit(b, 2, all);
  EXPECT_EQ(b.cached_tokens(2), 64);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(b.block_table(2)[i], b.block_table(1)[i]) << i;
  check(b);
}

TEST_P(PrefixCache, GeneratedTokensWithoutIdsAreNeverCached) {
  PagedBackend b(config(GetParam(), 11));
  const Tokens prompt = seq(0, 55);
  b.admit(1, spec_of(prompt, 23), 55);  // ids for the prompt only
  b.grow(1, 23);
  EXPECT_EQ(b.prefix_cache_stats().inserted_blocks, 3);
  Tokens next = prompt;
  for (std::int32_t i = 0; i < 23; ++i) next.push_back(9000 + i);
  EXPECT_EQ(peek(b, next), 48);
  // A fork's own tokens are unknown: it enters nothing either.
  b.fork(1, 2);
  b.grow(2, 16);
  EXPECT_EQ(b.prefix_cache_stats().inserted_blocks, 3);
  check(b);
}

TEST_P(PrefixCache, ASequenceStopsEnteringAtABlockCachedElsewhere) {
  PagedBackend b(config(GetParam(), 16));
  const Tokens p = seq(0, 32);
  admit(b, 1, p);
  SequenceSpec s = spec_of(p, 32);
  const Tokens longer = cat(p, seq(500, 32));
  s.prompt_token_ids = longer;
  b.admit(2, s, 32);  // hits block 0; block 1 is its own copy of 1's block 1: private
  EXPECT_EQ(b.cached_tokens(2), 16);
  EXPECT_EQ(b.prefix_cache_stats().inserted_blocks, 2);
  b.grow(2, 32);  // blocks 2 and 3 fill, but their parent block is not in the cache
  EXPECT_EQ(b.prefix_cache_stats().inserted_blocks, 2);
  EXPECT_EQ(peek(b, cat(longer, seq(900, 1))), 32);
  check(b);
}

INSTANTIATE_TEST_SUITE_P(Modes, PrefixCache, ::testing::Values(PrefixCacheMode::hash, PrefixCacheMode::radix),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(PrefixCacheHash, FreedBlocksAreEvictedTailFirstInLruOrder) {
  // 8 blocks; the LRU free queue starts 0..7.
  PagedBackend b(config(PrefixCacheMode::hash, 8));
  const Tokens a = seq(0, 48), bb = seq(1000, 32);
  admit(b, 1, a);   // blocks 0 1 2
  admit(b, 2, bb);  // blocks 3 4
  EXPECT_EQ(b.block_table(1), (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(b.block_table(2), (std::vector<BlockId>{3, 4}));
  b.release(1);  // queue 5 6 7 | 2 1 0   (tail first)
  b.release(2);  // queue 5 6 7 2 1 0 | 4 3
  EXPECT_EQ(b.pool().free_list(), (std::vector<BlockId>{5, 6, 7, 2, 1, 0, 4, 3}));
  EXPECT_EQ(b.num_cached_free_blocks(), 5);
  // An uncached 64-token sequence takes 5 6 7 and then 2: A's tail is the first eviction.
  b.admit(3, {64, 64}, 64);
  EXPECT_EQ(b.block_table(3), (std::vector<BlockId>{5, 6, 7, 2}));
  EXPECT_EQ(b.prefix_cache_stats().evictions, 1);
  EXPECT_FALSE(testing::hash_cache(b)->is_cached(2));
  EXPECT_EQ(peek(b, cat(a, seq(9, 1))), 32);  // blocks 0 1 still cached
  b.admit(4, {16, 16}, 16);                   // takes 1
  EXPECT_EQ(b.block_table(4), (std::vector<BlockId>{1}));
  EXPECT_EQ(peek(b, cat(a, seq(9, 1))), 16);
  EXPECT_EQ(peek(b, cat(bb, seq(9, 1))), 32);  // B, freed later, is untouched
  b.admit(5, {32, 32}, 32);                    // takes 0 then 4: A is gone, B keeps its first block
  EXPECT_EQ(b.block_table(5), (std::vector<BlockId>{0, 4}));
  EXPECT_EQ(peek(b, cat(a, seq(9, 1))), 0);
  EXPECT_EQ(peek(b, cat(bb, seq(9, 1))), 16);
  EXPECT_EQ(b.prefix_cache_stats().evictions, 4);
  // A hit takes a cached block out of the middle of the queue in O(1).
  b.release(3);  // queue 3 | 2 7 6 5
  EXPECT_EQ(b.pool().free_list(), (std::vector<BlockId>{3, 2, 7, 6, 5}));
  admit(b, 6, cat(seq(1000, 16), seq(77, 16)));  // hits block 3 (B's first block)
  EXPECT_EQ(b.cached_tokens(6), 16);
  EXPECT_EQ(b.block_table(6)[0], 3);
  EXPECT_EQ(b.pool().free_list(), (std::vector<BlockId>{7, 6, 5}));  // 2 was taken for the rest
  EXPECT_EQ(b.prefix_cache_stats().evictions, 4);                    // block 2 had lost its entry already
}

TEST(PrefixCacheHash, EvictedParentInvalidatesItsCachedChildren) {
  // Block 1 of a prompt stays cached after its parent block 0 is reused for other tokens: the
  // child is unreachable (and must never be matched through a new block 0 holding other KV).
  PagedBackend b(config(PrefixCacheMode::hash, 4));
  const Tokens a = seq(0, 33);
  admit(b, 1, a);            // blocks 0 1 (entered) 2 (partial)
  b.release(1);              // queue 3 | 2 1 0
  b.admit(2, {32, 32}, 32);  // takes 3, 2
  b.admit(3, {16, 16}, 16);  // takes 1: the child goes, parent 0 stays
  b.release(3);              // queue 0 | 1
  EXPECT_EQ(peek(b, a), 16);
  b.release(2);
  admit(b, 4, a);
  EXPECT_EQ(b.cached_tokens(4), 16);
  const auto& hc = *testing::hash_cache(b);
  EXPECT_TRUE(hc.is_cached(b.block_table(4)[1]));  // re-entered
}

TEST(PrefixCacheHash, KeysChainThroughTheParentAndTheSalt) {
  const Tokens blk = seq(0, 16);
  const std::vector<std::int64_t> salt = {1};
  EXPECT_EQ(hash_block(0, blk), hash_block(0, blk));
  EXPECT_NE(hash_block(0, blk), hash_block(1, blk));
  EXPECT_NE(hash_block(0, blk), hash_block(0, blk, salt));
  EXPECT_NE(hash_block(0, blk), hash_block(0, seq(1, 16)));
  EXPECT_NE(hash_block(0, seq(0, 3)), hash_block(0, seq(0, 4)));
  // No collisions over many neighbouring inputs.
  std::set<std::uint64_t> seen;
  for (std::int32_t i = 0; i < 20000; ++i)
    seen.insert(hash_block(static_cast<std::uint64_t>(i % 7), seq(i, 1 + i % 5)));
  EXPECT_EQ(seen.size(), 20000u);
}

TEST(PrefixCacheRadix, PartialMatchSplitsTheNodeAndEvictionTakesUnlockedLeaves) {
  PagedBackend b(config(PrefixCacheMode::radix, 8));
  const RadixCache& tree = *testing::radix_cache(b);
  const Tokens a = seq(0, 64);
  admit(b, 1, a);  // blocks 0 1 2 3
  EXPECT_EQ(tree.dump(), "(0..64 [0,1,2,3] L1)");
  const Tokens y = cat(seq(0, 32), seq(1000, 16));  // shares 2 blocks then diverges
  admit(b, 2, y);
  EXPECT_EQ(b.cached_tokens(2), 32);
  EXPECT_EQ(tree.dump(), "(0..32 [0,1] L2(32..64 [2,3] L1)(32..48 [4] L1))");
  tree.check_invariants();
  b.release(1);
  EXPECT_EQ(tree.dump(), "(0..32 [0,1] L1(32..64 [2,3] L0)(32..48 [4] L1))");
  EXPECT_EQ(tree.evictable_blocks(), 2);
  EXPECT_EQ(b.available_blocks(), 3 + 2);
  EXPECT_FALSE(b.can_admit({96, 96}, 96));
  b.admit(3, {80, 80}, 80);  // 3 free + the unlocked leaf [2,3]
  EXPECT_EQ(tree.dump(), "(0..32 [0,1] L1(32..48 [4] L1))");
  EXPECT_EQ(b.prefix_cache_stats().evictions, 2);
  EXPECT_EQ(peek(b, a), 32);
  b.release(2);
  EXPECT_EQ(tree.evictable_blocks(), 3);
  // A 48-token sequence: the whole-leaf eviction takes the oldest leaf [4] (1 block) first, then
  // [0,1] once it became a leaf.
  b.release(3);
  b.admit(4, {128, 128}, 128);
  EXPECT_EQ(tree.dump(), "");
  EXPECT_EQ(b.prefix_cache_stats().evictions, 5);
  tree.check_invariants();
}

TEST(PrefixCacheRadix, LeastRecentlyUsedLeafGoesFirst) {
  PagedBackend b(config(PrefixCacheMode::radix, 8));
  const RadixCache& tree = *testing::radix_cache(b);
  const Tokens a = seq(0, 48), bb = seq(1000, 32);
  admit(b, 1, a);   // 0 1 2
  admit(b, 2, bb);  // 3 4
  b.release(1);
  b.release(2);
  EXPECT_EQ(tree.dump(), "(0..48 [0,1,2] L0)(0..32 [3,4] L0)");
  // A full hit touches A's whole path: B becomes the least recently used leaf. (A peek does not.)
  EXPECT_EQ(peek(b, cat(a, seq(5, 1))), 48);
  admit(b, 3, cat(a, seq(5, 1)));  // 48 hit tokens + 1 new block (5)
  b.release(3);
  b.admit(4, {64, 64}, 64);  // free 5 6 7 + one eviction: the LRU leaf B, as a whole
  EXPECT_EQ(tree.dump(), "(0..48 [0,1,2] L0)");
  EXPECT_EQ(b.prefix_cache_stats().evictions, 2);
  EXPECT_EQ(peek(b, cat(bb, seq(5, 1))), 0);
  b.release(4);
  // A hit on A's first block only splits A and touches [0]; the split-off tail [1,2] keeps its
  // old access time, so it is the next leaf to go (SGLang touches the matched path only).
  admit(b, 5, cat(seq(0, 16), seq(500, 1)));
  b.release(5);
  EXPECT_EQ(tree.dump(), "(0..16 [0] L0(16..48 [1,2] L0))");
  b.admit(6, {112, 112}, 112);  // 5 free + 2 evicted: [1,2] only
  EXPECT_EQ(tree.dump(), "(0..16 [0] L0)");
  EXPECT_EQ(b.prefix_cache_stats().evictions, 4);
  tree.check_invariants();
}

// Host tier (hash mode): a cached block whose device block is handed out again moves to a host
// slot with its entry, and a hit on it copies it back into a fresh device block.
std::int64_t counter(const PagedBackend& b, const std::string& name) {
  for (const auto& [n, v] : b.counters())
    if (n == name) return static_cast<std::int64_t>(v);
  return -1;
}

TEST(PrefixCacheHost, EvictedBlocksWaitOnTheHostAndComeBackOnAHit) {
  PagedConfig c = config(PrefixCacheMode::hash, 4);
  c.host_cache_bytes = 8 * 16 * kToken;  // 8 host slots
  PagedBackend b(c);
  PagedBackend plain(config(PrefixCacheMode::hash, 4));
  for (PagedBackend* x : {&b, &plain}) {
    admit(*x, 1, seq(0, 48));  // blocks 0, 1, 2 cached; LRU queue then 3, 2, 1, 0
    x->release(1);
    admit(*x, 2, seq(1000, 64));  // takes all four: the three cached ones leave the device
    x->release(2);
  }
  EXPECT_EQ(counter(b, "prefix_host_inserted_blocks"), 3);
  EXPECT_EQ(counter(b, "prefix_evictions"), 0) << "nothing dropped: they are on the host";
  EXPECT_EQ(counter(plain, "prefix_evictions"), 3);
  EXPECT_EQ(peek(plain, seq(0, 49)), 0);
  EXPECT_EQ(peek(b, seq(0, 49)), 48);
  // Promoting 3 blocks takes 3 fresh device blocks, the 49th token a fourth: B's 4 cached blocks
  // move to the host in turn.
  admit(b, 3, seq(0, 49));
  EXPECT_EQ(b.cached_tokens(3), 48);
  EXPECT_EQ(counter(b, "prefix_host_hit_blocks"), 3);
  EXPECT_EQ(counter(b, "prefix_host_inserted_blocks"), 7);
  EXPECT_EQ(counter(b, "prefix_host_cached_blocks"), 4);
  EXPECT_TRUE(testing::hash_cache(b)->is_cached(b.block_table(3)[0]));
  EXPECT_EQ(b.step_costs().host_transfer_bytes, 10.0 * 16 * kToken);  // 7 out, 3 back
  // No room for B's two host blocks while 3 holds every device block: all or nothing.
  const Tokens b2 = seq(1000, 33);
  EXPECT_FALSE(b.can_admit(spec_of(b2), 33));
  EXPECT_THROW(admit(b, 4, b2), OutOfMemory);
  EXPECT_EQ(counter(b, "prefix_host_hit_blocks"), 3);
  b.release(3);
  admit(b, 4, b2);
  EXPECT_EQ(b.cached_tokens(4), 32);
  EXPECT_EQ(counter(b, "prefix_host_hit_blocks"), 5);
  check(b);
}

TEST(PrefixCacheHost, AFullHostDropsItsOldestAndRadixHasNoHostTier) {
  PagedConfig c = config(PrefixCacheMode::hash, 2);
  c.host_cache_bytes = 2 * 16 * kToken;  // 2 host slots
  PagedBackend b(c);
  for (std::int32_t k = 0; k < 3; ++k) {  // each round pushes the previous round's 2 blocks out
    admit(b, k, seq(1000 * k, 32));
    b.release(k);
  }
  // Round 0's blocks went to the host, then round 1's took their slots (dropping round 0's).
  EXPECT_EQ(counter(b, "prefix_host_inserted_blocks"), 4);
  EXPECT_EQ(counter(b, "prefix_host_evictions"), 2);
  EXPECT_EQ(counter(b, "prefix_evictions"), 2);
  EXPECT_EQ(peek(b, cat(seq(0, 32), seq(7, 1))), 0);
  EXPECT_EQ(peek(b, cat(seq(1000, 32), seq(7, 1))), 32);
  PagedConfig r = config(PrefixCacheMode::radix, 2);
  r.host_cache_bytes = 2 * 16 * kToken;
  EXPECT_THROW(PagedBackend{r}, InvalidArgument);
}

TEST(PrefixCacheNone, BehavesAsBeforeAndIgnoresTokenIds) {
  PagedBackend b(config(PrefixCacheMode::none, 8));
  EXPECT_EQ(b.name(), "paged-b16");
  const Tokens p = seq(0, 48);
  admit(b, 1, p);
  admit(b, 2, p);
  EXPECT_EQ(b.cached_tokens(2), 0);
  EXPECT_EQ(b.pool().num_used(), 6);
  EXPECT_EQ(b.prefix_cache_stats().queries, 0);
  EXPECT_EQ(b.breakdown().cached, 0u);
  b.release(1);
  EXPECT_EQ(b.pool().free_list().front(), 0);  // LIFO as before: block 0 was freed last
  EXPECT_EQ(PagedBackend(config(PrefixCacheMode::hash, 8)).name(), "paged-b16-hash");
  EXPECT_EQ(PagedBackend(config(PrefixCacheMode::radix, 8)).name(), "paged-b16-radix");
  EXPECT_EQ(parse_prefix_cache_mode("radix"), PrefixCacheMode::radix);
  EXPECT_EQ(parse_prefix_cache_mode("none"), PrefixCacheMode::none);
  EXPECT_THROW((void)parse_prefix_cache_mode("lru"), InvalidArgument);
}

/// Hit tokens by brute force: the longest block-aligned prefix within the cap that some earlier
/// admitted prompt had among its full blocks (nothing is ever evicted in this run).
struct Oracle {
  std::int32_t bs;
  std::set<Tokens> prefixes;
  std::int64_t hit(const Tokens& p) const {
    const std::int64_t cap = (static_cast<std::int64_t>(p.size()) - 1) / bs;
    std::int64_t k = 0;
    while (k < cap && prefixes.count(Tokens(p.begin(), p.begin() + (k + 1) * bs))) ++k;
    return k * bs;
  }
  void add(const Tokens& p) {
    for (std::size_t k = 1; k * static_cast<std::size_t>(bs) <= p.size(); ++k)
      prefixes.insert(Tokens(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(k * static_cast<std::size_t>(bs))));
  }
};

/// Random prompts from a few families with shared prefixes of random lengths.
Tokens random_prompt(std::mt19937_64& rng, const std::vector<Tokens>& families) {
  const Tokens& f = families[rng() % families.size()];
  const std::size_t shared = rng() % (f.size() + 1);
  Tokens p(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(shared));
  const std::size_t extra = rng() % 40 + (p.empty() ? 1 : 0);
  for (std::size_t i = 0; i < extra; ++i) p.push_back(static_cast<std::int32_t>(rng() % 4) + 1'000'000);  // often equal
  return p;
}

TEST(PrefixCacheAgreement, HashAndRadixReportTheSameHitsOnRandomWorkloads) {
  for (std::int32_t bs : {1, 4, 16}) {
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      std::mt19937_64 rng(seed * 1000 + static_cast<std::uint64_t>(bs));
      std::vector<Tokens> families;
      for (int f = 0; f < 4; ++f) families.push_back(seq(f * 10000, 40 + static_cast<std::int64_t>(rng() % 120)));
      PagedBackend h(config(PrefixCacheMode::hash, 100000 / bs, bs));
      PagedBackend r(config(PrefixCacheMode::radix, 100000 / bs, bs));
      Oracle oracle{bs, {}};
      std::vector<SeqId> live;
      std::vector<Tokens> prompts(400);
      for (SeqId id = 0; id < 400; ++id) {
        const int op = static_cast<int>(rng() % 10);
        if (op < 3 && !live.empty()) {
          const std::size_t i = rng() % live.size();
          h.release(live[i]);
          r.release(live[i]);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        if (op == 3 && !live.empty()) {
          const SeqId parent = live[rng() % live.size()];
          h.fork(parent, id);
          r.fork(parent, id);
          h.grow(id, 3);
          r.grow(id, 3);
          live.push_back(id);
          continue;
        }
        prompts[static_cast<std::size_t>(id)] = random_prompt(rng, families);
        const Tokens& p = prompts[static_cast<std::size_t>(id)];
        const std::int64_t expect = oracle.hit(p);
        admit(h, id, p, 5);
        admit(r, id, p, 5);
        oracle.add(p);
        ASSERT_EQ(h.cached_tokens(id), expect) << "bs " << bs << " seed " << seed << " seq " << id;
        ASSERT_EQ(r.cached_tokens(id), expect) << "bs " << bs << " seed " << seed << " seq " << id;
        live.push_back(id);
        if (rng() % 4 == 0) {
          h.grow(id, 2);
          r.grow(id, 2);
        }
      }
      EXPECT_EQ(h.prefix_cache_stats().hits, r.prefix_cache_stats().hits);
      EXPECT_EQ(h.prefix_cache_stats().queries, r.prefix_cache_stats().queries);
      EXPECT_EQ(h.prefix_cache_stats().inserted_blocks, r.prefix_cache_stats().inserted_blocks);
      EXPECT_EQ(h.available_blocks(), r.available_blocks());  // same blocks held by sequences
      testing::radix_cache(r)->check_invariants();
      for (SeqId id : live) {
        h.release(id);
        r.release(id);
      }
      for (BlockId i = 0; i < h.pool().num_blocks(); ++i) ASSERT_EQ(h.pool().ref_count(i), 0);
      for (BlockId i = 0; i < r.pool().num_blocks(); ++i) ASSERT_LE(r.pool().ref_count(i), 1);
      EXPECT_EQ(r.pool().num_used(), testing::radix_cache(r)->cached_blocks());
      EXPECT_EQ(h.num_cached_free_blocks(), r.num_cached_free_blocks());
      testing::radix_cache(r)->check_invariants();
    }
  }
}

TEST(PrefixCacheAgreement, UnderMemoryPressureStaysConsistent) {
  // Eviction policies differ (hash evicts single blocks from the LRU queue, radix whole leaves),
  // so hits may differ; both must stay within the no-eviction answer and keep every invariant.
  for (PrefixCacheMode mode : {PrefixCacheMode::hash, PrefixCacheMode::radix}) {
    std::mt19937_64 rng(42);
    std::vector<Tokens> families;
    for (int f = 0; f < 3; ++f) families.push_back(seq(f * 10000, 100));
    PagedBackend b(config(mode, 24, 8));
    Oracle oracle{8, {}};
    std::vector<SeqId> live;
    std::vector<Tokens> prompts(3000);
    std::int64_t oom = 0;
    for (SeqId id = 0; id < 3000; ++id) {
      if ((rng() % 3 == 0 || b.available_blocks() < 4) && !live.empty()) {
        const std::size_t i = rng() % live.size();
        if (rng() % 5 == 0) {
          if (!b.is_swapped(live[i]))
            b.swap_out(live[i]);
          else if (b.can_swap_in(live[i]))
            b.swap_in(live[i]);
        } else {
          b.release(live[i]);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        }
        continue;
      }
      if (rng() % 8 == 0 && !live.empty()) {
        const SeqId parent = live[rng() % live.size()];
        if (!b.is_swapped(parent)) {
          b.fork(parent, id);
          live.push_back(id);
          if (b.can_grow(id, 1)) b.grow(id, 1);
        }
        continue;
      }
      prompts[static_cast<std::size_t>(id)] = random_prompt(rng, families);
      const Tokens& p = prompts[static_cast<std::size_t>(id)];
      const SequenceSpec s = spec_of(p, 4);
      const bool can = b.can_admit(s, static_cast<std::int64_t>(p.size()));
      const auto free_before = b.pool().free_list();
      try {
        b.admit(id, s, static_cast<std::int64_t>(p.size()));
        ASSERT_TRUE(can);
        ASSERT_LE(b.cached_tokens(id), oracle.hit(p));
        oracle.add(p);
        live.push_back(id);
      } catch (const OutOfMemory&) {
        ASSERT_FALSE(can);
        ASSERT_EQ(b.pool().free_list(), free_before);
        ++oom;
      }
      if (id % 50 == 0) check(b);
    }
    EXPECT_GT(b.prefix_cache_stats().hits, 0);
    EXPECT_GT(b.prefix_cache_stats().evictions, 0);
    for (SeqId id : live) b.release(id);
    check(b);
    EXPECT_EQ(b.available_blocks(), 24);
    EXPECT_EQ(b.breakdown().cached, static_cast<std::size_t>(b.num_cached_free_blocks()) * 8 * kToken);
    (void)oom;
  }
}

}  // namespace
}  // namespace kvlab
