#pragma once
// Sorting floating-point values by their bits: an unsigned key per value in the values' order, and
// an LSD radix sort of such keys. serving/support/sort_doubles.cpp sorts latencies with it, and
// serving/support/float_runs.cpp the replayer's runs of inter-token gaps.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <numeric>
#include <vector>

namespace kvlab::radix {

/// IEEE-754 bits as an unsigned key in the values' order: negative values have every bit flipped
/// (larger magnitude, smaller key), the others only the sign bit (above every negative). -0.0 gets
/// the key just below +0.0's. NaN has no place in the order.
template <class Key, class Float>
[[nodiscard]] Key key_of(Float x) noexcept {
  static_assert(sizeof(Key) == sizeof(Float));
  constexpr Key kSign = Key{1} << (8 * sizeof(Key) - 1);
  const auto bits = std::bit_cast<Key>(x);
  return (bits & kSign) != 0 ? ~bits : bits | kSign;
}

/// The value whose key_of is `key`.
template <class Float, class Key>
[[nodiscard]] Float value_of(Key key) noexcept {
  static_assert(sizeof(Key) == sizeof(Float));
  constexpr Key kSign = Key{1} << (8 * sizeof(Key) - 1);
  return std::bit_cast<Float>((key & kSign) != 0 ? key & ~kSign : ~key);
}

/// Below this many keys std::sort is as fast.
inline constexpr std::size_t kRadixFrom = 4096;
/// Bits a pass sorts, and the memory its counts take.
inline constexpr int kPassBits = 16;
inline constexpr std::size_t kCountBytesPerPass = (std::size_t{1} << kPassBits) * sizeof(std::size_t);

/// Sorts unsigned `keys` ascending by their bits from `low_bit` up (a multiple of 16; the bits
/// below it are carried along, in no particular order among equal high bits): stable passes of 16
/// bits, least significant first, their counts taken in one read of the keys (64 Ki counts a pass,
/// about L2's size); a pass where every key has the same digit would move nothing and is skipped
/// (latencies share their top bits).
template <class Key>
void radix_sort(std::vector<Key>& keys, int low_bit = 0) {
  constexpr int kBits = kPassBits;
  if (keys.size() < kRadixFrom) {
    const Key high = low_bit == 0 ? ~Key{0} : static_cast<Key>(~((Key{1} << low_bit) - 1));
    std::sort(keys.begin(), keys.end(), [high](Key a, Key b) { return (a & high) < (b & high); });
    return;
  }
  const int first = low_bit / kBits, passes = static_cast<int>(8 * sizeof(Key)) / kBits;
  constexpr std::size_t kBuckets = std::size_t{1} << kBits, kMask = kBuckets - 1;
  std::vector<Key> other(keys.size());
  std::vector<std::size_t> start(static_cast<std::size_t>(passes - first) * kBuckets);
  for (const Key k : keys)
    for (int p = first; p < passes; ++p)
      ++start[static_cast<std::size_t>(p - first) * kBuckets + ((k >> (p * kBits)) & kMask)];
  for (int p = first; p < passes; ++p) {
    const auto counts = start.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(p - first) * kBuckets);
    if (std::find(counts, counts + kBuckets, keys.size()) != counts + kBuckets) continue;
    std::exclusive_scan(counts, counts + kBuckets, counts, std::size_t{0});  // counts become starts
    for (const Key k : keys) other[counts[static_cast<std::ptrdiff_t>((k >> (p * kBits)) & kMask)]++] = k;
    keys.swap(other);
  }
}

}  // namespace kvlab::radix
