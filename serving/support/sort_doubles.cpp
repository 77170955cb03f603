#include "serving/support/sort_doubles.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <numeric>

namespace kvlab {

namespace {
// IEEE-754 bits as an unsigned key in the doubles' order: negative values have every bit flipped
// (larger magnitude, smaller key), the others only the sign bit (above every negative).
std::uint64_t key_of(double x) {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  return (bits >> 63) != 0 ? ~bits : bits | (std::uint64_t{1} << 63);
}
double double_of(std::uint64_t key) {
  return std::bit_cast<double>((key >> 63) != 0 ? key & ~(std::uint64_t{1} << 63) : ~key);
}
}  // namespace

void sort_doubles(std::vector<double>& v) {
  constexpr std::size_t kRadixFrom = 4096;  // below this std::sort is as fast
  if (v.size() < kRadixFrom) {
    std::sort(v.begin(), v.end());
    return;
  }
  std::vector<std::uint64_t> keys(v.size()), other(v.size());
  // Four stable passes of 16 bits, least significant first, their counts taken in one read of
  // the keys (4 x 64 Ki counts, about L2's size); a pass where every key has the same digit would
  // move nothing and is skipped (latencies share their top bits).
  constexpr int kBits = 16, kPasses = 64 / kBits;
  constexpr std::size_t kBuckets = std::size_t{1} << kBits, kMask = kBuckets - 1;
  std::vector<std::size_t> start(kPasses * kBuckets);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint64_t k = key_of(v[i]);
    keys[i] = k;
    for (int p = 0; p < kPasses; ++p) ++start[p * kBuckets + ((k >> (p * kBits)) & kMask)];
  }
  for (int p = 0; p < kPasses; ++p) {
    const auto first = start.begin() + static_cast<std::ptrdiff_t>(p * kBuckets);
    if (std::find(first, first + kBuckets, keys.size()) != first + kBuckets) continue;
    std::exclusive_scan(first, first + kBuckets, first, std::size_t{0});  // counts become starts
    for (const std::uint64_t k : keys) other[first[static_cast<std::ptrdiff_t>((k >> (p * kBits)) & kMask)]++] = k;
    keys.swap(other);
  }
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = double_of(keys[i]);
}

}  // namespace kvlab
