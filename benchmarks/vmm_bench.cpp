// vmm backend costs on the host (POSIX driver), each measured on its own:
//  * BM_PosixMapUnmap/<page KiB>/<touch>: map (map + set_access) and unmap of 16 MiB in pages of
//    4 KiB .. 2 MiB; counters map_us / unmap_us per page and map_GBps (bytes mapped per second of
//    map time). touch = 1 also writes one byte per 4 KiB after mapping (the host's first-touch
//    page faults, which a GPU mapping does not have: cuMemMap installs the page tables).
//  * BM_DecodeAttention/<backend>/<threads>: one decode step of one layer (host_attention) over the same
//    lengths through the contiguous backend and through vmm at several page sizes and layouts,
//    llama-3-8b heads (32 q / 8 kv / 128) with 4 layers, batch 8 x 2048 tokens. Compare the
//    rows side by side: same kernel, same strides (per_layer), only the addresses differ.
//    threads = 1 is the robust comparison on a busy machine; 0 uses every core.
//  * BM_StepLatency/<page KiB>/<overlap>: decode steps of 16 staggered sequences that keep
//    crossing page boundaries: prefetch (overlap) -> attention over every layer (on one thread,
//    standing in for the GPU) -> wait -> grow; counters split the step into attention, wait, grow.
//    Counter critical_maps_per_step shows what the step had to map itself.
//
//   build/release/bench/kvlab_bench_vmm --benchmark_out=vmm.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include "benchmarks/bench_main.hpp"

#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "serving/replay/backend_factory.hpp"
#include "kernels/attention.hpp"
#include "kernels/batch_attention_params.hpp"
#include "kernels/kv_view.hpp"
#include "vmm/page_pool.hpp"
#include "vmm/posix_vm_driver.hpp"

