#pragma once
// Sorting a large vector of doubles fast, in exactly the order std::sort gives. The replayer's
// latency statistics sort every inter-token gap of a run (a million and more values); std::sort
// took about a tenth of a memory-mode replay's wall time, an LSD radix sort a small part of that.
// The result is the same vector std::sort would leave (equal values are interchangeable), so every
// sum taken over it, and so every mean and percentile written from it, is the same to the bit.
#include <span>
#include <vector>

namespace kvlab {

/// Sorts `v` ascending. Values that compare equal (including -0.0 and +0.0, which this places
/// -0.0 first) end adjacent, as with std::sort; NaN is not allowed (std::sort's order of NaN is
/// undefined too). Vectors under a few thousand values go to std::sort.
void sort_doubles(std::vector<double>& v);

/// The values of `v` as doubles, ascending: to the bit the vector sort_doubles leaves from `v`
/// converted (every float is exactly a double, and the conversion keeps their order). The replayer
/// keeps its inter-token gaps as floats; their 32-bit keys sort in two 16-bit passes instead of
/// four, with half the key memory, and no unsorted double copy is ever made. NaN is not allowed.
[[nodiscard]] std::vector<double> sorted_as_doubles(std::span<const float> v);

}  // namespace kvlab
