// Host attention against the float64 reference: every storage dtype, GQA ratios 1/4/8, head dims
// 64 and 128 (and 32/256 once), decode and prefill, contiguous and paged views at odd block sizes,
// prime batch sizes; fresh random data, output poisoned first, every element checked.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "alloc/error.hpp"
#include "kernels/attention.hpp"
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
    case DType::f16: return run_case<half_t>(c, seed);
    case DType::bf16: return run_case<bfloat16_t>(c, seed);
    case DType::f32: return run_case<float>(c, seed);
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
