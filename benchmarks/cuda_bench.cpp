// GPU microbenchmarks (run by tests/gpu/run.sh on a machine with an NVIDIA GPU; every benchmark
// reports "no usable GPU" and skips elsewhere):
//  * device memory bandwidth (cudaMemcpy device to device), the yardstick for the kernels;
//  * attention at llama-3-8b geometry (fp16 KV) in the three backends' memories side by side —
//    cudaMalloc read contiguously, shuffled blocks of 16 and 256 tokens through the paged view,
//    VMM-mapped 2 MiB pages read contiguously — for decode across batch 8/32 and context 1K..16K,
//    and prefill of 128 tokens: KV bytes/s, query tokens/s and the fraction of that bandwidth;
//  * vmm: cuMemMap + cuMemSetAccess and cuMemUnmap per page, and mapping bandwidth, for 64 KiB
//    and 2 MiB pages (vAttention: ~40 us per map and 7.6 GB/s with 64 KiB pages).
// Timed with CUDA events around the work; Google Benchmark's manual time.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/host_context.hpp"
#include "alloc/cuda/cuda_runtime.hpp"
#include "alloc/cuda/cuda_driver.hpp"
#include "kernels/attention.hpp"
#include "kernels/cuda/cuda_attention.hpp"
#include "vmm/cuda_vm_driver.hpp"

namespace {

using namespace kvlab;

constexpr int kBatch = 32, kContext = 4096, kQHeads = 32, kKvHeads = 8, kHeadDim = 128;
double g_bandwidth = 0;

template <class T>
T* device_alloc(std::size_t n) {
  void* p = nullptr;
  if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error("cudaMalloc of " + std::to_string(n * sizeof(T)) + " bytes failed");
  }
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
  double seconds = 0;
  for (auto _ : state) {
    const double t = timed([&] { cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice); });
    state.SetIterationTime(t);
    seconds += t;
  }
  // A copy reads and writes every byte. The decode benchmarks (registered after this one, so run
  // after it) divide by this rate: fraction_of_bandwidth.
  state.counters["bytes_per_s"] = benchmark::Counter(2.0 * bytes, benchmark::Counter::kIsIterationInvariantRate);
  if (seconds > 0) g_bandwidth = 2.0 * static_cast<double>(bytes) * static_cast<double>(state.iterations()) / seconds;
  cudaFree(src);
  cudaFree(dst);
}

/// One layer's KV of `batch` sequences of `context` tokens (fp16, llama-3-8b heads) on the GPU,
/// in one of three memories read through the view its backend hands out: cudaMalloc'd and read
/// contiguously (contiguous backend), the same bytes as shuffled blocks of `block` tokens (paged),
/// or VMM-mapped 2 MiB pages read contiguously (vmm: cuMemCreate + cuMemMap through CudaVmDriver).
class DeviceKv {
 public:
  enum class Memory { contiguous, paged, vmm };
  DeviceKv(Memory memory, int batch, int context, int block) : memory_(memory) {
    try {
      build(batch, context, block);
    } catch (...) {
      release_all();  // a throwing constructor runs no destructor
      throw;
    }
  }
  ~DeviceKv() { release_all(); }
  DeviceKv(const DeviceKv&) = delete;
  DeviceKv& operator=(const DeviceKv&) = delete;

  [[nodiscard]] const KvView& view() const { return view_; }
  [[nodiscard]] double kv_bytes() const { return 2.0 * static_cast<double>(elems_) * sizeof(half_t); }
  template <class T>
  T* upload(const std::vector<T>& host) {
    T* d = alloc<T>(host.size());
    cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
  }

