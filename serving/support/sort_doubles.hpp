#pragma once
// Sorting a large vector of doubles fast, in exactly the order std::sort gives (an LSD radix sort,
// serving/support/radix_sort.hpp): the replayer's latency statistics sort a value per request
// (TTFT, TPOT, E2EL), hundreds of thousands in a long trace. The result is the same vector std::sort would leave (equal
// values are interchangeable), so every sum taken over it, and so every mean and percentile written from it, is the
// same to the bit.
#include <vector>

namespace kvlab {

/// Sorts `v` ascending. Values that compare equal (including -0.0 and +0.0, which this places
/// -0.0 first) end adjacent, as with std::sort; NaN is not allowed (std::sort's order of NaN is
/// undefined too). Vectors under a few thousand values go to std::sort.
void sort_doubles(std::vector<double>& v);

}  // namespace kvlab
