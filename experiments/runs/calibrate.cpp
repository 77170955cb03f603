#include "experiments/runs/calibrate.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <thread>

#include <fmt/format.h>

#include "alloc/transfer/copy.hpp"
#include "alloc/cuda/cuda_runtime.hpp"
#include "alloc/transfer/staged_arrays.hpp"
#include "alloc/core/error.hpp"
#include "alloc/core/model_geometry.hpp"
#include "serving/replay/backend_factory.hpp"
#include "serving/replay/replayer.hpp"
#include "serving/traces/workload.hpp"
#include "kernels/attention.hpp"
#include "kernels/device_timer.hpp"
#include "kernels/measure/host_throughput.hpp"
#include "alloc/memory/huge_pages.hpp"
#include "kernels/kv_view.hpp"
#include "kernels/measure/block_pool_copy.hpp"

namespace kvlab {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kKiB = 1024, kMiB = 1024 * kKiB;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Where the measured kernels, copies and mappings run: the host, or a GPU (real, or the emulated
/// one: the driver double and the SIMT emulator) through a DeviceContext whose memory holds the
/// data the kernels read.
struct Target {
  DeviceContext* context = nullptr;  // nullptr: the host
  [[nodiscard]] bool host() const noexcept { return context == nullptr; }
  [[nodiscard]] Device device() const noexcept { return context ? context->device() : Device::host; }
  /// Where the kernels read their arrays: nullptr on the host.
  [[nodiscard]] MemoryResource* device_memory() const noexcept { return context ? &context->memory() : nullptr; }
};

/// How much each measurement does. The emulated GPU runs the CUDA kernels under the SIMT emulator,
/// orders of magnitude slower than any device: its sizes only prove the code path.
struct Sizes {
  int batch = 16, context = 4096, reps = 15;                    // decode attention (and copies: repetitions per size)
  int prefill_seqs = 2, prefill_tokens = 128;                   // prefill attention
  int pairs = 11;                                               // contiguous/paged pairs per block size
  std::size_t map_region = 64 * kMiB;                           // address space mapped page by page
  int map_multiples = 1;                                        // GPU page sizes: granularity x 1, 2, 4, .. this
  std::size_t copy_buffer = 64 * kMiB, copy_bytes = 32 * kMiB;  // copies rotate in the buffer
  std::size_t bandwidth_bytes = 1024 * kMiB;                    // memory bandwidth: bytes read (host) or copied (GPU)

  static Sizes of(Device device, bool quick) {
    if (device == Device::emulated) return {1, 64, 2, 1, 8, 1, 8 * kMiB, 4, 8 * kMiB, 1 * kMiB, 16 * kMiB};
    if (device == Device::cuda)
      return quick ? Sizes{16, 2048, 5, 2, 128, 3, 64 * kMiB, 8, 64 * kMiB, 16 * kMiB, 256 * kMiB}
                   : Sizes{64, 4096, 15, 4, 512, 11, 256 * kMiB, 16, 256 * kMiB, 64 * kMiB, 1024 * kMiB};
    return quick ? Sizes{8, 2048, 3, 1, 64, 2, 8 * kMiB, 1, 16 * kMiB, 4 * kMiB, 128 * kMiB} : Sizes{};
  }
};

/// What every measurement needs: where and when, how long to measure, where to report.
struct Session {
  std::string machine;
  std::string date;
  bool quick = false;
  ThreadPool& pool;
  const std::function<void(const std::string&)>& progress;
  Target target;
  Sizes size;
  std::string kernels;  ///< whose kernels run, for sources: "host", "FlashInfer CUDA", "kvlab CUDA", "emulated CUDA"
  GpuKernel gpu_kernel = GpuKernel::kvlab;  ///< which kernels run on a GPU (resolved, never automatic)

  /// "measured by kvlab calibrate on MACHINE, DATE, WHAT"
  [[nodiscard]] std::string source(const std::string& what) const {
    return fmt::format("measured by kvlab calibrate on {}, {}, {}", machine, date, what);
  }
  void say(const std::string& line) const {
    if (progress) progress(line);
  }
  /// Sets a scalar key and its source.
  void set(DeviceModel& m, double DeviceModel::*field, const std::string& key, double v, const std::string& src) const {
    m.*field = v;
    m.sources[key] = src;
  }
};

std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  if (!(in >> a >> b >> c)) return "unknown";
  return a + " " + b + " " + c;
}

/// A value for a device model line: no '#' (it starts the source), no control characters.
std::string sanitize(std::string s) {
  for (char& ch : s)
    if (ch == '#' || static_cast<unsigned char>(ch) < 0x20) ch = ' ';
  return s;
}

double clamp_to(double v, double lo, double hi) { return std::min(hi, std::max(lo, v)); }

std::string gbps(double bytes_per_s) { return fmt::format("{:.2f} GB/s", bytes_per_s / 1e9); }

// --- memory bandwidth and FMA peak ------------------------------------------------------------------

void measure_memory_and_flops(const Session& s, DeviceModel& m) {
  const std::size_t bytes = s.size.bandwidth_bytes;
  const int reps = s.quick ? 3 : 11;
  const double bw = median(measure_read_bandwidth_samples(s.pool, bytes, reps));
  s.set(m, &DeviceModel::memory_bandwidth, "memory_bandwidth", bw,
        s.source(fmt::format("parallel streaming read (sum of floats) of {} MiB on {} threads, {} repetitions, median",
                             bytes / kMiB, s.pool.size(), reps)));
  s.say(fmt::format("memory_bandwidth = {} (read, {} threads)", gbps(bw), s.pool.size()));

  const std::int64_t fmas = s.quick ? 20'000'000 : 200'000'000;
  const double flops = median(measure_fma_flops_samples(s.pool, fmas, reps));
  s.set(m, &DeviceModel::peak_flops, "peak_flops", flops,
        s.source(fmt::format("fp32 FLOP/s of 16 independent 16-lane FMA chains on {} threads ({} vector FMAs per "
                             "thread; the host kernels compute in fp32), {} repetitions, median",
                             s.pool.size(), fmas, reps)));
  s.say(fmt::format("peak_flops = {:.1f} GFLOP/s (fp32 FMA, {} threads)", flops / 1e9, s.pool.size()));

  const std::string linear =
      "not calibrated on the host: host replays run attention only, so no host GEMM was timed; 1 and 0 make the "
      "linear layers the roofline of the measured memory_bandwidth and peak_flops (kvlab calibrate, " +
      s.date + ")";
  s.set(m, &DeviceModel::linear_bandwidth_efficiency, "linear_bandwidth_efficiency", 1, linear);
  s.set(m, &DeviceModel::linear_flops_efficiency, "linear_flops_efficiency", 1, linear);
  s.set(m, &DeviceModel::linear_layer_overhead_s, "linear_layer_overhead_s", 0, linear);
}

/// Device memory of `bytes` from the target, freed with the object.
struct DeviceBuffer {
  MemoryResource& mr;
  std::size_t bytes;
  std::byte* data;
  DeviceBuffer(MemoryResource& r, std::size_t n) : mr(r), bytes(n), data(static_cast<std::byte*>(r.allocate(n))) {}
  ~DeviceBuffer() { mr.deallocate(data, bytes); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

/// The keys a GPU calibration does not measure (no GEMM or FMA kernel of kvlab's runs on the GPU),
/// taken from preset `base` with its sources, so the file says where each came from.
void take_from_base(const Session& s, DeviceModel& m, const std::string& base) {
  const DeviceModel b = device_model_preset(base);
  const auto take = [&](double DeviceModel::*field, const std::string& key) {
    const auto src = b.sources.find(key);
    s.set(m, field, key, b.*field,
          fmt::format("not measured by kvlab calibrate --device {} (kvlab runs no GEMM on the GPU): from preset {} "
                      "(kvlab calibrate --base), whose source is: {}",
                      s.target.context->spec().name(), base, src == b.sources.end() ? "unspecified" : src->second));
  };
  take(&DeviceModel::peak_flops, "peak_flops");
  take(&DeviceModel::linear_bandwidth_efficiency, "linear_bandwidth_efficiency");
  // The base's efficiency was fitted against its own (datasheet) bandwidth; against the measured
  // one the same weight-read time needs it scaled by their ratio.
  const double scaled = std::clamp(b.linear_bandwidth_efficiency * b.memory_bandwidth / m.memory_bandwidth, 1e-3, 2.0);
  m.linear_bandwidth_efficiency = scaled;
  m.sources["linear_bandwidth_efficiency"] += fmt::format(
      "; scaled by the preset's memory_bandwidth over the measured one ({:.4g} x {:.4g} / {:.4g} TB/s) so the weights "
      "take the preset's time",
      b.linear_bandwidth_efficiency, b.memory_bandwidth / 1e12, m.memory_bandwidth / 1e12);
  take(&DeviceModel::linear_flops_efficiency, "linear_flops_efficiency");
  take(&DeviceModel::linear_layer_overhead_s, "linear_layer_overhead_s");
  take(&DeviceModel::interconnect_bandwidth, "interconnect_bandwidth");  // one GPU: no peer to measure against
  take(&DeviceModel::allreduce_latency_s, "allreduce_latency_s");
  s.say(fmt::format("peak_flops and linear_* from preset {} (peak {:.0f} TFLOP/s)", base, b.peak_flops / 1e12));
}

/// GPU memory bandwidth: device-to-device copies of a large buffer, read + written bytes over the
/// time CUDA events measure.
void measure_device_bandwidth(const Session& s, DeviceModel& m) {
  const std::size_t bytes = s.size.bandwidth_bytes / 2;
  const DeviceBuffer a(s.target.context->memory(), bytes), b(s.target.context->memory(), bytes);
  std::vector<double> rates;
  const int reps = s.quick ? 3 : 11;
  for (int r = 0; r <= reps; ++r) {  // round 0 warms up
    DeviceTimer timer(s.target.device());
    timer.start();
    copy_bytes(s.target.device(), r % 2 ? a.data : b.data, r % 2 ? b.data : a.data, bytes);
    const double t = timer.stop();
    if (r > 0) rates.push_back(2.0 * static_cast<double>(bytes) / t);
  }
  const double bw = median(rates);
  s.set(m, &DeviceModel::memory_bandwidth, "memory_bandwidth", bw,
        s.source(fmt::format(
            "device-to-device copy (alloc/transfer/copy.hpp copy_bytes: cudaMemcpy) of {} MiB, bytes read + "
            "written over the time kernels/device_timer measures, {} repetitions, median",
            bytes / kMiB, rates.size())));
  s.say(fmt::format("memory_bandwidth = {} (device-to-device copy, read + write)", gbps(bw)));
}

// --- attention: contiguous vs paged view on the same data -------------------------------------------

constexpr int kQHeads = 32, kKvHeads = 8, kHeadDim = 128;  // llama-3-8b
constexpr std::int64_t kRow = static_cast<std::int64_t>(kKvHeads) * kHeadDim;

/// One layer's KV of a batch, stored contiguously per sequence (fp16), with decode queries; the
/// host arrays, and where the target's kernels read them.
struct DecodeData {
  int batch, context;
  std::vector<half_t, HugePageAllocator<half_t>> k, v;  // [batch][context][kv_heads][head_dim]
  std::vector<half_t*> kptr, vptr;                      // the target's addresses of each sequence
  std::vector<float> q, out;
  std::vector<std::int32_t> lens;
  StagedArrays staged;
  half_t *k_at = nullptr, *v_at = nullptr;
  half_t* const* kptr_at = nullptr;
  half_t* const* vptr_at = nullptr;
  float *q_at = nullptr, *out_at = nullptr;
  std::int32_t* lens_at = nullptr;
  std::vector<std::int32_t> base_index;  // sequence s starts s x context rows after k_at (and v_at)
  std::int32_t* base_index_at = nullptr;

  DecodeData(const Target& target, int b, int c) : batch(b), context(c), staged(target.device_memory()) {
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    k.resize(static_cast<std::size_t>(batch) * context * kRow);
    v.resize(k.size());
    for (std::size_t i = 0; i < k.size(); ++i) {
      k[i] = from_float<half_t>(uni(rng));
      v[i] = from_float<half_t>(uni(rng));
    }
    q.resize(static_cast<std::size_t>(batch) * kQHeads * kHeadDim);
    for (auto& x : q) x = uni(rng);
    out.resize(q.size());
    lens.assign(static_cast<std::size_t>(batch), context);
    k_at = staged.put(std::span(k));
    v_at = staged.put(std::span(v));
    for (int s = 0; s < batch; ++s) {
      kptr.push_back(k_at + static_cast<std::size_t>(s) * context * kRow);
      vptr.push_back(v_at + static_cast<std::size_t>(s) * context * kRow);
    }
    kptr_at = staged.put(std::span(kptr));
    vptr_at = staged.put(std::span(vptr));
    q_at = staged.put(std::span(q));
    out_at = staged.put(std::span(out));
    lens_at = staged.put(std::span(lens));
    for (int s = 0; s < batch; ++s) base_index.push_back(s * context);
    base_index_at = staged.put(std::span(base_index));
  }
  [[nodiscard]] AttentionParams params() const {
    AttentionParams p;
    p.batch = batch;
    p.num_q_heads = kQHeads;
    p.num_kv_heads = kKvHeads;
    p.head_dim = kHeadDim;
    p.scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
    p.q = q_at;
    p.out = out_at;
    p.seq_lens = lens_at;
    p.host_seq_lens = lens.data();
    return p;
  }
  /// With the common-base form (alloc/core/kv_view.hpp), so FlashInfer's non-paged kernel reads it.
  [[nodiscard]] KvView contiguous() const {
    KvView v = erase(ContiguousKv<half_t>{kptr_at, vptr_at, kRow, kHeadDim}, kKvHeads, kHeadDim);
    v.k_base = k_at;
    v.v_base = v_at;
    v.base_granule = kRow;
    v.seq_base_index = base_index_at;
    v.host_seq_base_index = base_index.data();
    return v;
  }
  [[nodiscard]] double kv_bytes() const { return 2.0 * static_cast<double>(k.size()) * sizeof(half_t); }
};

/// The same KV as a shuffled block pool with block tables (the paged backend's view), where the
/// target's kernels read it.
struct PagedCopy {
  BlockPoolCopy<half_t> pool;
  StagedArrays staged;
  PagedKv<half_t> view;
  PagedCopy(const Target& target, const DecodeData& d, int block_size)
      : pool(sequence_starts(d.k, d).data(), sequence_starts(d.v, d).data(), d.batch, d.context, kRow, block_size),
        staged(target.device_memory()) {
    view = {staged.put(std::span(pool.k)),
            staged.put(std::span(pool.v)),
            staged.put(std::span(pool.table)),
            pool.blocks_per_seq,
            block_size,
            pool.block_stride(),
            kRow,
            kHeadDim};
  }

 private:
  /// The host address of each sequence's first token in `x` (d's host arrays).
  static std::vector<const half_t*> sequence_starts(const std::vector<half_t, HugePageAllocator<half_t>>& x,
                                                    const DecodeData& d) {
    std::vector<const half_t*> starts;
    for (int s = 0; s < d.batch; ++s) starts.push_back(x.data() + static_cast<std::size_t>(s) * d.context * kRow);
    return starts;
  }
};

/// Seconds of one attention call on the target: the host kernels on the session's threads, or the
/// device's kernels timed by DeviceTimer (CUDA events on a GPU: the kernels' time, not the launch's).
double time_attention(const Session& s, const AttentionParams& p, const KvView& view) {
  if (s.target.host()) {
    const auto t0 = Clock::now();
    host_attention(p, view, s.pool);
    return seconds_since(t0);
  }
  DeviceTimer timer(s.target.device());
  timer.start();
  attention(s.target.device(), p, view, s.gpu_kernel);
  return timer.stop();
}

/// A call's time less the attention floor the clock adds per layer on top of its roofs, when the
/// call is clearly longer than the floor (else the whole time: a difference of two similar
/// numbers would be noise, and an efficiency from it wildly high).
double net_of_floor(double seconds, double floor) { return seconds > 2 * floor ? seconds - floor : seconds; }

/// Prefill: the last `fresh` tokens of `seqs` sequences arrive at once, causal over the cached rest.
void measure_prefill(const Session& s, DecodeData& d, DeviceModel& m, int reps) {
  const int seqs = std::min(d.batch, s.size.prefill_seqs), fresh = s.size.prefill_tokens;
  std::vector<float> q(static_cast<std::size_t>(seqs) * fresh * kQHeads * kHeadDim, 0.5f), out(q.size());
  std::vector<std::int32_t> indptr(static_cast<std::size_t>(seqs) + 1);
  for (int i = 0; i <= seqs; ++i) indptr[static_cast<std::size_t>(i)] = i * fresh;
  StagedArrays staged(s.target.device_memory());
  AttentionParams p = d.params();
  p.batch = seqs;
  p.q = staged.put(std::span(q));
  p.out = staged.put(std::span(out));
  p.q_indptr = staged.put(std::span(indptr));
  p.host_q_indptr = indptr.data();
  double flops = 0;
  for (int i = 0; i < fresh; ++i) flops += 4.0 * kHeadDim * (d.context - fresh + i + 1) * kQHeads * seqs;
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) t.push_back(time_attention(s, p, d.contiguous()));
  const double rate = flops / net_of_floor(median(t), m.attention_layer_overhead_s);
  const double eff = clamp_to(rate / m.peak_flops, 1e-3, 2);
  s.set(m, &DeviceModel::attention_flops_efficiency, "attention_flops_efficiency", eff,
        s.source(fmt::format("{} prefill attention FLOP/s ({} sequences x {} new tokens over {} cached, llama-3-8b "
                             "heads, fp16 KV, contiguous view; {:.1f} GFLOP/s over the call's time less "
                             "attention_layer_overhead_s) over peak_flops, {} repetitions, median",
                             s.kernels, seqs, fresh, d.context - fresh, rate / 1e9, reps)));
  s.say(fmt::format("attention_flops_efficiency = {:.3f} (prefill {:.1f} GFLOP/s)", eff, rate / 1e9));
}

void measure_paged_factors(const Session& s, DeviceModel& m, const DecodeData& d, const std::string& geometry) {
  const AttentionParams p = d.params();
  const int pairs = s.size.pairs;
  for (const int b : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    const PagedCopy paged(s.target, d, b);
    const KvView pv = erase(paged.view, kKvHeads, kHeadDim);
    (void)time_attention(s, p, pv);
    std::vector<double> ratios;  // interleaved pairs, so drift in the machine's load cancels
    for (int r = 0; r < pairs; ++r) {
      // The clock applies the factor to the bytes term only; the floor is added apart.
      const double tc = net_of_floor(time_attention(s, p, d.contiguous()), m.attention_layer_overhead_s);
      ratios.push_back(net_of_floor(time_attention(s, p, pv), m.attention_layer_overhead_s) / tc);
    }
    const double f = clamp_to(median(ratios), 0.1, 1000);
    const std::string key = fmt::format("paged_attention_factor.{}", b);
    m.paged_attention_factor.points[b] = f;
    m.sources[key] =
        s.source(fmt::format("{} decode attention time through the paged view (block {}, shuffled "
                             "blocks) over the contiguous view on the same data ({}), each less "
                             "attention_layer_overhead_s, {} interleaved pairs, median ratio",
                             s.kernels, b, geometry, pairs));
    s.say(fmt::format("{} = {:.3f}", key, f));
  }
}

void measure_attention(const Session& s, DeviceModel& m) {
  const int batch = s.size.batch, context = s.size.context, reps = s.size.reps;
  DecodeData d(s.target, batch, context);
  const AttentionParams p = d.params();
  const std::string geometry =
      fmt::format("batch {} x context {}, llama-3-8b heads (32 q / 8 kv, head dim 128), fp16 KV", batch, context);
  // The floor first: one sequence of 16 tokens reads 64 KiB, so its time is the call's fixed cost.
  const DecodeData tiny(s.target, 1, 16);
  const AttentionParams tiny_p = tiny.params();
  (void)time_attention(s, tiny_p, tiny.contiguous());  // warm up
  std::vector<double> floor_t;
  for (int r = 0; r < 5 * reps; ++r) floor_t.push_back(time_attention(s, tiny_p, tiny.contiguous()));
  const double floor = clamp_to(median(floor_t), 0, 10);
  s.set(m, &DeviceModel::attention_layer_overhead_s, "attention_layer_overhead_s", floor,
        s.source(fmt::format("{} decode attention of 1 sequence x 16 tokens (llama-3-8b heads, fp16 KV, 64 KiB of KV: "
                             "a call's fixed cost), {} repetitions, median",
                             s.kernels, 5 * reps)));
  s.say(fmt::format("attention_layer_overhead_s = {:.3g}", floor));
  (void)time_attention(s, p, d.contiguous());  // warm up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) t.push_back(time_attention(s, p, d.contiguous()));
  // The clock charges the floor once per layer on top of bytes / (bandwidth x efficiency).
  const double rate = d.kv_bytes() / net_of_floor(median(t), floor);
  const double eff = clamp_to(rate / m.memory_bandwidth, 1e-3, 2);
  s.set(m, &DeviceModel::attention_bandwidth_efficiency, "attention_bandwidth_efficiency", eff,
        s.source(fmt::format("{} decode attention ({}, contiguous view) KV bytes/s ({}, the call's time less "
                             "attention_layer_overhead_s) over memory_bandwidth, {} repetitions, median",
                             s.kernels, geometry, gbps(rate), reps)));
  s.say(fmt::format("attention_bandwidth_efficiency = {:.3f} (decode {})", eff, gbps(rate)));
  measure_prefill(s, d, m, std::max(2, reps / 3));
  measure_paged_factors(s, m, d, geometry);
}

// --- mapping ----------------------------------------------------------------------------------------

/// The pages, reservation and mappings of one mapping measurement, given back however it ends (an
/// out-of-memory or a driver error halfway leaves nothing held on the device).
struct MappingScratch {
  VmDriver& driver;
  std::size_t page, region;
  std::vector<PhysHandle> handles;
  std::byte* base = nullptr;
  std::vector<bool> mapped;

