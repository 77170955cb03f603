// Host attention against the float64 reference: every storage dtype, GQA ratios 1/4/8, head dims
// 64 and 128 (and 32/256 once), decode and prefill, contiguous and paged views at odd block sizes,
// prime batch sizes; odd groups and head counts (row blocks padded up), lengths at tile edges,
// every block size 1..33; fresh random data, output poisoned first, every element checked.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "alloc/core/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/host_simd.hpp"
#include "tests/support/kv_fixture.hpp"

namespace kvlab {
namespace {

using testing::KvFixture;
using testing::KvShape;

enum class Mode { decode, prefill };

struct Case {
  DType dtype;
  int group;  // GQA ratio
  int head_dim;
  Mode mode;
  int block_size;  // 0: contiguous view
};

std::string name(const Case& c) {
  return std::string(to_string(c.dtype)) + "_g" + std::to_string(c.group) + "_d" + std::to_string(c.head_dim) +
         (c.mode == Mode::decode ? "_decode" : "_prefill") +
         (c.block_size ? "_paged" + std::to_string(c.block_size) : "_contiguous");
}

template <class T>
void run_case(const Case& c, std::uint64_t seed) {
  KvShape shape;
  // Prime batch size, lengths that are not multiples of any block size, one length-1 sequence.
  shape.seq_lens = {37, 1, 130, 64, 91};
  if (c.mode == Mode::prefill) shape.q_lens = {5, 1, 17, 64, 3};  // 64: the whole sequence is new
  shape.num_kv_heads = c.group == 8 ? 1 : 2;
  shape.num_q_heads = shape.num_kv_heads * c.group;
  shape.head_dim = c.head_dim;
  shape.block_size = c.block_size ? c.block_size : 16;
  shape.seed = seed;
  KvFixture<T> fx(shape);
  const std::vector<double> ref = fx.reference();
  ThreadPool pool(3);
  const KvView view = c.block_size ? erase(fx.paged(), shape.num_kv_heads, shape.head_dim)
                                   : erase(fx.contiguous(), shape.num_kv_heads, shape.head_dim);
  host_attention(fx.params(), view, pool);
  testing::expect_matches_reference(fx.out(), ref, {}, name(c));
}

class HostAttention : public ::testing::TestWithParam<Case> {};

TEST_P(HostAttention, MatchesFloat64Reference) {
  const Case c = GetParam();
  const std::uint64_t seed = std::hash<std::string>{}(name(c));
  switch (c.dtype) {
    case DType::f16:
      return run_case<half_t>(c, seed);
    case DType::bf16:
      return run_case<bfloat16_t>(c, seed);
    case DType::f32:
      return run_case<float>(c, seed);
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (DType dt : {DType::f16, DType::bf16, DType::f32})
    for (int group : {1, 4, 8})
      for (int dim : {64, 128})
        for (Mode mode : {Mode::decode, Mode::prefill})
          for (int bs : {0, 1, 3, 7, 16, 17}) cases.push_back({dt, group, dim, mode, bs});
  cases.push_back({DType::f16, 2, 32, Mode::prefill, 5});
  cases.push_back({DType::bf16, 4, 256, Mode::decode, 0});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllShapes, HostAttention, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return name(info.param); });

// The kernel cuts each KV head's query rows into blocks of 1, 2, 4, 8 or 16 (padded up) and the
// cache into tiles of 16 tokens: odd GQA groups and head counts, rows past 16, tile and block
// edges all meet the reference. Shapes: (KV heads, group, head dim).
struct OddShape {
  int kv_heads, group, head_dim;
};

class HostAttentionOddShapes : public ::testing::TestWithParam<std::tuple<OddShape, Mode, int>> {};

TEST_P(HostAttentionOddShapes, MatchesFloat64Reference) {
  const auto [g, mode, block_size] = GetParam();
  KvShape shape;
  shape.seq_lens = {15, 16, 17, 33, 1, 48, 79};  // 7 sequences: below, at and past tile edges
  if (mode == Mode::prefill) shape.q_lens = {15, 2, 17, 9, 1, 16, 3};
  shape.num_kv_heads = g.kv_heads;
  shape.num_q_heads = g.kv_heads * g.group;
  shape.head_dim = g.head_dim;
  shape.block_size = block_size ? block_size : 16;
  shape.seed = 1000003u * static_cast<unsigned>(g.group) + 7919u * static_cast<unsigned>(g.kv_heads) +
               static_cast<unsigned>(block_size) + (mode == Mode::prefill ? 17u : 0u);
  KvFixture<half_t> fx(shape);
  const std::vector<double> ref = fx.reference();
  ThreadPool pool(2);
  const KvView view = block_size ? erase(fx.paged(), shape.num_kv_heads, shape.head_dim)
                                 : erase(fx.contiguous(), shape.num_kv_heads, shape.head_dim);
  host_attention(fx.params(), view, pool);
  testing::expect_matches_reference(fx.out(), ref, {}, "odd shape");
}

INSTANTIATE_TEST_SUITE_P(
    Groups, HostAttentionOddShapes,
    ::testing::Combine(::testing::Values(OddShape{3, 1, 64}, OddShape{3, 3, 64}, OddShape{1, 5, 32},
                                         OddShape{2, 6, 128}, OddShape{1, 12, 64}, OddShape{5, 2, 32},
                                         OddShape{1, 16, 64}, OddShape{1, 24, 128}, OddShape{7, 7, 256}),
                       ::testing::Values(Mode::decode, Mode::prefill), ::testing::Values(0, 5)),
    [](const auto& info) {
      const OddShape g = std::get<0>(info.param);
      return "kv" + std::to_string(g.kv_heads) + "_g" + std::to_string(g.group) + "_d" + std::to_string(g.head_dim) +
             (std::get<1>(info.param) == Mode::decode ? "_decode" : "_prefill") + "_b" +
             std::to_string(std::get<2>(info.param));
    });

// Every block size from 1 to 33 (a tile of 16 spans up to 16 blocks, or sits inside one), and two
// large ones: the paged view's table walk has no division per token.
class HostAttentionBlockSizes : public ::testing::TestWithParam<int> {};

TEST_P(HostAttentionBlockSizes, PagedMatchesFloat64Reference) {
  for (Mode mode : {Mode::decode, Mode::prefill}) {
    KvShape shape;
    shape.seq_lens = {1, 16, 47, 100};
    if (mode == Mode::prefill) shape.q_lens = {1, 16, 5, 33};
    shape.num_kv_heads = 2;
    shape.num_q_heads = 8;
    shape.head_dim = 64;
    shape.block_size = GetParam();
    shape.seed = 31u * static_cast<unsigned>(GetParam()) + (mode == Mode::prefill ? 1u : 0u);
    KvFixture<bfloat16_t> fx(shape);
    const std::vector<double> ref = fx.reference();
    ThreadPool pool(2);
    host_attention(fx.params(), erase(fx.paged(), 2, 64), pool);
    testing::expect_matches_reference(fx.out(), ref, {}, "block size " + std::to_string(GetParam()));
  }
}

INSTANTIATE_TEST_SUITE_P(OneTo33, HostAttentionBlockSizes,
                         ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                           22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 64, 128));

// How far ahead the kernel requests rows (one head, three, past the chunk's last head so that it
// wraps into the next tile's first heads) changes its speed, never its results: the same bits for
// every distance, each against the reference, through both views, decode and prefill.
TEST(HostAttention, PrefetchDistanceNeverChangesResults) {
  for (Mode mode : {Mode::decode, Mode::prefill})
    for (int block_size : {0, 7}) {
      KvShape shape;
      shape.seq_lens = {40, 3, 67, 18, 29};  // 5 sequences on one thread: a task holds all five heads
      if (mode == Mode::prefill) shape.q_lens = {9, 3, 2, 18, 1};
      shape.num_kv_heads = 5;
      shape.num_q_heads = 20;
      shape.head_dim = 64;
      shape.block_size = block_size ? block_size : 16;
      shape.seed = 4099u + static_cast<unsigned>(block_size) + (mode == Mode::prefill ? 1u : 0u);
      KvFixture<half_t> fx(shape);
      const std::vector<double> ref = fx.reference();
      ThreadPool pool(1);
      const KvView view = block_size ? erase(fx.paged(), 5, 64) : erase(fx.contiguous(), 5, 64);
      std::vector<float> first;
      for (int lead : {1, 2, 3, 5, 9}) {
        const std::string what = "lead " + std::to_string(lead) + (block_size ? " paged" : " contiguous") +
                                 (mode == Mode::decode ? " decode" : " prefill");
        fx.poison_output();
        host_attention(fx.params(), view, pool, lead);
        testing::expect_matches_reference(fx.out(), ref, {}, what);
        if (first.empty()) first = fx.out();
        for (std::size_t i = 0; i < first.size(); ++i)
          ASSERT_EQ(std::bit_cast<std::uint32_t>(fx.out()[i]), std::bit_cast<std::uint32_t>(first[i]))
              << what << " element " << i;
      }
    }
}

TEST(HostAttention, PrefetchDistanceByVendorAndBounds) {
  EXPECT_EQ(host_prefetch_lead_heads("GenuineIntel"), 1);
  EXPECT_EQ(host_prefetch_lead_heads("AuthenticAMD"), 3);
  EXPECT_EQ(host_prefetch_lead_heads(""), 3);  // not x86, or cpuid said nothing
  const int here = host_prefetch_lead_heads();
  EXPECT_TRUE(here == 1 || here == 3) << here;
  KvShape shape;
  shape.seq_lens = {5};
  KvFixture<float> fx(shape);
  ThreadPool pool(1);
  EXPECT_THROW(host_attention(fx.params(), erase(fx.contiguous(), shape.num_kv_heads, shape.head_dim), pool, 0),
               InvalidArgument);
}

// The softmax's vector exp against std::exp over the range softmax arguments take, and its edges.
TEST(HostSimd, ExpMatchesStdExp) {
  for (float x = -90.f; x <= 0.f; x += 0.01f) {
    const float got = simd::exp(simd::splat(x))[5];
    const double want = std::exp(static_cast<double>(x));
    if (x >= -87.f) {
      EXPECT_NEAR(got, want, 4e-7 * want) << x;
    }
    EXPECT_GE(got, 0.f) << x;
    EXPECT_LT(got, 2e-38f + 2 * want) << x;
  }
  EXPECT_TRUE(std::isnan(simd::exp(simd::splat(NAN))[0]));
}

// The transposed reduction: lane i is the sum of input i, for 16 distinct inputs.
TEST(HostSimd, TransposeSumPutsEachSumInItsLane) {
  simd::vec a[simd::kLanes];
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (auto& v : a)
    for (int i = 0; i < simd::kLanes; ++i) v[i] = uni(rng);
  const simd::vec got = simd::transpose_sum(a);
  for (int i = 0; i < simd::kLanes; ++i) {
    double want = 0;
    for (int j = 0; j < simd::kLanes; ++j) want += a[i][j];
    EXPECT_NEAR(got[i], want, 1e-5) << i;
    EXPECT_NEAR(simd::hsum(a[i]), want, 1e-5) << i;
  }
}

// NaN in K: every query row that sees the token gets NaN everywhere (its score is NaN, so its
// weight, running sum and every accumulator are); rows that do not see it (earlier prefill
// tokens) stay finite. GQA 4 and 8 (row blocks of 4 and 8, whose tile maxima come from hmax4).
TEST(HostAttention, NaNInKReachesExactlyTheRowsThatSeeIt) {
  for (int group : {1, 4, 8}) {
    KvShape shape;
    shape.seq_lens = {40};
    shape.q_lens = {21};  // query tokens 19..39 of the sequence
    shape.num_kv_heads = 1;
    shape.num_q_heads = group;
    KvFixture<float> fx(shape);
    auto view = fx.contiguous();
    constexpr int kNanToken = 25;
    view.k(0, kNanToken, 0)[7] = std::numeric_limits<float>::quiet_NaN();
    host_attention(fx.params(), erase(view, 1, 64));
    for (int t = 0; t < 21; ++t)
      for (int h = 0; h < group; ++h) {
        const bool sees = 19 + t >= kNanToken;
        for (int d = 0; d < 64; ++d)
          ASSERT_EQ(std::isnan(fx.out()[(static_cast<std::size_t>(t) * group + h) * 64 + d]), sees)
              << "group " << group << " query " << t << " head " << h << " d " << d;
      }
  }
}

// Four maxima at once: each lands in its own output, wherever in its vector the largest lane is.
TEST(HostSimd, Hmax4FindsEachVectorsLargestLane) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uni(-100.f, 100.f);
  for (int trial = 0; trial < 64; ++trial) {
    simd::vec v[4];
    for (auto& x : v)
      for (int i = 0; i < simd::kLanes; ++i) x[i] = uni(rng);
    v[trial % 4][trial % simd::kLanes] = 1000.f + static_cast<float>(trial);  // one vector's peak moves around
    float got[4];
    simd::hmax4(v, got);
    for (int r = 0; r < 4; ++r) {
      float want = v[r][0];
      for (int i = 1; i < simd::kLanes; ++i) want = std::max(want, v[r][i]);
      EXPECT_EQ(got[r], want) << trial << " " << r;
      EXPECT_EQ(simd::hmax(v[r]), want) << trial << " " << r;
    }
  }
}