namespace {

using namespace kvlab;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kKiB = 1024, kMiB = 1024 * kKiB;

void BM_PosixMapUnmap(benchmark::State& state) {
  const std::size_t page = static_cast<std::size_t>(state.range(0)) * kKiB;
  const bool touch = state.range(1) != 0;
  const std::size_t total = 16 * kMiB;
  const std::int64_t n = static_cast<std::int64_t>(total / page);
  PosixVmDriver driver(total);
  PhysicalPagePool pool(&driver, page, n);
  void* base = driver.reserve(total, page);
  auto* p = static_cast<std::byte*>(base);
  for (std::int64_t i = 0; i < n; ++i) {  // first touch of the physical pages, outside the timing
    (void)pool.allocate();
    if (!driver.map(p + i * page, page, pool.handle(static_cast<PageId>(i)))) state.SkipWithError("map failed");
    driver.set_access(p + i * page, page);
    for (std::size_t b = 0; b < page; b += 4 * kKiB) p[i * page + b] = std::byte{1};
    driver.unmap(p + i * page, page);
  }
  double map_s = 0, unmap_s = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (std::int64_t i = 0; i < n; ++i) {
      if (!driver.map(p + i * page, page, pool.handle(static_cast<PageId>(i)))) state.SkipWithError("map failed");
      driver.set_access(p + i * page, page);
    }
    if (touch)
      for (std::size_t b = 0; b < total; b += 4 * kKiB) p[b] = std::byte{2};
    const auto t1 = Clock::now();
    for (std::int64_t i = 0; i < n; ++i) driver.unmap(p + i * page, page);
    const auto t2 = Clock::now();
    map_s += std::chrono::duration<double>(t1 - t0).count();
    unmap_s += std::chrono::duration<double>(t2 - t1).count();
  }
  const double maps = static_cast<double>(state.iterations()) * static_cast<double>(n);
  state.counters["map_us"] = 1e6 * map_s / maps;
  state.counters["unmap_us"] = 1e6 * unmap_s / maps;
  state.counters["map_unmap_us"] = 1e6 * (map_s + unmap_s) / maps;
  state.counters["map_GBps"] = maps * static_cast<double>(page) / map_s / 1e9;
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(total));
  driver.free_reservation(base, total);
}
BENCHMARK(BM_PosixMapUnmap)
    ->ArgNames({"page_KiB", "touch"})
    ->ArgsProduct({{4, 64, 256, 2048}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

// --- decode attention through vmm vs contiguous --------------------------------------------------

ModelGeometry bench_model() {
  ModelGeometry m = model_preset("llama-3-8b");
  m.name = "llama-3-8b-4l";
  m.num_layers = 4;  // the heads of llama-3-8b; fewer layers keep the host KV at 256 MiB
  return m;
}

constexpr int kBatch = 8;
constexpr std::int64_t kLen = 2048;

/// Backends by factory name; the vmm capacity leaves every slot a partly filled page per tensor.
/// (The factory's vmm backends have 256 slots and deferred reclamation: neither changes the
/// decode kernel's view, which is what BM_DecodeAttention measures.)
struct Case {
  const char* name;
  std::size_t page;  // vmm page bytes (0: not vmm)
};
constexpr Case kCases[] = {
    {"contiguous-max", 0}, {"vmm-64k", 64 * kKiB}, {"vmm-2m", 2 * kMiB}, {"vmm-64k-mega", 64 * kKiB}};

std::unique_ptr<KvBackend> make(const Case& c, std::int64_t max_len, int max_batch) {
  const ModelGeometry m = bench_model();
  const std::size_t need =
      static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(max_len) * m.kv_bytes_per_token();
  BackendOptions o;
  o.model = m;
  o.max_seq_len = max_len;
  o.memory = &host_memory_resource();
  o.capacity_bytes =
      c.page == 0 ? need + kMiB
                  : need + 2 * static_cast<std::size_t>(m.num_layers) * c.page * static_cast<std::size_t>(max_batch);
  return make_backend(c.name, o);
}

/// A named counter the backend reports (KvBackend::counters()); 0 when it has none by that name.
double counter(const KvBackend& b, std::string_view name) {
  for (const auto& [n, v] : b.counters())
    if (n == name) return v;
  return 0;
}

void fill(KvBackend& b, std::span<const SeqId> ids, std::int64_t len) {
  b.prepare_batch(ids);
  const ModelGeometry& m = b.model();
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (int layer = 0; layer < m.num_layers; ++layer) {
    const auto v = as_contiguous<half_t>(b.layer_view(layer));
    for (int s = 0; s < static_cast<int>(ids.size()); ++s)
      for (std::int64_t t = 0; t < len; ++t)
        for (int h = 0; h < m.num_kv_heads; ++h)
          for (int d = 0; d < m.head_dim; ++d) {
            v.k(s, t, h)[d] = from_float<half_t>(uni(rng));
            v.v(s, t, h)[d] = from_float<half_t>(uni(rng));
          }
  }
}

AttentionParams decode_params(const ModelGeometry& m, int batch, const PreparedBatch& pb, std::vector<float>& q,
                              std::vector<float>& out) {
  q.assign(static_cast<std::size_t>(batch) * m.num_q_heads * m.head_dim, 0.5f);
  out.assign(q.size(), 0.f);
  return batch_attention_params(m, pb, q.data(), out.data());
}

void BM_DecodeAttention(benchmark::State& state) {
  const Case& c = kCases[state.range(0)];
  state.SetLabel(c.name);
  auto b = make(c, kLen, kBatch);
  std::vector<SeqId> ids;
  for (SeqId id = 0; id < kBatch; ++id) {
    b->admit(id, {kLen, kLen}, kLen);
    ids.push_back(id);
  }
  fill(*b, ids, kLen);
  const PreparedBatch pb = b->prepare_batch(ids);
  std::vector<float> q, out;
  const AttentionParams p = decode_params(b->model(), kBatch, pb, q, out);
  const KvView view = b->layer_view(1);
  ThreadPool pool(static_cast<unsigned>(state.range(1)));
  for (auto _ : state) {
    host_attention(p, view, pool);
    benchmark::DoNotOptimize(out.data());
  }
  const double kv_bytes =
      static_cast<double>(kBatch * kLen) * static_cast<double>(b->model().kv_bytes_per_token_per_layer());
  state.counters["KV_GBps"] = benchmark::Counter(kv_bytes, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeAttention)
    ->ArgNames({"backend", "threads"})
    ->ArgsProduct({{0, 1, 2, 3}, {1, 0}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// --- per-step latency with and without overlap --------------------------------------------------

void BM_StepLatency(benchmark::State& state) {
  const std::size_t page = static_cast<std::size_t>(state.range(0)) * kKiB;
  const bool overlap = state.range(1) != 0;
  constexpr int kSeqs = 16;
  constexpr std::int64_t kMax = 4096;
  const ModelGeometry m = bench_model();
  BackendOptions o;
  o.model = m;
  o.max_seq_len = kMax;
  o.capacity_bytes = static_cast<std::size_t>(kSeqs) * kMax * m.kv_bytes_per_token();
  o.memory = &host_memory_resource();
  // Deferred reclamation off: every step's unmaps and maps happen, as in the measurement before.
  const std::string name = "vmm-" + std::to_string(page / kKiB) + "k-nodefer" + (overlap ? "-overlap" : "");
  const auto backend = make_backend(name, o);
  KvBackend& b = *backend;
  std::vector<SeqId> ids;
  for (SeqId id = 0; id < kSeqs; ++id) {
    const std::int64_t len = 256 + 37 * id;  // staggered: boundaries are crossed on different steps
    b.admit(id, {len, kMax}, len);
    ids.push_back(id);
  }
  fill(b, ids, 1);
  std::vector<float> q, out;
  std::int64_t steps = 0;
  const double maps0 = counter(b, "critical_maps"), bg_maps0 = counter(b, "background_maps");
  const double map_s0 = counter(b, "critical_map_s");
  double attention_s = 0, wait_s = 0, grow_s = 0;
  // The attention runs on one thread, standing in for the GPU; the mapper gets the other core.
  ThreadPool pool(1);
  for (auto _ : state) {
    if (b.length(0) + 1 >= kMax - 64) {  // start over (rare): release and re-admit
      state.PauseTiming();
      for (SeqId id : ids) b.release(id);
      for (SeqId id : ids) b.admit(id, {256 + 37 * id, kMax}, 256 + 37 * id);
      state.ResumeTiming();
    }
    const auto t0 = Clock::now();
    b.prefetch(ids);  // returns at once; does nothing without overlap
    const PreparedBatch pb = b.prepare_batch(ids);
    const AttentionParams p = decode_params(m, kSeqs, pb, q, out);
    for (int layer = 0; layer < m.num_layers; ++layer) host_attention(p, b.layer_view(layer), pool);
    const auto t1 = Clock::now();
    b.begin_step();  // waits for the prefetched pages
    const auto t2 = Clock::now();
    for (SeqId id : ids) b.grow(id, 1);
    const auto t3 = Clock::now();
    attention_s += std::chrono::duration<double>(t1 - t0).count();
    wait_s += std::chrono::duration<double>(t2 - t1).count();
    grow_s += std::chrono::duration<double>(t3 - t2).count();
    ++steps;
  }
  const double n = static_cast<double>(std::max<std::int64_t>(steps, 1));
  state.counters["critical_maps_per_step"] = (counter(b, "critical_maps") - maps0) / n;
  state.counters["background_maps_per_step"] = (counter(b, "background_maps") - bg_maps0) / n;
  state.counters["critical_map_us_per_step"] = 1e6 * (counter(b, "critical_map_s") - map_s0) / n;
  state.counters["attention_us"] = 1e6 * attention_s / n;
  state.counters["wait_us"] = 1e6 * wait_s / n;
  state.counters["grow_us"] = 1e6 * grow_s / n;
}
BENCHMARK(BM_StepLatency)
    ->ArgNames({"page_KiB", "overlap"})
    ->ArgsProduct({{4, 64}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

KVLAB_BENCHMARK_MAIN()
