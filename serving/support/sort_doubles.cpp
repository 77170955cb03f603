#include "serving/support/sort_doubles.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>

namespace kvlab {

namespace {
// IEEE-754 bits as an unsigned key in the values' order: negative values have every bit flipped
// (larger magnitude, smaller key), the others only the sign bit (above every negative).
template <class Key, class Float>
Key key_of(Float x) {
  constexpr Key kSign = Key{1} << (8 * sizeof(Key) - 1);
  const auto bits = std::bit_cast<Key>(x);
  return (bits & kSign) != 0 ? ~bits : bits | kSign;
}
template <class Float, class Key>
Float value_of(Key key) {
  constexpr Key kSign = Key{1} << (8 * sizeof(Key) - 1);
  return std::bit_cast<Float>((key & kSign) != 0 ? key & ~kSign : ~key);
}

constexpr std::size_t kRadixFrom = 4096;  // below this std::sort is as fast

/// Sorts unsigned `keys` ascending: stable passes of 16 bits, least significant first, their
/// counts taken in one read of the keys (64 Ki counts a pass, about L2's size); a pass where every
/// key has the same digit would move nothing and is skipped (latencies share their top bits).
template <class Key>
void radix_sort(std::vector<Key>& keys) {
  if (keys.size() < kRadixFrom) {
    std::sort(keys.begin(), keys.end());
    return;
  }
  constexpr int kBits = 16, kPasses = static_cast<int>(8 * sizeof(Key)) / kBits;
  constexpr std::size_t kBuckets = std::size_t{1} << kBits, kMask = kBuckets - 1;
  std::vector<Key> other(keys.size());
  std::vector<std::size_t> start(kPasses * kBuckets);
  for (const Key k : keys)
    for (int p = 0; p < kPasses; ++p) ++start[p * kBuckets + ((k >> (p * kBits)) & kMask)];
  for (int p = 0; p < kPasses; ++p) {
    const auto first = start.begin() + static_cast<std::ptrdiff_t>(p * kBuckets);
    if (std::find(first, first + kBuckets, keys.size()) != first + kBuckets) continue;
    std::exclusive_scan(first, first + kBuckets, first, std::size_t{0});  // counts become starts
    for (const Key k : keys) other[first[static_cast<std::ptrdiff_t>((k >> (p * kBits)) & kMask)]++] = k;
    keys.swap(other);
  }
}
}  // namespace

void sort_doubles(std::vector<double>& v) {
  if (v.size() < kRadixFrom) {
    std::sort(v.begin(), v.end());
    return;
  }
  std::vector<std::uint64_t> keys(v.size());
  std::transform(v.begin(), v.end(), keys.begin(), [](double x) { return key_of<std::uint64_t>(x); });
  radix_sort(keys);
  std::transform(keys.begin(), keys.end(), v.begin(), [](std::uint64_t k) { return value_of<double>(k); });
}

std::vector<double> sorted_as_doubles(std::span<const float> v) {
  std::vector<double> out(v.size());
  if (v.size() < kRadixFrom) {
    std::copy(v.begin(), v.end(), out.begin());
    std::sort(out.begin(), out.end());
    return out;
  }
  // Runs of identical values. The replayer records one gap per sequence of a step, and every
  // sequence that was also in the step before has the same gap: its gaps come in runs about a batch
  // long. A radix pass over such runs is a chain of increments of one counter through memory (each
  // waiting for the last), so where runs are long the runs are sorted instead, as (key, length),
  // and written out: the same values in the same order. Where they are short, the values are.
  constexpr std::size_t kMaxRun = std::numeric_limits<std::uint32_t>::max();
  std::size_t runs = 1;
  for (std::size_t i = 1; i < v.size(); ++i)
    runs += std::bit_cast<std::uint32_t>(v[i]) != std::bit_cast<std::uint32_t>(v[i - 1]);
  if (runs * 4 <= v.size()) {
    std::vector<std::uint64_t> packed;  // key << 32 | run length: sorts by key (then length)
    packed.reserve(runs + v.size() / kMaxRun);
    for (std::size_t i = 0; i < v.size();) {
      const auto bits = std::bit_cast<std::uint32_t>(v[i]);
      std::size_t j = i + 1;
      while (j < v.size() && j - i < kMaxRun && std::bit_cast<std::uint32_t>(v[j]) == bits) ++j;
      packed.push_back(std::uint64_t{key_of<std::uint32_t>(v[i])} << 32 | (j - i));
      i = j;
    }
    radix_sort(packed);
    auto o = out.begin();
    for (const std::uint64_t p : packed)
      o = std::fill_n(o, p & kMaxRun, static_cast<double>(value_of<float>(static_cast<std::uint32_t>(p >> 32))));
    return out;
  }
  std::vector<std::uint32_t> keys(v.size());
  std::transform(v.begin(), v.end(), keys.begin(), [](float x) { return key_of<std::uint32_t>(x); });
  radix_sort(keys);
  std::transform(keys.begin(), keys.end(), out.begin(),
                 [](std::uint32_t k) { return static_cast<double>(value_of<float>(k)); });
  return out;
}

}  // namespace kvlab
