#include "kernels/measure/host_throughput.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <string>

#include "alloc/core/error.hpp"
#include "kernels/measure/huge_pages.hpp"

namespace kvlab {

namespace {
using vec = float __attribute__((vector_size(64)));
using Clock = std::chrono::steady_clock;
}  // namespace

namespace {
// Eight chunks per thread, handed out dynamically, so a thread that starts late costs little.
std::int64_t chunks_of(const ThreadPool& pool) { return static_cast<std::int64_t>(pool.size()) * 8; }
constexpr std::size_t kGroup = 128;  // floats per step of the read loop: eight 16-lane vectors
}  // namespace

ReadBandwidthProbe::ReadBandwidthProbe(ThreadPool& pool, std::size_t bytes)
    : pool_(&pool), n_(bytes / sizeof(float) / kGroup * kGroup), data_(nullptr, &std::free) {
  if (n_ == 0)
    throw InvalidArgument("ReadBandwidthProbe: buffer of " + std::to_string(bytes) + " bytes is under 512 bytes");
  // Huge-page backed like the benchmarks' KV caches, so the ratio compares like with like.
  data_.reset(static_cast<float*>(allocate_huge_page_backed(n_ * sizeof(float))));
  const std::int64_t chunks = chunks_of(pool);
  float* data = data_.get();
  const std::size_t n = n_;
  pool.parallel_for(chunks, [&](std::int64_t c) {  // first touch from the threads that will read
    const std::size_t lo = n * c / chunks, hi = n * (c + 1) / chunks;
    for (std::size_t i = lo; i < hi; ++i) data[i] = static_cast<float>(i & 1023) * 1e-3f;
  });
}

std::vector<double> ReadBandwidthProbe::samples(int reps) {
  const std::int64_t chunks = chunks_of(*pool_);
  const float* data = data_.get();
  const std::size_t groups = n_ / kGroup;
  std::vector<float> sums(static_cast<std::size_t>(chunks));
  std::vector<double> out;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    pool_->parallel_for(chunks, [&](std::int64_t c) {
      // Eight independent 16-lane accumulators, so the adds never limit the read rate.
      const std::size_t lo = groups * c / chunks * kGroup, hi = groups * (c + 1) / chunks * kGroup;
      vec acc[8] = {};
      for (std::size_t i = lo; i < hi; i += kGroup)
        for (int a = 0; a < 8; ++a) {
          vec v;
          std::memcpy(&v, data + i + a * 16, sizeof v);
          acc[a] += v;
        }
      float total = 0.f;
      for (int a = 0; a < 8; ++a)
        for (int l = 0; l < 16; ++l) total += acc[a][l];
      sums[static_cast<std::size_t>(c)] = total;
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    out.push_back(static_cast<double>(n_ * sizeof(float)) / s);
  }
  volatile float sink = sums[0];
  (void)sink;
  return out;
}

double ReadBandwidthProbe::best(int reps) {
  const std::vector<double> s = samples(reps);
  return s.empty() ? 0.0 : *std::max_element(s.begin(), s.end());
}

std::vector<double> measure_read_bandwidth_samples(ThreadPool& pool, std::size_t bytes, int reps) {
  return ReadBandwidthProbe(pool, bytes).samples(reps);
}

double measure_read_bandwidth(ThreadPool& pool, std::size_t bytes, int reps) {
  return ReadBandwidthProbe(pool, bytes).best(reps);
}

std::vector<double> measure_fma_flops_samples(ThreadPool& pool, std::int64_t fmas_per_thread, int reps) {
  // 16 independent chains: enough to cover the FMA latency (4 cycles) on two FMA ports. The
  // multiplier and addend are runtime values so the compiler cannot fold the loop.
  constexpr int kChains = 16;
  // Eight chunks per thread, handed out dynamically, so a thread that starts late costs little.
  const auto chunks = static_cast<std::int64_t>(pool.size()) * 8;
  const std::int64_t iters = std::max<std::int64_t>(1, fmas_per_thread / 8 / kChains);
  volatile float mul_seed = 0.999999f, add_seed = 1e-7f;
  const float m = mul_seed, a = add_seed;
  std::vector<float> sums(static_cast<std::size_t>(chunks));
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    pool.parallel_for(chunks, [&](std::int64_t t) {
      vec acc[kChains];
      for (int c = 0; c < kChains; ++c) acc[c] = vec{} + static_cast<float>(c + t);
      const vec vm = vec{} + m, va = vec{} + a;
      for (std::int64_t i = 0; i < iters; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * vm + va;  // contracted to FMA (-ffp-contract=fast)
      float total = 0.f;
      for (int c = 0; c < kChains; ++c)
        for (int l = 0; l < 16; ++l) total += acc[c][l];
      sums[static_cast<std::size_t>(t)] = total;
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    samples.push_back(2.0 * 16.0 * kChains * static_cast<double>(iters) * static_cast<double>(chunks) / s);
  }
  volatile float sink = sums[0];
  (void)sink;
  return samples;
}

}  // namespace kvlab