 private:
  void build(int batch, int context, int block) {
    const Memory memory = memory_;
    const std::int64_t row = static_cast<std::int64_t>(kKvHeads) * kHeadDim;
    elems_ = static_cast<std::size_t>(batch) * context * row;
    if (memory == Memory::vmm) {
      driver_ = std::make_unique<CudaVmDriver>(cuda_driver());
      const std::size_t g = driver_->granularity();
      bytes_ = (elems_ * sizeof(half_t) + g - 1) / g * g;
      k_ = static_cast<half_t*>(map_pages());
      v_ = static_cast<half_t*>(map_pages());
    } else {
      k_ = alloc<half_t>(elems_);
      v_ = alloc<half_t>(elems_);
    }
    std::vector<half_t> host(elems_);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    for (auto& x : host) x = from_float<half_t>(uni(rng));
    cudaMemcpy(k_, host.data(), elems_ * sizeof(half_t), cudaMemcpyHostToDevice);
    cudaMemcpy(v_, host.data(), elems_ * sizeof(half_t), cudaMemcpyHostToDevice);
    if (memory == Memory::paged) {
      const int per_seq = (context + block - 1) / block;
      std::vector<std::int32_t> table(static_cast<std::size_t>(batch) * per_seq);
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), std::mt19937(3));
      auto* dtable = upload(table);
      view_ = erase(PagedKv<half_t>{k_, v_, dtable, per_seq, block, block * row, row, kHeadDim}, kKvHeads, kHeadDim);
    } else {
      std::vector<half_t*> kb, vb;
      for (int s = 0; s < batch; ++s) {
        kb.push_back(k_ + static_cast<std::size_t>(s) * context * row);
        vb.push_back(v_ + static_cast<std::size_t>(s) * context * row);
      }
      view_ = erase(ContiguousKv<half_t>{upload(kb), upload(vb), row, kHeadDim}, kKvHeads, kHeadDim);
      // The common-base form FlashInfer reads (alloc/core/kv_view.hpp): sequence s is s x context rows
      // after k_ and v_.
      std::vector<std::int32_t> index;
      for (int s = 0; s < batch; ++s) index.push_back(s * context);
      view_.k_base = k_;
      view_.v_base = v_;
      view_.base_granule = row;
      view_.seq_base_index = upload(index);
    }
  }
  void release_all() noexcept {
    cudaDeviceSynchronize();
    for (void* ptr : frees_) cudaFree(ptr);
    frees_.clear();
    if (!driver_) return;
    try {
      for (void* va : mapped_) driver_->unmap(va, driver_->granularity());
      for (const PhysHandle h : handles_) driver_->release(h);
      for (void* base : reservations_) driver_->free_reservation(base, bytes_);
    } catch (...) {  // a failing driver at teardown: nothing more can be given back
    }
    mapped_.clear();
    handles_.clear();
    reservations_.clear();
  }
  template <class T>
  T* alloc(std::size_t n) {
    T* p = device_alloc<T>(n);
    frees_.push_back(p);
    return p;
  }
  void* map_pages() {
    const std::size_t g = driver_->granularity();
    void* base = driver_->reserve(bytes_, g);
    reservations_.push_back(base);
    for (std::size_t off = 0; off < bytes_; off += g) {
      const auto h = driver_->create(g);
      if (!h) throw std::runtime_error("cuMemCreate: out of device memory");
      handles_.push_back(*h);
      void* va = static_cast<char*>(base) + off;
      if (!driver_->map(va, g, *h)) throw std::runtime_error("cuMemMap: out of device memory");
      mapped_.push_back(va);
      driver_->set_access(va, g);
    }
    return base;
  }

  Memory memory_;
  std::size_t elems_ = 0, bytes_ = 0;
  half_t *k_ = nullptr, *v_ = nullptr;
  KvView view_{};
  std::vector<void*> frees_, reservations_;
  std::unique_ptr<CudaVmDriver> driver_;
  std::vector<void*> mapped_;
  std::vector<PhysHandle> handles_;
};

