#include "kernels/measure/host_throughput.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <string>

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers seed conversions with _mm512_undefined_ps(), which -Wmaybe-uninitialized
// reports at every inlined call (GCC bug 105593), as in kernels/host_attention.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "alloc/core/error.hpp"
#include "kernels/host_simd.hpp"
#include "alloc/memory/huge_pages.hpp"
#include "kernels/numeric.hpp"

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

namespace {
// 16-element chunks per group of decode_arithmetic<R>: R x chunks = 16 independent accumulators
// (2 x R from R = 8 on), more than the FMA latency times the FMA ports, so for R up to 4 only the
// ports limit the loop, as in the kernel's 16-wide score and V blocks. From R = 8 on, accumulators
// and queries outnumber the 32 vector registers and spill: those rates are lower bounds.
constexpr int chunks_per_group(int rows) { return rows >= 8 ? 2 : 16 / rows; }

// The decode kernel's per-element arithmetic on an L1-resident fp16 buffer: each 16-element chunk
// converted once and multiplied into R accumulators.
template <int R>
float decode_arithmetic(const half_t* buf, std::size_t n, std::int64_t elements, float seed) {
  using simd::vec;
  constexpr int kChunks = chunks_per_group(R);
  constexpr std::size_t kGroup = static_cast<std::size_t>(kChunks) * simd::kLanes;
  vec q[R];
  for (int r = 0; r < R; ++r) q[r] = simd::splat(seed * static_cast<float>(r + 1));
  vec acc[kChunks][R] = {};
  const auto groups = static_cast<std::int64_t>((elements + kGroup - 1) / kGroup);
  std::size_t at = 0;
  for (std::int64_t g = 0; g < groups; ++g) {
    for (int c = 0; c < kChunks; ++c) {
      const vec x = simd::load_as_float(buf + at + static_cast<std::size_t>(c) * simd::kLanes);
      for (int r = 0; r < R; ++r) acc[c][r] += x * q[r];  // contracted to FMA (-ffp-contract=fast)
    }
    at = at + kGroup == n ? 0 : at + kGroup;
  }
  float total = 0.f;
  for (int c = 0; c < kChunks; ++c)
    for (int r = 0; r < R; ++r) total += simd::hsum(acc[c][r]);
  return total;
}
}  // namespace

std::vector<double> measure_decode_arithmetic_samples(ThreadPool& pool, int rows, std::int64_t elements_per_thread,
                                                      int reps) {
  if (rows != 1 && rows != 2 && rows != 4 && rows != 8 && rows != 16)
    throw InvalidArgument("measure_decode_arithmetic_samples: rows " + std::to_string(rows) +
                          " is not 1, 2, 4, 8 or 16 (query rows per KV head)");
  if (elements_per_thread <= 0)
    throw InvalidArgument("measure_decode_arithmetic_samples: elements_per_thread must be positive");
  // 16 KiB of fp16 per chunk, inside every x86 core's L1 data cache (32-48 KiB), in whole groups
  // of every row count (a multiple of 2 x 16 x 16 elements); a thread that takes another chunk
  // loads its buffer from L2 once per run.
  constexpr std::size_t kBuffer = 8192;
  const std::int64_t chunks = chunks_of(pool);
  const std::int64_t per_chunk =
      std::max<std::int64_t>(1, elements_per_thread * static_cast<std::int64_t>(pool.size()) / chunks);
  std::vector<half_t> buffers(kBuffer * static_cast<std::size_t>(chunks));
  for (std::size_t i = 0; i < buffers.size(); ++i)
    buffers[i] = from_float<half_t>(static_cast<float>(static_cast<int>(i % 97) - 48) / 64.f);
  std::vector<float> sums(static_cast<std::size_t>(chunks));
  volatile float seed_source = 1e-3f;  // a runtime value: the compiler cannot fold the loop
  const float seed = seed_source;
  const auto pass = [&](std::int64_t c) {
    const half_t* b = buffers.data() + kBuffer * static_cast<std::size_t>(c);
    const auto run = [&]<int R>() { return decode_arithmetic<R>(b, kBuffer, per_chunk, seed); };
    float s = 0.f;
    switch (rows) {
      case 1:
        s = run.template operator()<1>();
        break;
      case 2:
        s = run.template operator()<2>();
        break;
      case 4:
        s = run.template operator()<4>();
        break;
      case 8:
        s = run.template operator()<8>();
        break;
      default:
        s = run.template operator()<16>();
        break;
    }
    sums[static_cast<std::size_t>(c)] = s;
  };
  // Elements a chunk really converts: whole groups of its row count (decode_arithmetic rounds up).
  const std::int64_t group = std::int64_t{chunks_per_group(rows)} * simd::kLanes;
  const std::int64_t done = (per_chunk + group - 1) / group * group;
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    pool.parallel_for(chunks, pass);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    samples.push_back(static_cast<double>(done) * static_cast<double>(chunks) * static_cast<double>(sizeof(half_t)) /
                      s);
  }
  volatile float sink = sums[0];
  (void)sink;
  return samples;
}

}  // namespace kvlab