TEST(HostAttention, NaNInTheCacheReachesTheOutput) {
  KvShape shape;
  shape.seq_lens = {9};
  shape.num_kv_heads = 1;
  shape.num_q_heads = 2;
  KvFixture<float> fx(shape);
  auto view = fx.contiguous();
  view.v(0, 4, 0)[3] = std::numeric_limits<float>::quiet_NaN();
  host_attention(fx.params(), erase(view, 1, 64));
  // Both query heads of the group see V element 3 of token 4: NaN there, finite elsewhere.
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 64; ++d) EXPECT_EQ(std::isnan(fx.out()[h * 64 + d]), d == 3) << h << " " << d;
  // The comparison never lets NaN pass, not even against a NaN reference.
  EXPECT_FALSE(testing::element_matches(NAN, NAN, {}));
  EXPECT_FALSE(testing::element_matches(INFINITY, INFINITY, {}));
  EXPECT_TRUE(testing::element_matches(1.0f, 1.0, {}));
}

// Prefill: a NaN in the V of the last new token reaches only the last query (the only one that
// sees it), though all queries share a tile and a row block.
TEST(HostAttention, NaNInAFutureTokenStaysInvisible) {
  KvShape shape;
  shape.seq_lens = {12};
  shape.q_lens = {5};
  shape.num_kv_heads = 1;
  shape.num_q_heads = 2;
  KvFixture<half_t> fx(shape);
  auto view = fx.contiguous();
  view.v(0, 11, 0)[7] = from_float<half_t>(std::numeric_limits<float>::quiet_NaN());
  host_attention(fx.params(), erase(view, 1, 64));
  for (int i = 0; i < 5; ++i)
    for (int h = 0; h < 2; ++h)
      for (int d = 0; d < 64; ++d)
        EXPECT_EQ(std::isnan(fx.out()[(i * 2 + h) * 64 + d]), i == 4 && d == 7) << i << " " << h << " " << d;
}

