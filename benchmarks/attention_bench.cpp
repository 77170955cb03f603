// Host decode attention at llama-3-8b geometry (32 query / 8 KV heads, head dim 128), fp16 KV,
// batch 32, context 4096, through the contiguous view and the paged view (several block sizes) on
// the same data, and the contiguous one again on one thread. Each benchmark reports KV bytes read
// per second and that rate as a fraction of the memory read bandwidth this binary measures at
// start-up with the same number of threads (context: memory_read_bandwidth*); BM_DecodeSideBySide
// takes those ratios again round by round, each decode between two bandwidth passes, for the
// paged view in two placements: shuffled (a sequence's blocks anywhere in the pool) and where the
// region order of paged/block_pool.hpp (`paged-B-region`) puts them. They also take the decode's
// arithmetic ceiling each round (the KV rate its fp16 conversions and FMAs allow from L1,
// measure_decode_arithmetic_samples) and report the decode against the lower of the two ceilings,
// the roofline: where the arithmetic ceiling is below the read bandwidth, no decode of this
// kernel's arithmetic reaches the bandwidth, however its reads are ordered.
//
//   build/release/bench/kvlab_bench_attention --benchmark_out=attention.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/host_context.hpp"
#include "benchmarks/round_series.hpp"
#include "kernels/measure/host_throughput.hpp"
#include "alloc/memory/huge_pages.hpp"
#include "kernels/attention.hpp"
#include "kernels/kv_view.hpp"
#include "kernels/measure/block_pool_copy.hpp"
#include "paged/block_pool.hpp"

namespace {

using namespace kvlab;

constexpr int kBatch = 32, kContext = 4096, kQHeads = 32, kKvHeads = 8, kHeadDim = 128;
// fp16 elements per thread of one arithmetic-ceiling pass: 64 MiB of KV's worth, a few
// milliseconds on one core.
constexpr std::int64_t kArithmeticElements = std::int64_t{32} << 20;
double g_bandwidth = 0;             // every thread of the default pool
double g_bandwidth_one_thread = 0;  // one thread

ThreadPool& one_thread() {
  static ThreadPool pool(1);
  return pool;
}

/// One KV cache, stored contiguously; PagedCopy copies it into block pools (shuffled, or in region placement).
struct DecodeData {
  std::int64_t row = static_cast<std::int64_t>(kKvHeads) * kHeadDim;
  std::vector<half_t, HugePageAllocator<half_t>> k, v;  // [batch][context][kv_heads][head_dim]
  std::vector<half_t*> kptr, vptr;
  std::vector<float> q, out;
  std::vector<std::int32_t> lens;

