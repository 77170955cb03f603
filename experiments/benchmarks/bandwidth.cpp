#include "experiments/benchmarks/bandwidth.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

namespace kvlab::bench {

namespace {
using vec = float __attribute__((vector_size(64)));
}

double measure_read_bandwidth(ThreadPool& pool, std::size_t bytes, int reps) {
  const std::size_t n = bytes / sizeof(float);
  std::unique_ptr<float[]> data(new float[n]);
  const std::int64_t chunks = static_cast<std::int64_t>(pool.size()) * 8;
  pool.parallel_for(chunks, [&](std::int64_t c) {  // first touch from the threads that will read
    const std::size_t lo = n * c / chunks, hi = n * (c + 1) / chunks;
    for (std::size_t i = lo; i < hi; ++i) data[i] = static_cast<float>(i & 1023) * 1e-3f;
  });
  std::vector<float> sums(static_cast<std::size_t>(chunks));
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(chunks, [&](std::int64_t c) {
      // Eight independent 16-lane accumulators, so the adds never limit the read rate.
      const std::size_t lo = n * c / chunks / 128 * 128, hi = n * (c + 1) / chunks / 128 * 128;
      vec acc[8] = {};
      for (std::size_t i = lo; i < hi; i += 128)
        for (int a = 0; a < 8; ++a) {
          vec v;
          std::memcpy(&v, data.get() + i + a * 16, sizeof v);
          acc[a] += v;
        }
      float total = 0.f;
      for (int a = 0; a < 8; ++a)
        for (int l = 0; l < 16; ++l) total += acc[a][l];
      sums[c] = total;
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(float)) / s);
  }
  volatile float sink = sums[0];
  (void)sink;
  return best;
}

}  // namespace kvlab::bench
