#pragma once
// The host's own limits, measured: memory read bandwidth, fp32 FMA throughput, and the decode
// kernel's arithmetic alone (the KV rate its conversions and FMAs allow from L1). Kernel
// throughput is reported as a fraction of numbers taken on the same machine in the same run
// (benchmarks/attention_bench.cpp), and `kvlab calibrate` writes them into a device
// model file (experiments/runs/calibrate.hpp).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "kernels/thread_pool.hpp"

namespace kvlab {

/// A buffer of `bytes` (rounded down to whole 512-byte groups; under 512 throws InvalidArgument),
/// huge-page backed like the benchmarks' KV caches, first touched by the threads of `pool` (one
/// socket: which thread touches which page does not matter), and read again on every call. Benchmarks that take the
/// bandwidth between kernel runs (attention_bench's side-by-side rounds) hold one, so that a pass
/// costs one read of the buffer and not an allocation and a first touch as well.
class ReadBandwidthProbe {
 public:
  ReadBandwidthProbe(ThreadPool& pool, std::size_t bytes);

  /// Bytes/s of each of `reps` parallel streaming reads (a sum of floats) over the buffer.
  [[nodiscard]] std::vector<double> samples(int reps);
  /// The best of samples(reps) (the benchmarks' convention).
  [[nodiscard]] double best(int reps);

  [[nodiscard]] std::size_t bytes() const { return n_ * sizeof(float); }

 private:
  ThreadPool* pool_;
  std::size_t n_;  // floats read per pass: bytes rounded down to whole 512-byte groups
  std::unique_ptr<float[], decltype(&std::free)> data_;
};

/// Bytes/s of each of `reps` parallel streaming reads (a sum of floats) over a fresh
/// ReadBandwidthProbe of `bytes` (so under 512 bytes throws InvalidArgument), using every thread of
/// `pool`. The buffer is first touched outside the timing.
[[nodiscard]] std::vector<double> measure_read_bandwidth_samples(ThreadPool& pool, std::size_t bytes, int reps);

/// The best of measure_read_bandwidth_samples (the benchmarks' convention).
[[nodiscard]] double measure_read_bandwidth(ThreadPool& pool, std::size_t bytes = std::size_t{1} << 30, int reps = 5);

/// fp32 FLOP/s (2 per fused multiply-add) of each of `reps` runs of a register-resident loop of
/// independent 16-lane FMA chains on every thread of `pool`, `fmas_per_thread` vector FMAs per
/// thread and run: the host's vector FMA peak as compiled (-march=native).
[[nodiscard]] std::vector<double> measure_fma_flops_samples(ThreadPool& pool, std::int64_t fmas_per_thread, int reps);

/// KV bytes/s of each of `reps` runs of the host decode kernel's arithmetic alone, on every thread
/// of `pool`: per 16 fp16 elements of an L1-resident buffer, one conversion to fp32 and `rows` FMAs
/// (one per query row of the GQA group that shares the KV head), which is what each K and each V
/// element costs in kernels/host_attention.cpp (the scores' dot products, the V accumulation);
/// `elements_per_thread` fp16 elements per thread and run. Nothing comes from memory, and the
/// softmax, reductions and loop overhead are left out, so this is a ceiling: however fast memory
/// is, the decode cannot read KV faster than its cores convert and multiply it. On AVX-512 the
/// conversion takes FMA-port slots too (vcvtph2ps), which the FMA peak alone does not show.
/// `rows` is 1, 2, 4, 8 or 16; anything else throws InvalidArgument.
[[nodiscard]] std::vector<double> measure_decode_arithmetic_samples(ThreadPool& pool, int rows,
                                                                    std::int64_t elements_per_thread, int reps);

}  // namespace kvlab