  DecodeData() {
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    k.resize(static_cast<std::size_t>(kBatch) * kContext * row);
    v.resize(k.size());
    for (auto& x : k) x = from_float<half_t>(uni(rng));
    for (auto& x : v) x = from_float<half_t>(uni(rng));
    for (int s = 0; s < kBatch; ++s) {
      kptr.push_back(k.data() + static_cast<std::size_t>(s) * kContext * row);
      vptr.push_back(v.data() + static_cast<std::size_t>(s) * kContext * row);
    }
    q.resize(static_cast<std::size_t>(kBatch) * kQHeads * kHeadDim);
    for (auto& x : q) x = uni(rng);
    out.resize(q.size());
    lens.assign(kBatch, kContext);
  }
  AttentionParams params() {
    AttentionParams p;
    p.batch = kBatch;
    p.num_q_heads = kQHeads;
    p.num_kv_heads = kKvHeads;
    p.head_dim = kHeadDim;
    p.scale = 1.f / std::sqrt(float(kHeadDim));
    p.q = q.data();
    p.out = out.data();
    p.seq_lens = lens.data();
    return p;
  }
  [[nodiscard]] double kv_bytes() const { return 2.0 * k.size() * sizeof(half_t); }
};

DecodeData& data() {
  static DecodeData d;
  return d;
}

/// The block table the region order (paged/block_pool.hpp) hands the batch, as in a serving pool:
/// a pool a third larger than the batch needs, a seeded random quarter of it held by other
/// sequences, then the batch decoding side by side, each sequence taking one block in turn after
/// its last one. A region is 2 MiB of the K (or V) pool, as in PagedBackend.
std::vector<std::int32_t> region_table(int block_size, std::int32_t pool_blocks) {
  const int per_seq = (kContext + block_size - 1) / block_size;
  BlockPool pool(pool_blocks, FreeOrder::region,
                 blocks_per_region(static_cast<std::size_t>(block_size) * kKvHeads * kHeadDim * sizeof(half_t)));
  std::vector<BlockId> all;
  while (const auto b = pool.allocate()) all.push_back(*b);
  std::shuffle(all.begin(), all.end(), std::mt19937_64(13));
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(kBatch) * per_seq; ++i)
    pool.release(all[static_cast<std::size_t>(i)]);
  std::vector<std::int32_t> table(static_cast<std::size_t>(kBatch) * per_seq);
  for (int j = 0; j < per_seq; ++j)
    for (int s = 0; s < kBatch; ++s) {
      const std::size_t at = static_cast<std::size_t>(s) * per_seq + j;
      table[at] = *pool.allocate(j == 0 ? -1 : table[at - 1]);
    }
  return table;
}

enum class Placement { shuffled, region };

/// The same KV as a block pool: shuffled (kernels/measure/block_pool_copy.hpp), or where region placement puts it.
struct PagedCopy {
  BlockPoolCopy<half_t> pool;
  PagedKv<half_t> view;
  explicit PagedCopy(int block_size, Placement placement = Placement::shuffled)
      : pool(placement == Placement::shuffled ? shuffled_pool(block_size) : region_pool(block_size)),
        view(pool.view(kHeadDim)) {}
  static BlockPoolCopy<half_t> shuffled_pool(int block_size) {
    return {data().kptr.data(), data().vptr.data(), kBatch, kContext, data().row, block_size};
  }
  static BlockPoolCopy<half_t> region_pool(int block_size) {
    const std::int32_t needed = kBatch * ((kContext + block_size - 1) / block_size);
    const std::int32_t pool_blocks = needed + needed / 3;
    return {data().kptr.data(),
            data().vptr.data(),
            kBatch,
            kContext,
            data().row,
            block_size,
            region_table(block_size, pool_blocks),
            pool_blocks};
  }
};