  MappingScratch(VmDriver& d, std::size_t page_bytes, std::size_t region_bytes)
      : driver(d), page(page_bytes), region(region_bytes), mapped(region_bytes / page_bytes, false) {
    try {
      for (std::size_t i = 0; i < mapped.size(); ++i) {
        const auto h = driver.create(page);
        if (!h)
          KVLAB_THROW(Error, fmt::format("calibrate: the {} driver could not create a {} KiB page (out of memory)",
                                         driver.name(), page / kKiB));
        handles.push_back(*h);
      }
      base = static_cast<std::byte*>(driver.reserve(region, page));
    } catch (...) {
      give_back();  // a throwing constructor runs no destructor
      throw;
    }
  }
  ~MappingScratch() { give_back(); }
  void give_back() noexcept {
    try {
      if (std::find(mapped.begin(), mapped.end(), true) != mapped.end()) driver.synchronize();
      for (std::size_t i = 0; i < mapped.size(); ++i)
        if (mapped[i]) driver.unmap(base + i * page, page);
      if (base != nullptr) driver.free_reservation(base, region);
      base = nullptr;
      for (const PhysHandle h : handles) driver.release(h);
      handles.clear();
    } catch (...) {  // a driver failing at teardown: the emulated device's leak check reports it
    }
  }
  MappingScratch(const MappingScratch&) = delete;
  MappingScratch& operator=(const MappingScratch&) = delete;
  [[nodiscard]] std::byte* at(std::size_t i) const { return base + i * page; }
};

/// Per-page map (map + set_access, as the vmm backend maps) and unmap times of the target's
/// virtual-memory driver (memfd + mmap on the host, the CUDA VMM calls on a GPU).
void measure_mapping_at(const Session& s, DeviceModel& m, VmDriver& driver, std::size_t page) {
  MappingScratch x(driver, page, std::max(s.size.map_region, 4 * page));
  const std::size_t n = x.mapped.size();
  const std::size_t want = s.quick ? 200 : 2000;
  const std::size_t reps = std::max<std::size_t>(s.quick ? 1 : 3, (want + n - 1) / n);
  std::vector<double> maps, unmaps;
  for (std::size_t r = 0; r <= reps; ++r) {  // round 0 touches the pages (first-touch faults), untimed
    for (std::size_t i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      if (!driver.map(x.at(i), page, x.handles[i])) KVLAB_THROW(Error, "calibrate: map failed (out of memory)");
      x.mapped[i] = true;
      driver.set_access(x.at(i), page);
      if (r > 0) maps.push_back(seconds_since(t0));
    }
    if (r == 0 && s.target.host())
      for (std::size_t b = 0; b < x.region; b += 4 * kKiB) x.base[b] = std::byte{1};
    driver.synchronize();  // as the vmm backend does once before a batch of unmaps (untimed)
    for (std::size_t i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      driver.unmap(x.at(i), page);
      x.mapped[i] = false;
      if (r > 0) unmaps.push_back(seconds_since(t0));
    }
  }
  const auto p = static_cast<std::int64_t>(page);
  m.map_s.points[p] = median(maps);
  m.unmap_s.points[p] = median(unmaps);
  const std::string what = fmt::format(
      "{} vmm driver ({}), {} KiB pages, {} of them {} times ({} calls), median per "
      "page",
      s.target.host() ? "host" : "CUDA", driver.name(), page / kKiB, n, reps, maps.size());
  m.sources[fmt::format("map_s.{}", p)] = s.source("map + set_access of one page by the " + what);
  m.sources[fmt::format("unmap_s.{}", p)] = s.source("unmap of one page by the " + what);
  s.say(fmt::format("map_s.{} = {:.3g} s, unmap_s.{} = {:.3g} s", p, median(maps), p, median(unmaps)));
}

/// Every page size the target's driver can map: 4 KiB .. 2 MiB on the host (vAttention's range);
/// the driver's granularity times 1, 2, 4 .. Sizes::map_multiples on a GPU (the stock driver maps nothing
/// smaller; the clock takes the smallest measured size for smaller pages).
void measure_mapping(const Session& s, DeviceModel& m) {
  const std::shared_ptr<VmDriver> driver = make_vm_driver(s.target.context, s.size.map_region * 2);
  const std::size_t first = s.target.host() ? 4 * kKiB : driver->granularity();
  const std::size_t last =
      s.target.host() ? 2 * kMiB : static_cast<std::size_t>(s.size.map_multiples) * driver->granularity();
  for (std::size_t page = first; page <= last; page *= 2) measure_mapping_at(s, m, *driver, page);
}

// --- copies -----------------------------------------------------------------------------------------

/// The seconds of one copy of `size` bytes by `copy` (which copies `count` chunks at rotating
/// offsets, so chunks come from memory, not cache), the median of the session's repetitions.
struct CopyFit {
  double latency = 0, bandwidth = 0;
  std::string table;
};

CopyFit fit_copies(const Session& s, const std::function<void(std::size_t offset, std::size_t size)>& copy,
                   std::size_t buffer) {
  std::vector<std::vector<double>> rows;
  std::vector<double> ones;
  CopyFit fit;
  for (std::size_t size = 4 * kKiB; size <= 4 * kMiB; size *= 2) {
    const std::size_t count = std::max<std::size_t>(4, s.size.copy_bytes / size);
    std::vector<double> per_copy;
    std::size_t off = 0;
    for (int r = 0; r < s.size.reps; ++r) {
      DeviceTimer timer(s.target.device());
      timer.start();
      for (std::size_t c = 0; c < count; ++c) {
        copy(off, size);
        off = (off + size) % buffer;
      }
      per_copy.push_back(timer.stop() / static_cast<double>(count));
    }
    const double t = median(per_copy);
    rows.push_back({1.0 / t, static_cast<double>(size) / t});  // relative residuals: each size weighs the same
    ones.push_back(1.0);
    fit.table += fmt::format("{}{} KiB {:.3g} s", fit.table.empty() ? "" : ", ", size / kKiB, t);
  }
  const std::vector<double> x = nonnegative_least_squares(rows, ones);
  fit.latency = clamp_to(x[0], 0, 10);
  fit.bandwidth = x[1] > 0 ? clamp_to(1.0 / x[1], 1e3, 1e300) : 1e300;
  return fit;
}

/// Host: latency + bytes / bandwidth fitted to memmove of chunks of 4 KiB .. 4 MiB; a device copy
/// (copy-on-write) is the same memmove.
void measure_host_copies(const Session& s, DeviceModel& m) {
  const std::size_t buffer = s.size.copy_buffer;
  std::vector<std::byte> src(buffer, std::byte{1}), dst(buffer, std::byte{2});
  const CopyFit fit = fit_copies(
      s, [&](std::size_t off, std::size_t size) { copy_bytes(Device::host, dst.data() + off, src.data() + off, size); },
      buffer);
  const std::string what = fmt::format(
      "least-squares fit (relative error) of latency + bytes / bandwidth to memmove "
      "(alloc/transfer/copy.hpp copy_bytes) of chunks of 4 KiB .. 4 MiB at rotating offsets in "
      "{} MiB, {} repetitions per size, median per size",
      buffer / kMiB, s.size.reps);
  s.set(m, &DeviceModel::host_bandwidth, "host_bandwidth", fit.bandwidth, s.source(what));
  s.set(m, &DeviceModel::host_transfer_latency_s, "host_transfer_latency_s", fit.latency, s.source(what));
  s.set(m, &DeviceModel::device_copy_latency_s, "device_copy_latency_s", fit.latency,
        s.source(what + "; on the host a device copy (copy-on-write) is the same memmove as a host transfer"));
  s.say(fmt::format("host_bandwidth = {}, host_transfer_latency_s = device_copy_latency_s = {:.3g} s ({})",
                    gbps(fit.bandwidth), fit.latency, fit.table));
}

/// GPU: host transfers between pinned host memory (the swap space's) and device memory, and
/// device-to-device copies, each fitted to latency + bytes / bandwidth over 4 KiB .. 4 MiB.
void measure_device_copies(const Session& s, DeviceModel& m) {
  const std::size_t buffer = s.size.copy_buffer;
  const Device device = s.target.device();
  MemoryResource& memory = s.target.context->memory();
  MemoryResource& pinned = s.target.context->swap_memory() ? *s.target.context->swap_memory() : host_memory_resource();
  const DeviceBuffer a(memory, buffer), b(memory, buffer), host(pinned, buffer);
  std::memset(host.data, 1, buffer);
  upload_bytes(device, a.data, host.data, buffer);
  // Swap moves blocks both ways: each sample is a device->host copy then a host->device one.
  const CopyFit link = fit_copies(
      s,
      [&](std::size_t off, std::size_t size) {
        copy_bytes(device, host.data + off, a.data + off, size / 2);
        copy_bytes(device, a.data + off, host.data + off, size - size / 2);
      },
      buffer);
  const std::string how = fmt::format(
      "latency + bytes / bandwidth, least-squares fit (relative error) over chunks of "
      "4 KiB .. 4 MiB at rotating offsets in {} MiB, {} repetitions per size timed by "
      "kernels/device_timer, median per size",
      buffer / kMiB, s.size.reps);
  s.set(
      m, &DeviceModel::host_bandwidth, "host_bandwidth", link.bandwidth,
      s.source(
          "copies between pinned host memory and device memory (alloc/transfer/copy.hpp copy_bytes: cudaMemcpy), half "
          "each way; " +
          how));
  // Each sample is two transfers (out, then back in): the fitted intercept is two latencies.
  s.set(m, &DeviceModel::host_transfer_latency_s, "host_transfer_latency_s", link.latency / 2,
        s.source("half the intercept of the same fit (each sample is two transfers, one each way); " + how));
  const CopyFit local = fit_copies(
      s, [&](std::size_t off, std::size_t size) { copy_bytes(device, b.data + off, a.data + off, size); }, buffer);
  s.set(m, &DeviceModel::device_copy_latency_s, "device_copy_latency_s", local.latency,
        s.source("device-to-device copies (alloc/transfer/copy.hpp copy_bytes: cudaMemcpy); " + how));
  s.say(
      fmt::format("host_bandwidth = {}, host_transfer_latency_s = {:.3g} s ({}); device_copy_latency_s = {:.3g} s "
                  "({})",
                  gbps(link.bandwidth), link.latency / 2, link.table, local.latency, local.table));
}

// --- kvlab's own CPU work per step ------------------------------------------------------------------

struct OverheadRun {
  double steps = 0, sequences = 0, entries = 0, wall_s = 0;
};

/// Replays a synthetic workload (everything arriving at once) through paged-B in memory mode.
OverheadRun overhead_run(const Session& s, int block, int batch, int reps) {
  SyntheticWorkload w;
  w.num_requests = batch * (s.quick ? 2 : 4);
  w.rate = 0;  // arrivals at 0: the schedule does not depend on the modelled clock
  w.prompt = LengthDistribution::parse("fixed:512", "prompt");
  w.output = LengthDistribution::parse(s.quick ? "fixed:48" : "fixed:192", "output");
  const std::vector<Request> requests = generate(w);
  BackendOptions bo;
  bo.model = model_preset("llama-3-8b");
  bo.capacity_bytes = std::size_t{64} << 30;  // accounting only: no memory behind it
  ReplayConfig rc;
  rc.max_running = batch;
  rc.max_batched_tokens = std::int64_t{1} << 20;
  // The clock's CPU part counts block-table entries when they cost 1 s each and nothing else does.
  rc.device.step_overhead_s = rc.device.sequence_overhead_s = 0;
  rc.device.block_table_entry_s = 1;
  OverheadRun run;
  std::vector<double> walls;
  for (int r = 0; r < reps; ++r) {
    const auto backend = make_backend(fmt::format("paged-{}", block), bo);
    const ReplayResult res = replay(*backend, requests, rc);
    walls.push_back(res.summary.wall_s);
    run.steps = static_cast<double>(res.summary.steps);
    run.entries = res.summary.clock_parts.cpu;
    run.sequences = 0;
    for (const StepRecord& st : res.steps) run.sequences += st.running;
  }
  run.wall_s = median(walls);
  return run;
}

void measure_cpu_overhead(const Session& s, DeviceModel& m) {
  const int reps = s.quick ? 1 : 7;
  std::vector<std::vector<double>> rows;
  std::vector<double> y;
  const std::vector<int> blocks = {1, 16, 128},
                         batches = s.quick ? std::vector<int>{1, 16, 64} : std::vector<int>{1, 16, 128};
  for (const int b : blocks)
    for (const int n : batches) {
      const OverheadRun r = overhead_run(s, b, n, reps);
      rows.push_back({r.steps, r.sequences, r.entries});
      y.push_back(r.wall_s);
    }
  const std::vector<double> x = nonnegative_least_squares(rows, y);
  const std::string what = fmt::format(
      "kvlab's own scheduler (serving/replay/replayer.hpp replay(), memory mode, paged-B backend, llama-3-8b, "
      "prompts of "
      "512 and outputs of {} tokens arriving at once) at block sizes 1, 16, 128 x batch sizes {}, {}, {}: "
      "least-squares fit (non-negative) of the replay's wall time = a * steps + b * sequences + c * block-table "
      "entries over the {} runs, each the median of {} repetitions",
      s.quick ? 48 : 192, batches[0], batches[1], batches[2], rows.size(), reps);
  s.set(m, &DeviceModel::step_overhead_s, "step_overhead_s", clamp_to(x[0], 0, 10), s.source("a of the " + what));
  s.set(m, &DeviceModel::sequence_overhead_s, "sequence_overhead_s", clamp_to(x[1], 0, 10),
        s.source("b of the " + what));
  s.set(m, &DeviceModel::block_table_entry_s, "block_table_entry_s", clamp_to(x[2], 0, 10),
        s.source("c of the " + what));
  s.say(fmt::format("step_overhead_s = {:.3g}, sequence_overhead_s = {:.3g}, block_table_entry_s = {:.3g}", x[0], x[1],
                    x[2]));
}

void describe(const Session& s, DeviceModel& m, const CalibrateOptions& o, const std::string& where) {
  const std::string load = load_average();
  s.say(fmt::format("calibrating {}: {}, {}; load average {}{}", where, s.machine, s.date, load,
                    o.quick ? " (quick: short, noisier measurements)" : ""));
  m.name = o.name;
  m.description = sanitize(fmt::format(
      "{} measured by kvlab calibrate --device {}{} on {} (load average at start {}){}", where, o.device,
      o.quick ? " --quick" : "", s.date, load,
      s.target.device() == Device::emulated ? "; EMULATED: these numbers time the driver double and the SIMT emulator "
                                              "on the host, not a GPU; they test the code path only"
                                            : ""));
  m.sources["name"] = "kvlab calibrate --name";
  m.sources["description"] = "kvlab calibrate";
}

DeviceModel calibrate_on(const CalibrateOptions& o, DeviceContext* context) {
  DeviceModel m;
  const Target target{context};
  const bool host = target.host();
  const std::string cpu = host_machine_name();
  const GpuKernel gpu = o.kernels == "flashinfer" ? GpuKernel::flashinfer
                        : o.kernels == "kvlab"    ? GpuKernel::kvlab
                                                  : resolve(GpuKernel::automatic, target.device());
  const Session s{host ? cpu : context->describe() + " with " + cpu,
                  today_utc(),
                  o.quick,
                  default_thread_pool(),
                  o.progress,
                  target,
                  Sizes::of(target.device(), o.quick),
                  host                                  ? "host"
                  : target.device() == Device::emulated ? "emulated CUDA"
                  : gpu == GpuKernel::flashinfer        ? "FlashInfer CUDA"
                                                        : "kvlab CUDA",
                  gpu};
  describe(s, m, o, host ? "host " + cpu : context->describe());
  const auto t0 = Clock::now();
  if (host) {
    measure_memory_and_flops(s, m);
  } else {
    measure_device_bandwidth(s, m);
    take_from_base(s, m, o.base);
  }
  // One device is measured; a model split over N GPUs is a file that says so (docs/clock.md).
  constexpr const char* kOneDevice =
      "one device: kvlab calibrate measures one; a file for N GPUs sets tensor_parallel (and on the host "
      "interconnect_bandwidth and allreduce_latency_s) by hand, docs/clock.md";
  s.set(m, &DeviceModel::tensor_parallel, "tensor_parallel", 1, kOneDevice);
  if (host) {
    s.set(m, &DeviceModel::interconnect_bandwidth, "interconnect_bandwidth", 0, kOneDevice);
    s.set(m, &DeviceModel::allreduce_latency_s, "allreduce_latency_s", 0, kOneDevice);
  }
  measure_attention(s, m);
  measure_mapping(s, m);
  if (host)
    measure_host_copies(s, m);
  else
    measure_device_copies(s, m);
  measure_cpu_overhead(s, m);
  s.say(fmt::format("done in {:.1f} s; load average now {}", seconds_since(t0), load_average()));
  return m;
}

/// Solves the square system M x = v by Gaussian elimination with partial pivoting; false when singular.
bool solve(std::vector<std::vector<double>> mat, std::vector<double> v, std::vector<double>& x) {
  const std::size_t n = v.size();
  double scale = 0;
  for (const auto& r : mat)
    for (const double e : r) scale = std::max(scale, std::abs(e));
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t piv = c;
    for (std::size_t r = c + 1; r < n; ++r)
      if (std::abs(mat[r][c]) > std::abs(mat[piv][c])) piv = r;
    if (!(std::abs(mat[piv][c]) > 1e-12 * scale)) return false;
    std::swap(mat[c], mat[piv]);
    std::swap(v[c], v[piv]);
    for (std::size_t r = c + 1; r < n; ++r) {
      const double f = mat[r][c] / mat[c][c];
      for (std::size_t k = c; k < n; ++k) mat[r][k] -= f * mat[c][k];
      v[r] -= f * v[c];
    }
  }
  x.assign(n, 0);
  for (std::size_t c = n; c-- > 0;) {
    double sum = v[c];
    for (std::size_t k = c + 1; k < n; ++k) sum -= mat[c][k] * x[k];
    x[c] = sum / mat[c][c];
  }
  return true;
}

}  // namespace