TEST(HostAttention, LongContextStaysAccurate) {
  KvShape shape;
  shape.seq_lens = {4099, 2053};
  shape.num_kv_heads = 2;
  shape.num_q_heads = 8;
  shape.head_dim = 128;
  KvFixture<half_t> fx(shape);
  const auto ref = fx.reference();
  host_attention(fx.params(), erase(fx.contiguous(), 2, 128));
  testing::expect_matches_reference(fx.out(), ref, {}, "long");
}

TEST(HostAttention, UnsupportedShapesFailLoudly) {
  KvShape shape;
  shape.seq_lens = {4};
  shape.head_dim = 64;
  KvFixture<float> fx(shape);
  AttentionParams p = fx.params();
  KvView v = erase(fx.contiguous(), 1, 64);
  v.head_dim = 48;
  p.head_dim = 48;
  EXPECT_THROW(host_attention(p, v), InvalidArgument);
  p = fx.params();
  p.num_q_heads = 3;
  p.num_kv_heads = 2;
  EXPECT_THROW(host_attention(p, erase(fx.contiguous(), 2, 64)), InvalidArgument);
  p = fx.params();
  EXPECT_THROW(host_attention(p, erase(fx.contiguous(), 2, 64)), InvalidArgument);  // head mismatch
  // More query tokens than cached tokens (the queries' own K/V must be in the cache).
  p = fx.params();
  const std::int32_t indptr[] = {0, 5};
  p.q_indptr = indptr;
  EXPECT_THROW(host_attention(p, erase(fx.contiguous(), 1, 64)), InvalidArgument);
}

}  // namespace
}  // namespace kvlab
