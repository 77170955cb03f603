#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "alloc/contiguous/contiguous_backend.hpp"
#include "kernels/numeric.hpp"
#include "alloc/core/error.hpp"
#include "alloc/memory/statistics_adaptor.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

using testing::tiny_model;
constexpr std::size_t kToken = 512;  // tiny model: KV bytes per token

ContiguousConfig config(ReservationPolicy policy, std::size_t tokens, MemoryResource* mr = nullptr,
                        ArenaKind arena = ArenaKind::first_fit) {
  ContiguousConfig c;
  c.arena = arena;
  c.model = tiny_model();
  c.capacity_bytes = tokens * kToken;
  c.max_seq_len = 100;
  c.policy = policy;
  c.memory = mr;
  return c;
}

void expect_sums_to_capacity(const MemoryBreakdown& b) {
  EXPECT_LE(b.used(), b.capacity);  // free() is derived: this is what can fail
  EXPECT_EQ(b.token_states + b.reserved + b.internal_fragmentation + b.external_fragmentation + b.free(), b.capacity);
  const MemoryFractions f = MemoryFractions::of(b);
  EXPECT_NEAR(f.sum(), 1.0, 1e-12);
}

TEST(ContiguousBackend, ReservationPerPolicy) {
  const SequenceSpec spec{10, 20};
  EXPECT_EQ(ContiguousBackend(config(ReservationPolicy::max, 400)).reservation_tokens(spec), 100);
  // pow2 over-reserves the output only: 10 prompt tokens + bit_ceil(10 output tokens) = 10 + 16.
  EXPECT_EQ(ContiguousBackend(config(ReservationPolicy::pow2, 400)).reservation_tokens(spec), 26);
  EXPECT_EQ(ContiguousBackend(config(ReservationPolicy::oracle, 400)).reservation_tokens(spec), 20);
  // The vLLM paper's example: an output of 25 tokens reserves 32 positions for outputs.
  EXPECT_EQ(ContiguousBackend(config(ReservationPolicy::pow2, 400)).reservation_tokens({7, 32}), 39);
  EXPECT_EQ(ContiguousBackend(config(ReservationPolicy::pow2, 400)).reservation_tokens({10, 74}), 74);  // 64 exactly
  EXPECT_EQ(ContiguousBackend(config(ReservationPolicy::pow2, 400)).reservation_tokens({10, 10}), 10);  // no output
  // pow2 never exceeds max_seq_len
  EXPECT_EQ(ContiguousBackend(config(ReservationPolicy::pow2, 400)).reservation_tokens({10, 75}), 100);
}

TEST(ContiguousBackend, BreakdownMatchesGeometry) {
  ContiguousBackend b(config(ReservationPolicy::pow2, 400));
  b.admit(1, {10, 20}, 10);  // reserves 26 tokens
  b.grow(1, 3);
  const MemoryBreakdown m = b.breakdown();
  EXPECT_EQ(m.capacity, 400 * kToken);
  EXPECT_EQ(m.token_states, 13 * kToken);
  EXPECT_EQ(m.reserved, 7 * kToken);                // will be filled up to the final 20
  EXPECT_EQ(m.internal_fragmentation, 6 * kToken);  // 26 - 20, never filled
  EXPECT_EQ(m.external_fragmentation, 0u);
  EXPECT_EQ(m.free(), 374 * kToken);
  expect_sums_to_capacity(m);
}