std::string host_machine_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, cpu = "unknown CPU";
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) cpu = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  return sanitize(fmt::format("{} ({} threads)", cpu, std::max(1u, std::thread::hardware_concurrency())));
}

double median(std::vector<double> values) {
  if (values.empty()) KVLAB_THROW(InvalidArgument, "the median of no values");
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  if (values.size() % 2 == 1) return values[mid];
  const double hi = values[mid];
  return (hi + *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
}

std::vector<double> least_squares(const std::vector<std::vector<double>>& rows, const std::vector<double>& y) {
  if (rows.empty() || rows.size() != y.size())
    KVLAB_THROW(InvalidArgument, "least squares: rows and values differ in number");
  const std::size_t n = rows.front().size();
  if (n == 0 || rows.size() < n) KVLAB_THROW(InvalidArgument, "least squares: fewer rows than unknowns");
  std::vector<std::vector<double>> ata(n, std::vector<double>(n, 0));
  std::vector<double> aty(n, 0);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].size() != n) KVLAB_THROW(InvalidArgument, "least squares: rows of different lengths");
    for (std::size_t i = 0; i < n; ++i) {
      aty[i] += rows[r][i] * y[r];
      for (std::size_t j = 0; j < n; ++j) ata[i][j] += rows[r][i] * rows[r][j];
    }
  }
  std::vector<double> x;
  if (!solve(ata, aty, x)) KVLAB_THROW(InvalidArgument, "least squares: the columns are linearly dependent");
  return x;
}

