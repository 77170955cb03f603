#pragma once
// The machine's memory read bandwidth, measured by the benchmark binary itself so that kernel
// throughput is always reported as a fraction of a number taken in the same run.
#include <cstddef>

#include "kernels/thread_pool.hpp"

namespace kvlab::bench {

/// Best-of-`reps` bytes/s of a parallel streaming read (sum of floats) over `bytes` of memory,
/// using every thread of `pool`. The buffer is touched before timing.
[[nodiscard]] double measure_read_bandwidth(ThreadPool& pool, std::size_t bytes = std::size_t{1} << 30, int reps = 5);

}  // namespace kvlab::bench