/// Attention at llama-3-8b geometry: args (memory: 0 contiguous, 1 paged, 2 vmm; block; batch;
/// context; query tokens per sequence: 1 decodes, more prefills after the context; kernel: 0
/// kvlab's, 1 FlashInfer's). Reports KV bytes/s, query tokens/s and, after
/// BM_DeviceCopyBandwidth, the fraction of its bandwidth.
void BM_CudaAttention(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const auto memory = static_cast<DeviceKv::Memory>(state.range(0));
  const int block = static_cast<int>(state.range(1)), batch = static_cast<int>(state.range(2));
  const int context = static_cast<int>(state.range(3)), q_len = static_cast<int>(state.range(4));
  const bool flashinfer = state.range(5) == 1;
  if (flashinfer && !flashinfer_built()) {
    state.SkipWithError("FlashInfer is not built into this binary");
    return;
  }
  std::optional<DeviceKv> kv;
  try {
    kv.emplace(memory, batch, context, block);
  } catch (const std::exception& e) {  // out of device memory at this shape: a skip, not an abort
    state.SkipWithError(e.what());
    for (auto _ : state) {
    }
    return;
  }
  std::vector<float> q(static_cast<std::size_t>(batch) * q_len * kQHeads * kHeadDim, 0.5f);
  std::vector<std::int32_t> lens(static_cast<std::size_t>(batch), context);
  std::vector<std::int32_t> indptr(static_cast<std::size_t>(batch) + 1);
  for (int s = 0; s <= batch; ++s) indptr[static_cast<std::size_t>(s)] = s * q_len;
  AttentionParams p;
  p.batch = batch;
  p.num_q_heads = kQHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kHeadDim;
  p.scale = 1.f / std::sqrt(float(kHeadDim));
  p.q = kv->upload(q);
  p.out = kv->upload(q);
  p.seq_lens = kv->upload(lens);  // prefill: the last q_len of the context's tokens are the new ones
  p.q_indptr = q_len > 1 ? kv->upload(indptr) : nullptr;
  CudaAttentionOptions o;
  o.num_partitions = 0;  // sized to the GPU (kernels/split_kv.hpp), as kvlab's runs launch it
  o.max_q_len = q_len;
  o.total_q = batch * q_len;
  p.host_seq_lens = lens.data();
  p.host_q_indptr = q_len > 1 ? indptr.data() : nullptr;
  const auto run = [&] {
    if (flashinfer)
      attention(Device::cuda, p, kv->view(), GpuKernel::flashinfer);
    else
      cuda_attention(p, kv->view(), o);
  };
  run();  // warm up (FlashInfer: and plan)
  cudaDeviceSynchronize();
  for (auto _ : state) state.SetIterationTime(timed(run));
  state.counters["kv_bytes_per_s"] = benchmark::Counter(kv->kv_bytes(), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["query_tokens_per_s"] =
      benchmark::Counter(static_cast<double>(batch) * q_len, benchmark::Counter::kIsIterationInvariantRate);
  if (q_len > 1)  // QK^T and PV: 2 multiply-adds per (query, key, head, dim)
    state.counters["flops_per_s"] = benchmark::Counter(4.0 * batch * q_len * context * kQHeads * kHeadDim,
                                                       benchmark::Counter::kIsIterationInvariantRate);
  if (!flashinfer) state.counters["split_kv_partitions"] = cuda_attention_partitions(p, kv->view(), o);
  if (g_bandwidth > 0)
    state.counters["fraction_of_bandwidth"] =
        benchmark::Counter(kv->kv_bytes() / g_bandwidth, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(flashinfer ? "flashinfer " : "kvlab ") +
                 (memory == DeviceKv::Memory::paged ? "paged-" + std::to_string(block)
                  : memory == DeviceKv::Memory::vmm ? "vmm-2m"
                                                    : "contiguous"));
}

/// Side by side in one run: the three memories at each shape (decode across batch and context, the
/// paged view at block sizes 16 and 256; prefill of 128 new tokens).
void attention_shapes(benchmark::internal::Benchmark* b) {
  // FlashInfer's first: the issue-27 goals (batch 32 x 4096, 8 x 16384, prefill 128 x 16384).
  for (const int kernel : {1, 0}) {
    for (const auto& [batch, context] : {std::pair{32, 4096}, std::pair{8, 16384}, std::pair{8, 1024}}) {
      b->Args({0, 0, batch, context, 1, kernel});
      b->Args({1, 16, batch, context, 1, kernel});
      b->Args({1, 256, batch, context, 1, kernel});
      b->Args({2, 0, batch, context, 1, kernel});
    }
    for (const int memory : {0, 1, 2}) b->Args({memory, memory == 1 ? 16 : 0, 8, 16384, 128, kernel});
  }
  b->ArgNames({"memory", "block", "batch", "context", "q_len", "kernel"});
}

/// Map + set_access and synchronize + unmap of 64 pages through CudaVmDriver, per page. A driver
/// error is the benchmark's error (SkipWithError naming the call), never an escaping exception: on
/// the H200 one terminated the process and cut the JSON short.
void BM_CudaMapUnmap(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const std::size_t page = static_cast<std::size_t>(state.range(0));
  const int pages = 64;
  std::optional<CudaVmDriver> driver;
  void* base = nullptr;
  std::vector<PhysHandle> handles;
  double map_s = 0, unmap_s = 0;
  try {
    driver.emplace(cuda_driver());
    if (page % driver->granularity() != 0) {
      state.SkipWithError("page size below the device's granularity");
      return;
    }
    base = driver->reserve(page * pages, page);
    for (int i = 0; i < pages; ++i) {
      const auto h = driver->create(page);
      if (!h) throw std::runtime_error("cuMemCreate: out of device memory");
      handles.push_back(*h);
    }
    for (auto _ : state) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < pages; ++i) {
        void* va = static_cast<char*>(base) + static_cast<std::size_t>(i) * page;
        if (!driver->map(va, page, handles[static_cast<std::size_t>(i)]))
          throw std::runtime_error("cuMemMap: out of device memory");
        driver->set_access(va, page);
      }
      auto t1 = std::chrono::steady_clock::now();
      driver->synchronize();
      for (int i = 0; i < pages; ++i)
        driver->unmap(static_cast<char*>(base) + static_cast<std::size_t>(i) * page, page);
      auto t2 = std::chrono::steady_clock::now();
      map_s += std::chrono::duration<double>(t1 - t0).count();
      unmap_s += std::chrono::duration<double>(t2 - t1).count();
      state.SetIterationTime(std::chrono::duration<double>(t2 - t0).count());
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  try {  // give back whatever was taken (after an error some pages may still be mapped: leaked, said above)
    for (PhysHandle h : handles) driver->release(h);
    if (base != nullptr) driver->free_reservation(base, page * pages);
  } catch (const std::exception& e) {
    if (!state.error_occurred()) state.SkipWithError(e.what());
  }
  if (state.error_occurred() || state.iterations() == 0) return;
  const double n = static_cast<double>(state.iterations()) * pages;
  state.counters["map_us_per_page"] = map_s / n * 1e6;
  state.counters["unmap_us_per_page"] = unmap_s / n * 1e6;
  state.counters["map_bandwidth_bytes_per_s"] = static_cast<double>(page) * n / map_s;
}

BENCHMARK(BM_DeviceCopyBandwidth)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);
BENCHMARK(BM_CudaAttention)->Apply(attention_shapes)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CudaMapUnmap)->Arg(64 << 10)->Arg(2 << 20)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("kvlab_git_revision", KVLAB_GIT_REVISION);
  kvlab::bench::add_host_context();
  benchmark::AddCustomContext("device",
                              cuda_status().available ? cuda_status().device_name : "none: " + cuda_status().message);
  if (cuda_status().available) {  // the yardstick: device-to-device copy bandwidth (read + write)
    const std::size_t bytes = std::size_t{1} << 30;
    void *a = nullptr, *b = nullptr;
    cudaMalloc(&a, bytes);
    cudaMalloc(&b, bytes);
    double best = 0;
    for (int i = 0; i < 5; ++i)
      best = std::max(best, 2.0 * bytes / timed([&] { cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice); }));
    g_bandwidth = best;
    cudaFree(a);
    cudaFree(b);
    benchmark::AddCustomContext("device_copy_bandwidth_bytes_per_s", std::to_string(g_bandwidth));
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
