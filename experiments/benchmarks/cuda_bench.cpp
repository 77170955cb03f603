// GPU microbenchmarks (run by tests/gpu/run.sh on a machine with an NVIDIA GPU; every benchmark
// reports "no usable GPU" and skips elsewhere):
//  * device memory bandwidth (cudaMemcpy device to device), the yardstick for the kernels;
//  * decode attention at llama-3-8b geometry (fp16, batch 32, context 4096) through the contiguous
//    and the paged view (block sizes 16 and 256), as KV bytes/s and as a fraction of that bandwidth;
//  * vmm: cuMemMap + cuMemSetAccess and cuMemUnmap per page, and mapping bandwidth, for 64 KiB
//    and 2 MiB pages (vAttention: ~40 us per map and 7.6 GB/s with 64 KiB pages).
// Timed with CUDA events around the work; Google Benchmark's manual time.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "alloc/cuda_runtime.hpp"
#include "alloc/cuda_driver.hpp"
#include "kernels/cuda/cuda_attention.hpp"
#include "vmm/cuda_vm_driver.hpp"

namespace {

using namespace kvlab;

constexpr int kBatch = 32, kContext = 4096, kQHeads = 32, kKvHeads = 8, kHeadDim = 128;
double g_bandwidth = 0;

template <class T>
T* device_alloc(std::size_t n) {
  void* p = nullptr;
  cudaMalloc(&p, n * sizeof(T));
  return static_cast<T*>(p);
}

bool skip_without_gpu(benchmark::State& state) {
  if (cuda_status().available) return false;
  state.SkipWithError(("no usable GPU: " + cuda_status().message).c_str());
  for (auto _ : state) {
  }
  return true;
}

/// Seconds of `fn` measured with CUDA events (fn enqueues work on the default stream).
template <class F>
double timed(F&& fn) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  fn();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / 1e3;
}

void BM_DeviceCopyBandwidth(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const std::size_t bytes = std::size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  cudaMalloc(&src, bytes);
  cudaMalloc(&dst, bytes);
  for (auto _ : state) state.SetIterationTime(timed([&] { cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice); }));
  // A copy reads and writes every byte.
  state.counters["bytes_per_s"] = benchmark::Counter(2.0 * bytes, benchmark::Counter::kIsIterationInvariantRate);
  cudaFree(src);
  cudaFree(dst);
}

void BM_CudaDecode(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const int block = static_cast<int>(state.range(0));  // 0: contiguous view
  const std::int64_t row = static_cast<std::int64_t>(kKvHeads) * kHeadDim;
  const std::size_t elems = static_cast<std::size_t>(kBatch) * kContext * row;
  std::vector<half_t> host(elems);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (auto& x : host) x = from_float<half_t>(uni(rng));
  half_t* k = device_alloc<half_t>(elems);
  half_t* v = device_alloc<half_t>(elems);
  cudaMemcpy(k, host.data(), elems * sizeof(half_t), cudaMemcpyHostToDevice);
  cudaMemcpy(v, host.data(), elems * sizeof(half_t), cudaMemcpyHostToDevice);
  std::vector<float> q(static_cast<std::size_t>(kBatch) * kQHeads * kHeadDim, 0.5f);
  float* dq = device_alloc<float>(q.size());
  float* dout = device_alloc<float>(q.size());
  cudaMemcpy(dq, q.data(), q.size() * sizeof(float), cudaMemcpyHostToDevice);
  std::vector<std::int32_t> lens(kBatch, kContext);
  std::int32_t* dlens = device_alloc<std::int32_t>(lens.size());
  cudaMemcpy(dlens, lens.data(), lens.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice);
  // Contiguous: per-sequence bases. Paged: the same bytes read as blocks in a shuffled order.
  std::vector<half_t*> kb, vb;
  for (int s = 0; s < kBatch; ++s) {
    kb.push_back(k + static_cast<std::size_t>(s) * kContext * row);
    vb.push_back(v + static_cast<std::size_t>(s) * kContext * row);
  }
  half_t** dkb = device_alloc<half_t*>(kb.size());
  half_t** dvb = device_alloc<half_t*>(vb.size());
  cudaMemcpy(dkb, kb.data(), kb.size() * sizeof(half_t*), cudaMemcpyHostToDevice);
  cudaMemcpy(dvb, vb.data(), vb.size() * sizeof(half_t*), cudaMemcpyHostToDevice);
  const int per_seq = block ? kContext / block : 1;
  std::vector<std::int32_t> table(static_cast<std::size_t>(kBatch) * per_seq);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(3));
  std::int32_t* dtable = device_alloc<std::int32_t>(table.size());
  cudaMemcpy(dtable, table.data(), table.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice);
  const KvView view = block ? erase(PagedKv<half_t>{k, v, dtable, per_seq, block, block * row, row, kHeadDim}, kKvHeads, kHeadDim)
                            : erase(ContiguousKv<half_t>{dkb, dvb, row, kHeadDim}, kKvHeads, kHeadDim);
  AttentionParams p;
  p.batch = kBatch;
  p.num_q_heads = kQHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kHeadDim;
  p.scale = 1.f / std::sqrt(float(kHeadDim));
  p.q = dq;
  p.out = dout;
  p.seq_lens = dlens;
  cuda_attention(p, view, 4);
  cudaDeviceSynchronize();
  for (auto _ : state) state.SetIterationTime(timed([&] { cuda_attention(p, view, 4); }));
  const double kv_bytes = 2.0 * static_cast<double>(elems) * sizeof(half_t);
  state.counters["kv_bytes_per_s"] = benchmark::Counter(kv_bytes, benchmark::Counter::kIsIterationInvariantRate);
  if (g_bandwidth > 0)
    state.counters["fraction_of_bandwidth"] =
        benchmark::Counter(kv_bytes / g_bandwidth, benchmark::Counter::kIsIterationInvariantRate);
  for (void* ptr : {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(dq), static_cast<void*>(dout),
                    static_cast<void*>(dlens), static_cast<void*>(dkb), static_cast<void*>(dvb), static_cast<void*>(dtable)})
    cudaFree(ptr);
}