std::vector<double> nonnegative_least_squares(const std::vector<std::vector<double>>& rows,
                                              const std::vector<double>& y) {
  if (rows.empty() || rows.front().empty() || rows.front().size() > 16)
    KVLAB_THROW(InvalidArgument, "non-negative least squares: 1 to 16 unknowns");
  const std::size_t n = rows.front().size();
  std::vector<double> best(n, 0);
  double best_residual = 0;
  for (const double v : y) best_residual += v * v;  // the empty subset: all zero
  for (std::uint32_t mask = 1; mask < (1u << n); ++mask) {
    std::vector<std::vector<double>> sub(rows.size());
    for (std::size_t r = 0; r < rows.size(); ++r)
      for (std::size_t c = 0; c < n; ++c)
        if (mask & (1u << c)) sub[r].push_back(rows[r][c]);
    std::vector<double> xs;
    try {
      xs = least_squares(sub, y);
    } catch (const InvalidArgument&) {
      continue;  // too few rows or dependent columns: another subset covers it
    }
    if (std::any_of(xs.begin(), xs.end(), [](double v) { return v < 0; })) continue;
    std::vector<double> x(n, 0);
    for (std::size_t c = 0, k = 0; c < n; ++c)
      if (mask & (1u << c)) x[c] = xs[k++];
    double residual = 0;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      double e = -y[r];
      for (std::size_t c = 0; c < n; ++c) e += rows[r][c] * x[c];
      residual += e * e;
    }
    if (residual < best_residual) {
      best_residual = residual;
      best = x;
    }
  }
  return best;
}