TEST(ContiguousBackend, BuddyRoundingIsExternalFragmentation) {
  ContiguousBackend b(config(ReservationPolicy::pow2, 400, nullptr, ArenaKind::buddy));
  EXPECT_EQ(b.name(), "contiguous-pow2-buddy");
  b.admit(1, {10, 20}, 10);  // reserves 26 tokens in a 32-token buddy block
  b.grow(1, 3);
  const MemoryBreakdown m = b.breakdown();
  EXPECT_EQ(m.token_states, 13 * kToken);
  EXPECT_EQ(m.reserved, 7 * kToken);
  EXPECT_EQ(m.internal_fragmentation, 6 * kToken);  // the policy's over-reservation
  EXPECT_EQ(m.external_fragmentation, 6 * kToken);  // the allocator's: 32 - 26
  EXPECT_EQ(m.free(), 368 * kToken);
  expect_sums_to_capacity(m);
  // 400 tokens are roots of 256 + 128 + 16. Sequence 1 split the 128 root; two 100-token
  // reservations (max_seq_len caps pow2's 10 + 128) take 128-blocks out of the 256 root. What is
  // left (64 + 32 + 16 tokens) holds no 128-block: all of it is external fragmentation for a third.
  b.admit(2, {10, 100}, 10);
  b.admit(3, {10, 100}, 10);
  const SequenceSpec waiting{10, 100};
  EXPECT_FALSE(b.can_admit(waiting, 10));
  const MemoryBreakdown blocked = b.breakdown(&waiting);
  EXPECT_EQ(blocked.external_fragmentation, (6 + 28 + 28 + 112) * kToken);
  EXPECT_EQ(blocked.free(), 0u);
  expect_sums_to_capacity(blocked);
  // Oracle under a buddy holds 7 sequences of 20 tokens in 7 blocks of 32 (a first-fit arena: 20).
  ContiguousBackend o(config(ReservationPolicy::oracle, 240, nullptr, ArenaKind::buddy));  // 128+64+32+16
  int admitted = 0;
  while (o.can_admit({5, 20}, 5)) o.admit(admitted++, {5, 20}, 5);
  EXPECT_EQ(admitted, 7);
  EXPECT_EQ(o.arena().free_bytes(), 16 * kToken);
  expect_sums_to_capacity(o.breakdown());
}

TEST(ContiguousBackend, ExternalFragmentationScenarioKnownByHand) {
  // 100 tokens of capacity; oracle reservations A=30, B=20, C=30, D=20 fill it exactly.
  ContiguousBackend b(config(ReservationPolicy::oracle, 100));
  b.admit(1, {5, 30}, 5);
  b.admit(2, {5, 20}, 5);
  b.admit(3, {5, 30}, 5);
  b.admit(4, {5, 20}, 5);
  EXPECT_FALSE(b.can_admit({1, 1}, 1));
  b.release(1);
  b.release(3);  // two holes of 30 tokens; 60 tokens free but no room for 40
  const SequenceSpec waiting{10, 40};
  EXPECT_FALSE(b.can_admit(waiting, 10));
  const MemoryBreakdown m = b.breakdown(&waiting);
  EXPECT_EQ(m.token_states, 10 * kToken);
  EXPECT_EQ(m.reserved, 30 * kToken);
  EXPECT_EQ(m.internal_fragmentation, 0u);
  EXPECT_EQ(m.external_fragmentation, 60 * kToken);
  EXPECT_EQ(m.free(), 0u);
  expect_sums_to_capacity(m);
  // Without a waiting request the same holes are plain free memory.
  EXPECT_EQ(b.breakdown().free(), 60 * kToken);
  // A 30-token request fits a hole: those holes are not external fragmentation for it.
  const SequenceSpec small{10, 30};
  EXPECT_EQ(b.breakdown(&small).external_fragmentation, 0u);
}

TEST(ContiguousBackend, ExhaustionIsOutOfMemoryWithNoStateChange) {
  ContiguousBackend b(config(ReservationPolicy::max, 250));  // room for two max reservations
  b.admit(1, {10, 50}, 10);
  b.admit(2, {10, 50}, 10);
  const MemoryBreakdown before = b.breakdown();
  EXPECT_FALSE(b.can_admit({10, 50}, 10));
  EXPECT_THROW(b.admit(3, {10, 50}, 10), OutOfMemory);
  EXPECT_FALSE(b.contains(3));
  EXPECT_EQ(b.num_sequences(), 2u);
  const MemoryBreakdown after = b.breakdown();
  EXPECT_EQ(after.token_states, before.token_states);
  EXPECT_EQ(after.internal_fragmentation, before.internal_fragmentation);
  EXPECT_EQ(b.arena().free_bytes(), 50 * kToken);
  // Growth past the reservation is refused the same way.
  ContiguousBackend o(config(ReservationPolicy::oracle, 250));
  o.admit(7, {4, 6}, 4);
  o.grow(7, 2);
  EXPECT_FALSE(o.can_grow(7, 1));
  EXPECT_THROW(o.grow(7, 1), OutOfMemory);
  EXPECT_EQ(o.length(7), 6);
}

TEST(ContiguousBackend, RejectsBadInputs) {
  ContiguousBackend b(config(ReservationPolicy::max, 250));
  EXPECT_THROW(b.admit(1, {10, 101}, 10), InvalidArgument);  // longer than max_seq_len
  EXPECT_THROW(b.admit(1, {10, 5}, 10), InvalidArgument);    // final below initial
  b.admit(1, {10, 20}, 10);
  EXPECT_THROW(b.admit(1, {10, 20}, 10), InvalidArgument);  // duplicate id
  EXPECT_THROW(b.release(99), InvalidArgument);
  EXPECT_THROW((void)b.length(99), InvalidArgument);
  auto tiny = config(ReservationPolicy::max, 0);
  tiny.capacity_bytes = 100;  // below one token
  EXPECT_THROW(ContiguousBackend{tiny}, InvalidArgument);
}