void report(benchmark::State& state, double bytes, double bandwidth = g_bandwidth) {
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
  state.counters["kv_bytes_per_s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["fraction_of_bandwidth"] =
      benchmark::Counter(bytes / bandwidth, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MemoryReadBandwidth(benchmark::State& state) {
  ReadBandwidthProbe probe(default_thread_pool(), std::size_t{1} << 30);
  for (auto _ : state) state.counters["bytes_per_s"] = probe.best(1);
}

void BM_DecodeContiguous(benchmark::State& state) {
  DecodeData& d = data();
  const KvView view = erase(ContiguousKv<half_t>{d.kptr.data(), d.vptr.data(), d.row, kHeadDim}, kKvHeads, kHeadDim);
  const AttentionParams p = d.params();
  for (auto _ : state) {
    host_attention(p, view);
    benchmark::ClobberMemory();
  }
  report(state, d.kv_bytes());
}

/// The same on one thread, against the bandwidth one thread reaches.
void BM_DecodeContiguousOneThread(benchmark::State& state) {
  DecodeData& d = data();
  const KvView view = erase(ContiguousKv<half_t>{d.kptr.data(), d.vptr.data(), d.row, kHeadDim}, kKvHeads, kHeadDim);
  const AttentionParams p = d.params();
  for (auto _ : state) {
    host_attention(p, view, one_thread());
    benchmark::ClobberMemory();
  }
  report(state, d.kv_bytes(), g_bandwidth_one_thread);
}

void BM_DecodePaged(benchmark::State& state) {
  DecodeData& d = data();
  const PagedCopy paged(static_cast<int>(state.range(0)));
  const KvView view = erase(paged.view, kKvHeads, kHeadDim);
  const AttentionParams p = d.params();
  for (auto _ : state) {
    host_attention(p, view);
    benchmark::ClobberMemory();
  }
  report(state, d.kv_bytes());
}

/// What else bounds a round's decode, taken on the same threads in the same round (the host's
/// speed drifts as much as its bandwidth): the kernel itself with its KV resident in L2, its own
/// speed where memory is not in the way, and the arithmetic floor, the KV rate its fp16
/// conversions and GQA-group FMAs alone allow from L1 (host_throughput.hpp). The kernel in L2 runs
/// one sequence per thread at contexts of 256 and 64 tokens (1 MiB and 256 KiB of K and V each,
/// inside a core's 2 MiB L2), kL2Calls calls each, and its rate is the difference of bytes over the
/// difference of times: what one more byte costs, without the per-call and per-task costs (the
/// fork-join, the queries' scaling) that a 1 MiB call pays and a 512 MiB decode does not.
struct Ceilings {
  double in_l2 = 0, arithmetic = 0;
};

Ceilings ceilings(ThreadPool& pool) {
  constexpr int kLong = 256, kShort = 64, kL2Calls = 32;
  DecodeData& d = data();
  const int batch = std::min(kBatch, static_cast<int>(pool.size()));
  const KvView view = erase(ContiguousKv<half_t>{d.kptr.data(), d.vptr.data(), d.row, kHeadDim}, kKvHeads, kHeadDim);
  const auto seconds = [&](int context) {
    const std::vector<std::int32_t> lens(static_cast<std::size_t>(batch), context);
    AttentionParams p = d.params();
    p.batch = batch;
    p.seq_lens = lens.data();
    host_attention(p, view, pool);  // brings the KV into L2
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kL2Calls; ++i) host_attention(p, view, pool);
    benchmark::ClobberMemory();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const double t_long = seconds(kLong), t_short = seconds(kShort);
  const double bytes = 2.0 * batch * (kLong - kShort) * static_cast<double>(d.row) * sizeof(half_t) * kL2Calls;
  return {bytes / (t_long - t_short),
          measure_decode_arithmetic_samples(pool, kQHeads / kKvHeads, kArithmeticElements, 1).front()};
}

/// One decode rate `c` against the round's bandwidth and ceilings, on `suffix`'s threads.
void add_decode(bench::RoundSeries& rounds, const std::string& suffix, double c, double bw, const Ceilings& ce) {
  rounds.add("fraction_of_bandwidth" + suffix, c / bw);
  rounds.add("kv_bytes_per_s" + suffix, c);
  rounds.add("kernel_in_l2_bytes_per_s" + suffix, ce.in_l2);
  rounds.add("fraction_of_kernel_in_l2" + suffix, c / ce.in_l2);
  rounds.add("arithmetic_ceiling_bytes_per_s" + suffix, ce.arithmetic);
  rounds.add("fraction_of_roofline" + suffix, c / std::min(bw, ce.in_l2));
}

/// Side by side, against drift: this host's read bandwidth moves by 10-20 % within seconds (other
/// tenants of the VM's memory), so a ratio of two numbers taken seconds apart moves with it. Each
/// of kRounds rounds runs one bandwidth pass, then the contiguous decode and the paged decodes at
/// every block size of kSideBySideBlocks (issue 16's goal covers blocks of 16 and more), each
/// shuffled and in region placement, in a seeded random order, then another bandwidth pass, all
/// on the same threads, then the contiguous decode and a bandwidth pass on one thread, then the
/// ceilings (above) on both; a round's fraction is its decode rate over the mean of the bandwidth
/// passes just before and after it, and its roofline fraction the decode rate over the lower of
/// that bandwidth and the kernel's own rate in L2. Reported: the median round and the spread
/// (min, max) of each ratio.
constexpr std::array<int, 4> kSideBySideBlocks{16, 32, 64, 128};

void BM_DecodeSideBySide(benchmark::State& state) {
  constexpr int kRounds = 15;
  constexpr std::size_t kBlocks = kSideBySideBlocks.size();
  // View 0 contiguous, then paged shuffled at each block size, then paged in region placement.
  constexpr std::size_t kViews = 1 + 2 * kBlocks;
  DecodeData& d = data();
  std::vector<std::unique_ptr<PagedCopy>> paged;
  std::array<KvView, kViews> views{};
  views[0] = erase(ContiguousKv<half_t>{d.kptr.data(), d.vptr.data(), d.row, kHeadDim}, kKvHeads, kHeadDim);
  for (std::size_t i = 0; i < 2 * kBlocks; ++i) {
    paged.push_back(std::make_unique<PagedCopy>(kSideBySideBlocks[i % kBlocks],
                                                i < kBlocks ? Placement::shuffled : Placement::region));
    views[i + 1] = erase(paged.back()->view, kKvHeads, kHeadDim);
  }
  const AttentionParams p = d.params();
  const auto rate = [&](const KvView& view, ThreadPool& pool) {
    const auto t0 = std::chrono::steady_clock::now();
    host_attention(p, view, pool);
    benchmark::ClobberMemory();
    return d.kv_bytes() / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // One buffer per pool, touched once: a pass reads 1 GiB and allocates nothing.
  ReadBandwidthProbe probe_all(default_thread_pool(), std::size_t{1} << 30),
      probe_one(one_thread(), std::size_t{1} << 30);
  const auto bandwidth = [&](ThreadPool& pool) { return (&pool == &one_thread() ? probe_one : probe_all).best(1); };
  bench::RoundSeries rounds;
  std::mt19937_64 rng(11);
  for (auto _ : state) {
    ThreadPool& all = default_thread_pool();
    (void)rate(views[0], all);  // warm: the first call pays the threads' first touch of the chunk state
    double bw = bandwidth(all), bw_one = bandwidth(one_thread());
    for (int r = 0; r < kRounds; ++r) {
      // The views in a fresh order each round, so none always follows the bandwidth pass.
      std::array<std::size_t, kViews> order{};
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::shuffle(order.begin(), order.end(), rng);
      std::array<double, kViews> got{};
      for (const std::size_t i : order) got[i] = rate(views[i], all);
      const double bw_next = bandwidth(all);
      const double c_one = rate(views[0], one_thread());
      const double bw_one_next = bandwidth(one_thread());
      add_decode(rounds, "", got[0], (bw + bw_next) / 2, ceilings(all));
      add_decode(rounds, "_one_thread", c_one, (bw_one + bw_one_next) / 2, ceilings(one_thread()));
      for (std::size_t i = 0; i < 2 * kBlocks; ++i)
        rounds.add("paged" + std::to_string(kSideBySideBlocks[i % kBlocks]) + (i < kBlocks ? "" : "_region") +
                       "_over_contiguous",
                   got[i + 1] / got[0]);
      bw = bw_next;
      bw_one = bw_one_next;
    }
  }
  rounds.report(state);
  state.counters["rounds"] = static_cast<double>(rounds.series.at("kv_bytes_per_s").size());
}

/// Prefill: the last 256 tokens of 4 of the sequences arrive at once (causal, the first 3840 tokens
/// cached). Reported as attention FLOP/s (QK^T and PV, 2 FLOPs per multiply-add).
void BM_PrefillContiguous(benchmark::State& state) {
  DecodeData& d = data();
  constexpr int kSeqs = 4, kNew = 256;
  const KvView view = erase(ContiguousKv<half_t>{d.kptr.data(), d.vptr.data(), d.row, kHeadDim}, kKvHeads, kHeadDim);
  std::vector<float> q(static_cast<std::size_t>(kSeqs) * kNew * kQHeads * kHeadDim), out(q.size());
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (auto& x : q) x = uni(rng);
  std::vector<std::int32_t> indptr(kSeqs + 1);
  for (int s = 0; s <= kSeqs; ++s) indptr[s] = s * kNew;
  AttentionParams p = d.params();
  p.batch = kSeqs;
  p.q = q.data();
  p.out = out.data();
  p.q_indptr = indptr.data();
  double flops = 0;
  for (int i = 0; i < kNew; ++i) flops += 4.0 * kHeadDim * (kContext - kNew + i + 1) * kQHeads * kSeqs;
  for (auto _ : state) {
    host_attention(p, view);
    benchmark::ClobberMemory();
  }
  state.counters["flops_per_s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

/// The FMA peak: 512-bit FMAs per second on one core (12 independent accumulators, more than
/// latency x ports, so only the FMA ports limit it), and the KV rate it would allow a GQA-4 decode
/// if FMAs were all it did (64 vector FMAs per token and KV head, 512 bytes of fp16 K and V). The
/// fp16 conversions take the same ports, so BM_DecodeArithmeticCeiling (conversions and FMAs
/// together) is the lower, truer floor.
void BM_FmaPeakOneThread(benchmark::State& state) {
#if defined(__AVX512F__) && defined(__x86_64__)
  constexpr std::int64_t kLoops = 1 << 20, kFmasPerLoop = 12;
  const float one = 1.0f;
  for (auto _ : state) {
    std::int64_t n = kLoops;
    // Operands start at 0 and 1 (stale register contents could be denormal and take microcode
    // assists); zmm12 * zmm13 accumulates into zmm0..11, 12 independent chains.
    asm volatile(
        "vbroadcastss %[one], %%zmm12\n vbroadcastss %[one], %%zmm13\n"
        "vpxord %%zmm0, %%zmm0, %%zmm0\n vmovaps %%zmm0, %%zmm1\n vmovaps %%zmm0, %%zmm2\n"
        "vmovaps %%zmm0, %%zmm3\n vmovaps %%zmm0, %%zmm4\n vmovaps %%zmm0, %%zmm5\n vmovaps %%zmm0, %%zmm6\n"
        "vmovaps %%zmm0, %%zmm7\n vmovaps %%zmm0, %%zmm8\n vmovaps %%zmm0, %%zmm9\n vmovaps %%zmm0, %%zmm10\n"
        "vmovaps %%zmm0, %%zmm11\n"
        "1:\n"
        "vfmadd231ps %%zmm12, %%zmm13, %%zmm0\n vfmadd231ps %%zmm12, %%zmm13, %%zmm1\n"
        "vfmadd231ps %%zmm12, %%zmm13, %%zmm2\n vfmadd231ps %%zmm12, %%zmm13, %%zmm3\n"
        "vfmadd231ps %%zmm12, %%zmm13, %%zmm4\n vfmadd231ps %%zmm12, %%zmm13, %%zmm5\n"
        "vfmadd231ps %%zmm12, %%zmm13, %%zmm6\n vfmadd231ps %%zmm12, %%zmm13, %%zmm7\n"
        "vfmadd231ps %%zmm12, %%zmm13, %%zmm8\n vfmadd231ps %%zmm12, %%zmm13, %%zmm9\n"
        "vfmadd231ps %%zmm12, %%zmm13, %%zmm10\n vfmadd231ps %%zmm12, %%zmm13, %%zmm11\n"
        "dec %[n]\n jnz 1b\n"
        : [n] "+r"(n)
        : [one] "m"(one)
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
          "xmm13", "cc");
  }
  const double fmas = static_cast<double>(kLoops * kFmasPerLoop);
  state.counters["fma512_per_s"] = benchmark::Counter(fmas, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gqa4_decode_kv_bytes_per_s_ceiling"] =
      benchmark::Counter(fmas / 64 * 512, benchmark::Counter::kIsIterationInvariantRate);
#else
  state.SkipWithError("needs x86-64 with AVX-512");
  for (auto _ : state) {
  }
#endif
}

/// The contiguous decode with its KV resident in L2: one sequence of 256 tokens per thread (1 MiB of
/// K and V each), every thread (arg 0) or one (arg 1). Per call, so the fork-join and the
/// queries' scaling are in it (BM_DecodeSideBySide's kernel_in_l2 takes them out); the case to
/// profile the kernel's own instructions on (`perf record -e cpu-clock`, docs/kernels.md).
void BM_DecodeContiguousInL2(benchmark::State& state) {
  ThreadPool& pool = state.range(0) == 0 ? default_thread_pool() : one_thread();
  DecodeData& d = data();
  const int batch = std::min(kBatch, static_cast<int>(pool.size()));
  const std::vector<std::int32_t> lens(static_cast<std::size_t>(batch), 256);
  AttentionParams p = d.params();
  p.batch = batch;
  p.seq_lens = lens.data();
  const KvView view = erase(ContiguousKv<half_t>{d.kptr.data(), d.vptr.data(), d.row, kHeadDim}, kKvHeads, kHeadDim);
  for (auto _ : state) {
    host_attention(p, view, pool);
    benchmark::ClobberMemory();
  }
  const double bytes = 2.0 * batch * 256 * static_cast<double>(d.row) * sizeof(half_t);
  state.counters["kv_bytes_per_s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

/// The decode kernel's arithmetic alone (kernels/measure/host_throughput.hpp): the KV bytes/s
/// that its fp16 conversions and GQA-4 FMAs allow from L1, on every thread (arg 0) or one (arg 1).
/// Where this is below the read bandwidth, the decode is bound by arithmetic, not memory.
void BM_DecodeArithmeticCeiling(benchmark::State& state) {
  ThreadPool& pool = state.range(0) == 0 ? default_thread_pool() : one_thread();
  for (auto _ : state)
    state.counters["kv_bytes_per_s"] =
        measure_decode_arithmetic_samples(pool, kQHeads / kKvHeads, kArithmeticElements, 1).front();
}

BENCHMARK(BM_MemoryReadBandwidth)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_DecodeContiguousInL2)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_DecodeArithmeticCeiling)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);
BENCHMARK(BM_FmaPeakOneThread)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_DecodeContiguous)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_DecodeContiguousOneThread)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_DecodeSideBySide)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_PrefillContiguous)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_DecodePaged)
    ->RangeMultiplier(2)
    ->Range(1, 256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  g_bandwidth = measure_read_bandwidth(default_thread_pool());
  g_bandwidth_one_thread = measure_read_bandwidth(one_thread());
  benchmark::AddCustomContext("memory_read_bandwidth_bytes_per_s", std::to_string(g_bandwidth));
  benchmark::AddCustomContext("memory_read_bandwidth_one_thread_bytes_per_s", std::to_string(g_bandwidth_one_thread));
  // The best of 3 passes, like the bandwidth: the host's speed moves between them.
  const auto ceiling = [](ThreadPool& pool) {
    const std::vector<double> s = measure_decode_arithmetic_samples(pool, kQHeads / kKvHeads, kArithmeticElements, 3);
    return *std::max_element(s.begin(), s.end());
  };
  benchmark::AddCustomContext("decode_arithmetic_ceiling_bytes_per_s", std::to_string(ceiling(default_thread_pool())));
  benchmark::AddCustomContext("decode_arithmetic_ceiling_one_thread_bytes_per_s",
                              std::to_string(ceiling(one_thread())));
  benchmark::AddCustomContext("threads", std::to_string(default_thread_pool().size()));
  benchmark::AddCustomContext("geometry",
                              "llama-3-8b: 32 q / 8 kv heads, head_dim 128, fp16 KV, batch 32, context 4096");
  benchmark::AddCustomContext("device", "host");
  kvlab::bench::add_host_context();
  benchmark::AddCustomContext("kvlab_git_revision", KVLAB_GIT_REVISION);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