void check_calibrate_output(const std::filesystem::path& file) {
  namespace fs = std::filesystem;
  if (file.empty()) KVLAB_THROW(InvalidArgument, "--out names no file");
  std::error_code ec;
  if (fs::is_directory(file, ec)) KVLAB_THROW(InvalidArgument, "--out " + file.string() + ": is a directory");
  const fs::path parent = file.has_parent_path() ? file.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec))
    throw Error("cannot write " + file.string() + ": " + std::strerror(fs::exists(parent, ec) ? ENOTDIR : ENOENT));
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    throw Error("cannot write " + file.string() + ": " + std::strerror(errno));
}

DeviceModel calibrate_device(const CalibrateOptions& o, std::string* device_fault) {
  if (o.name.empty() || o.name.find_first_of(" \t/#\r\n") != std::string::npos)
    KVLAB_THROW(InvalidArgument, "--name must be one word without '/' or '#' (got '" + o.name + "')");
  const DeviceSpec spec = parse_device_spec(o.device);  // InvalidArgument names the value
  if (spec.kind == Device::host) return calibrate_on(o, nullptr);
  (void)device_model_preset(o.base);  // an unknown --base fails before any measurement
  try {
    DeviceContext context(spec, std::size_t{1} << 30);
    DeviceModel m = calibrate_on(o, &context);
    const std::string problems = context.problems();
    if (!problems.empty()) {
      const std::string fault = "calibrate --device " + spec.name() + " left device resources behind: " + problems;
      if (device_fault == nullptr) throw Error(fault);
      *device_fault = fault;
    }
    return m;
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {  // the device could not be opened: say which command asked for it
    const std::string what = e.what();
    if (what.rfind("--device ", 0) != 0) throw;
    throw Error("calibrate " + what);
  }
}

}  // namespace kvlab