class ContiguousArenas : public ::testing::TestWithParam<ArenaKind> {};
INSTANTIATE_TEST_SUITE_P(, ContiguousArenas, ::testing::Values(ArenaKind::first_fit, ArenaKind::buddy));

TEST_P(ContiguousArenas, EveryReleaseReturnsAllMemory) {
  ContiguousBackend b(config(ReservationPolicy::pow2, 1000, nullptr, GetParam()));
  std::mt19937_64 rng(5);
  std::vector<SeqId> live;
  for (SeqId id = 0; id < 400; ++id) {
    const std::int64_t final_tokens = 1 + static_cast<std::int64_t>(rng() % 100);
    if (b.can_admit({1, final_tokens}, 1)) {
      b.admit(id, {1, final_tokens}, 1);
      live.push_back(id);
    }
    if (!live.empty() && rng() % 2) {
      b.release(live.front());
      live.erase(live.begin());
    }
    expect_sums_to_capacity(b.breakdown());
  }
  for (SeqId id : live) b.release(id);
  EXPECT_EQ(b.arena().free_bytes(), b.arena().capacity());
  EXPECT_EQ(b.breakdown().allocated(), 0u);
}

TEST_P(ContiguousArenas, StorageViewsAndForkCopyTheData) {
  StatisticsAdaptor stats(host_memory_resource());
  {
    ContiguousBackend b(config(ReservationPolicy::oracle, 100, &stats, GetParam()));
    EXPECT_TRUE(b.has_storage());
    EXPECT_EQ(stats.statistics().current_bytes, 100 * kToken);
    b.admit(1, {3, 10}, 3);
    const SeqId one = 1;
    b.prepare_batch({&one, 1});
    // Write a distinct pattern into every layer's K and V of sequence 1.
    for (int layer = 0; layer < 2; ++layer) {
      const KvView v = b.layer_view(layer);
      auto* k = static_cast<half_t*>(v.k_seq[0]);
      auto* val = static_cast<half_t*>(v.v_seq[0]);
      for (int i = 0; i < 3 * 64; ++i) {
        k[i] = from_float<half_t>(static_cast<float>(layer * 1000 + i));
        val[i] = from_float<half_t>(static_cast<float>(-layer * 1000 - i));
      }
    }
    b.fork(1, 2);
    EXPECT_EQ(b.length(2), 3);
    const SeqId both[] = {1, 2};
    const PreparedBatch pb = b.prepare_batch(both);
    EXPECT_EQ(pb.batch, 2);
    EXPECT_EQ(pb.seq_lens[1], 3);
    for (int layer = 0; layer < 2; ++layer) {
      const KvView v = b.layer_view(layer);
      EXPECT_NE(v.k_seq[0], v.k_seq[1]);
      EXPECT_EQ(std::memcmp(v.k_seq[0], v.k_seq[1], 3 * 64 * sizeof(half_t)), 0);
      EXPECT_EQ(std::memcmp(v.v_seq[0], v.v_seq[1], 3 * 64 * sizeof(half_t)), 0);
      EXPECT_EQ(to_float(static_cast<half_t*>(v.k_seq[1])[5]), static_cast<float>(layer * 1000 + 5));
    }
    // Writing the child leaves the parent intact.
    static_cast<half_t*>(b.layer_view(0).k_seq[1])[0] = from_float<half_t>(7.f);
    EXPECT_EQ(to_float(static_cast<half_t*>(b.layer_view(0).k_seq[0])[0]), 0.f);
    b.release(1);
    b.release(2);
  }
  EXPECT_EQ(stats.statistics().current_bytes, 0u);  // the region is returned
}

TEST(ContiguousBackend, AccountingOnlyBackendHasNoViews) {
  ContiguousBackend b(config(ReservationPolicy::max, 400));
  EXPECT_FALSE(b.has_storage());
  EXPECT_THROW((void)b.layer_view(0), InvalidArgument);
}

TEST(ReservationPolicy, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(parse_reservation_policy("pow2"), ReservationPolicy::pow2);
  EXPECT_THROW((void)parse_reservation_policy("min"), InvalidArgument);
}

}  // namespace
}  // namespace kvlab
