#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/numeric.hpp"

namespace kvlab {
namespace {

TEST(Numeric, HalfRoundTripsEveryBitPattern) {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const half_t h{static_cast<std::uint16_t>(bits)};
    const float f = to_float(h);
    EXPECT_EQ(std::isnan(f), std::isnan(detail::half_bits_to_float_soft(h.bits))) << bits;
    if (std::isnan(f)) continue;
    ASSERT_EQ(f, detail::half_bits_to_float_soft(h.bits)) << bits;
    ASSERT_EQ(from_float<half_t>(f).bits, h.bits) << bits;
    ASSERT_EQ(detail::float_to_half_bits_soft(f), h.bits) << bits;
  }
}

TEST(Numeric, HalfRoundingMatchesHardwareOnRandomFloats) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = any(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    // Exhaustive agreement between the portable path and the one the host build uses.
    ASSERT_EQ(detail::float_to_half_bits_soft(f), from_float<half_t>(f).bits) << f;
  }
}

TEST(Numeric, Bfloat16RoundsToNearestEven) {
  EXPECT_EQ(to_float(from_float<bfloat16_t>(1.0f)), 1.0f);
  EXPECT_EQ(from_float<bfloat16_t>(1.00390625f).bits, 0x3f80);  // exactly half an ulp: ties to even
  EXPECT_EQ(from_float<bfloat16_t>(1.01171875f).bits, 0x3f82);  // 1.5 ulp ties up to even
  EXPECT_TRUE(std::isnan(to_float(from_float<bfloat16_t>(NAN))));
  EXPECT_TRUE(std::isinf(to_float(from_float<bfloat16_t>(INFINITY))));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uni(-100.f, 100.f);
  for (int i = 0; i < 10000; ++i) {
    const float f = uni(rng);
    EXPECT_LE(std::abs(to_float(from_float<bfloat16_t>(f)) - f), std::abs(f) * (1.f / 256.f));
  }
}

}  // namespace
}  // namespace kvlab