void BM_CudaMapUnmap(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const std::size_t page = static_cast<std::size_t>(state.range(0));
  const int pages = 64;
  CudaVmDriver driver(cuda_driver());
  if (page % driver.granularity() != 0) {
    state.SkipWithError("page size below the device's granularity");
    return;
  }
  void* base = driver.reserve(page * pages, page);
  std::vector<PhysHandle> handles;
  for (int i = 0; i < pages; ++i) handles.push_back(*driver.create(page));
  double map_s = 0, unmap_s = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < pages; ++i) {
      void* va = static_cast<char*>(base) + static_cast<std::size_t>(i) * page;
      (void)driver.map(va, page, handles[static_cast<std::size_t>(i)]);
      driver.set_access(va, page);
    }
    auto t1 = std::chrono::steady_clock::now();
    driver.synchronize();
    for (int i = 0; i < pages; ++i) driver.unmap(static_cast<char*>(base) + static_cast<std::size_t>(i) * page, page);
    auto t2 = std::chrono::steady_clock::now();
    map_s += std::chrono::duration<double>(t1 - t0).count();
    unmap_s += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(std::chrono::duration<double>(t2 - t0).count());
  }
  const double n = static_cast<double>(state.iterations()) * pages;
  state.counters["map_us_per_page"] = map_s / n * 1e6;
  state.counters["unmap_us_per_page"] = unmap_s / n * 1e6;
  state.counters["map_bandwidth_bytes_per_s"] = static_cast<double>(page) * n / map_s;
  for (PhysHandle h : handles) driver.release(h);
  driver.free_reservation(base, page * pages);
}

BENCHMARK(BM_DeviceCopyBandwidth)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);
BENCHMARK(BM_CudaDecode)->Arg(0)->Arg(16)->Arg(256)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_CudaMapUnmap)->Arg(64 << 10)->Arg(2 << 20)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("kvlab_git_revision", KVLAB_GIT_REVISION);
  benchmark::AddCustomContext("device", cuda_status().available ? cuda_status().device_name : "none: " + cuda_status().message);
  if (cuda_status().available) {  // the yardstick: device-to-device copy bandwidth (read + write)
    const std::size_t bytes = std::size_t{1} << 30;
    void *a = nullptr, *b = nullptr;
    cudaMalloc(&a, bytes);
    cudaMalloc(&b, bytes);
    double best = 0;
    for (int i = 0; i < 5; ++i) best = std::max(best, 2.0 * bytes / timed([&] { cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice); }));
    g_bandwidth = best;
    cudaFree(a);
    cudaFree(b);
    benchmark::AddCustomContext("device_copy_bandwidth_bytes_per_s", std::to_string(g_bandwidth));
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
