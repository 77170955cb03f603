#include "experiments/calibrate.hpp"

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
#include <thread>

#include <fmt/format.h>

#include "alloc/copy.hpp"
#include "alloc/cuda_runtime.hpp"
#include "alloc/error.hpp"
#include "alloc/model_geometry.hpp"
#include "experiments/backend_factory.hpp"
#include "experiments/replayer.hpp"
#include "experiments/workload.hpp"
#include "kernels/attention.hpp"
#include "kernels/host_throughput.hpp"
#include "kernels/huge_pages.hpp"
#include "kernels/kv_view.hpp"
#include "vmm/posix_vm_driver.hpp"

namespace kvlab {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kKiB = 1024, kMiB = 1024 * kKiB;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// What every measurement needs: where and when, how long to measure, where to report.
struct Session {
  std::string machine;
  std::string date;
  bool quick = false;
  ThreadPool& pool;
  const std::function<void(const std::string&)>& progress;

  /// "measured by kvlab calibrate on MACHINE, DATE, WHAT"
  [[nodiscard]] std::string source(const std::string& what) const {
    return fmt::format("measured by kvlab calibrate on {}, {}, {}", machine, date, what);
  }
  void say(const std::string& line) const {
    if (progress) progress(line);
  }
  /// Sets a scalar key and its source.
  void set(DeviceModel& m, double DeviceModel::* field, const std::string& key, double v, const std::string& src) const {
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
  const std::size_t bytes = s.quick ? 128 * kMiB : 1024 * kMiB;
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
      "linear layers the roofline of the measured memory_bandwidth and peak_flops (kvlab calibrate, " + s.date + ")";
  s.set(m, &DeviceModel::linear_bandwidth_efficiency, "linear_bandwidth_efficiency", 1, linear);
  s.set(m, &DeviceModel::linear_flops_efficiency, "linear_flops_efficiency", 1, linear);
  s.set(m, &DeviceModel::linear_layer_overhead_s, "linear_layer_overhead_s", 0, linear);
}

// --- attention: contiguous vs paged view on the same data -------------------------------------------

constexpr int kQHeads = 32, kKvHeads = 8, kHeadDim = 128;  // llama-3-8b
constexpr std::int64_t kRow = static_cast<std::int64_t>(kKvHeads) * kHeadDim;

/// One layer's KV of a batch, stored contiguously per sequence (fp16), with decode queries.
struct DecodeData {
  int batch, context;
  std::vector<half_t, HugePageAllocator<half_t>> k, v;  // [batch][context][kv_heads][head_dim]
  std::vector<half_t*> kptr, vptr;
  std::vector<float> q, out;
  std::vector<std::int32_t> lens;

  DecodeData(int b, int c) : batch(b), context(c) {
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    k.resize(static_cast<std::size_t>(batch) * context * kRow);
    v.resize(k.size());
    for (std::size_t i = 0; i < k.size(); ++i) {
      k[i] = from_float<half_t>(uni(rng));
      v[i] = from_float<half_t>(uni(rng));
    }
    for (int s = 0; s < batch; ++s) {
      kptr.push_back(k.data() + static_cast<std::size_t>(s) * context * kRow);
      vptr.push_back(v.data() + static_cast<std::size_t>(s) * context * kRow);
    }
    q.resize(static_cast<std::size_t>(batch) * kQHeads * kHeadDim);
    for (auto& x : q) x = uni(rng);
    out.resize(q.size());
    lens.assign(static_cast<std::size_t>(batch), context);
  }
  [[nodiscard]] AttentionParams params() {
    AttentionParams p;
    p.batch = batch;
    p.num_q_heads = kQHeads;
    p.num_kv_heads = kKvHeads;
    p.head_dim = kHeadDim;
    p.scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
    p.q = q.data();
    p.out = out.data();
    p.seq_lens = lens.data();
    return p;
  }
  [[nodiscard]] KvView contiguous() const {
    return erase(ContiguousKv<half_t>{kptr.data(), vptr.data(), kRow, kHeadDim}, kKvHeads, kHeadDim);
  }
  [[nodiscard]] double kv_bytes() const { return 2.0 * static_cast<double>(k.size()) * sizeof(half_t); }
};

/// The same KV as a shuffled block pool with block tables (the paged backend's view).
struct PagedCopy {
  std::vector<half_t, HugePageAllocator<half_t>> k, v;
  std::vector<std::int32_t> table;
  PagedKv<half_t> view;
  PagedCopy(const DecodeData& d, int block_size) {
    const int per_seq = (d.context + block_size - 1) / block_size;
    table.resize(static_cast<std::size_t>(per_seq) * d.batch);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937_64(7));
    const std::int64_t bstride = block_size * kRow;
    k.resize(table.size() * static_cast<std::size_t>(bstride));
    v.resize(k.size());
    for (int s = 0; s < d.batch; ++s)
      for (int t = 0; t < d.context; ++t) {
        const std::int64_t dst = table[static_cast<std::size_t>(s) * per_seq + t / block_size] * bstride + (t % block_size) * kRow;
        std::copy_n(d.kptr[s] + t * kRow, kRow, &k[dst]);
        std::copy_n(d.vptr[s] + t * kRow, kRow, &v[dst]);
      }
    view = {k.data(), v.data(), table.data(), per_seq, block_size, bstride, kRow, kHeadDim};
  }
};

double time_attention(const AttentionParams& p, const KvView& view, ThreadPool& pool) {
  const auto t0 = Clock::now();
  host_attention(p, view, pool);
  return seconds_since(t0);
}

/// Prefill: the last `fresh` tokens of `seqs` sequences arrive at once, causal over the cached rest.
void measure_prefill(const Session& s, DecodeData& d, DeviceModel& m, int reps) {
  const int seqs = s.quick ? 1 : 2, fresh = s.quick ? 64 : 128;
  std::vector<float> q(static_cast<std::size_t>(seqs) * fresh * kQHeads * kHeadDim, 0.5f), out(q.size());
  std::vector<std::int32_t> indptr(static_cast<std::size_t>(seqs) + 1);
  for (int i = 0; i <= seqs; ++i) indptr[static_cast<std::size_t>(i)] = i * fresh;
  AttentionParams p = d.params();
  p.batch = seqs;
  p.q = q.data();
  p.out = out.data();
  p.q_indptr = indptr.data();
  double flops = 0;
  for (int i = 0; i < fresh; ++i) flops += 4.0 * kHeadDim * (d.context - fresh + i + 1) * kQHeads * seqs;
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) t.push_back(time_attention(p, d.contiguous(), s.pool));
  const double rate = flops / median(t);
  const double eff = clamp_to(rate / m.peak_flops, 1e-3, 2);
  s.set(m, &DeviceModel::attention_flops_efficiency, "attention_flops_efficiency", eff,
        s.source(fmt::format("host prefill attention FLOP/s ({} sequences x {} new tokens over {} cached, llama-3-8b "
                             "heads, fp16 KV, contiguous view; {:.1f} GFLOP/s) over peak_flops, {} repetitions, median",
                             seqs, fresh, d.context - fresh, rate / 1e9, reps)));
  s.say(fmt::format("attention_flops_efficiency = {:.3f} (prefill {:.1f} GFLOP/s)", eff, rate / 1e9));
}

void measure_attention(const Session& s, DeviceModel& m) {
  const int batch = s.quick ? 8 : 16, context = s.quick ? 2048 : 4096, reps = s.quick ? 3 : 15;
  DecodeData d(batch, context);
  const AttentionParams p = d.params();
  const std::string geometry = fmt::format("batch {} x context {}, llama-3-8b heads (32 q / 8 kv, head dim 128), fp16 KV",
                                           batch, context);
  (void)time_attention(p, d.contiguous(), s.pool);  // warm up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) t.push_back(time_attention(p, d.contiguous(), s.pool));
  const double rate = d.kv_bytes() / median(t);
  const double eff = clamp_to(rate / m.memory_bandwidth, 1e-3, 2);
  s.set(m, &DeviceModel::attention_bandwidth_efficiency, "attention_bandwidth_efficiency", eff,
        s.source(fmt::format("host decode attention ({}, contiguous view, {} threads) KV bytes/s ({}) over "
                             "memory_bandwidth, {} repetitions, median", geometry, s.pool.size(), gbps(rate), reps)));
  s.say(fmt::format("attention_bandwidth_efficiency = {:.3f} (decode {})", eff, gbps(rate)));
  measure_prefill(s, d, m, s.quick ? 2 : 5);

  const int pairs = s.quick ? 2 : 11;
  for (const int b : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    const PagedCopy paged(d, b);
    const KvView pv = erase(paged.view, kKvHeads, kHeadDim);
    (void)time_attention(p, pv, s.pool);
    std::vector<double> ratios;  // interleaved pairs, so drift in the machine's load cancels
    for (int r = 0; r < pairs; ++r) {
      const double tc = time_attention(p, d.contiguous(), s.pool);
      ratios.push_back(time_attention(p, pv, s.pool) / tc);
    }
    const double f = clamp_to(median(ratios), 0.1, 1000);
    const std::string key = fmt::format("paged_attention_factor.{}", b);
    m.paged_attention_factor.points[b] = f;
    m.sources[key] = s.source(fmt::format("host decode attention time through the paged view (block {}, shuffled "
                                          "blocks) over the contiguous view on the same data ({}), {} interleaved "
                                          "pairs, median ratio", b, geometry, pairs));
    s.say(fmt::format("{} = {:.3f}", key, f));
  }
}

// --- mapping ----------------------------------------------------------------------------------------

/// Per-page map (map + set_access, as the vmm backend maps) and unmap times of the POSIX driver.
void measure_mapping_at(const Session& s, DeviceModel& m, std::size_t page) {
  const std::size_t region = s.quick ? 8 * kMiB : 64 * kMiB;
  const std::size_t n = region / page;
  const std::size_t want = s.quick ? 200 : 2000;
  const std::size_t reps = std::max<std::size_t>(s.quick ? 1 : 3, (want + n - 1) / n);
  PosixVmDriver driver(region);
  std::vector<PhysHandle> handles;
  for (std::size_t i = 0; i < n; ++i) {
    const auto h = driver.create(page);
    if (!h) KVLAB_THROW(Error, "calibrate: the POSIX driver could not create a page");
    handles.push_back(*h);
  }
  auto* base = static_cast<std::byte*>(driver.reserve(region, page));
  std::vector<double> maps, unmaps;
  for (std::size_t r = 0; r <= reps; ++r) {  // round 0 touches the pages (first-touch faults), untimed
    for (std::size_t i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      if (!driver.map(base + i * page, page, handles[i])) KVLAB_THROW(Error, "calibrate: map failed (out of memory)");
      driver.set_access(base + i * page, page);
      if (r > 0) maps.push_back(seconds_since(t0));
    }
    if (r == 0)
      for (std::size_t b = 0; b < region; b += 4 * kKiB) base[b] = std::byte{1};
    for (std::size_t i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      driver.unmap(base + i * page, page);
      if (r > 0) unmaps.push_back(seconds_since(t0));
    }
  }
  driver.free_reservation(base, region);
  for (const PhysHandle h : handles) driver.release(h);
  const auto p = static_cast<std::int64_t>(page);
  m.map_s.points[p] = median(maps);
  m.unmap_s.points[p] = median(unmaps);
  const std::string what = fmt::format("host vmm driver (vmm/posix_vm_driver: memfd + mmap), {} KiB pages, {} of them "
                                       "{} times ({} calls), median per page",
                                       page / kKiB, n, reps, maps.size());
  m.sources[fmt::format("map_s.{}", p)] = s.source("map + set_access of one page by the " + what);
  m.sources[fmt::format("unmap_s.{}", p)] = s.source("unmap of one page by the " + what);
  s.say(fmt::format("map_s.{} = {:.3g} s, unmap_s.{} = {:.3g} s", p, median(maps), p, median(unmaps)));
}

void measure_mapping(const Session& s, DeviceModel& m) {
  for (std::size_t page = 4 * kKiB; page <= 2 * kMiB; page *= 2) measure_mapping_at(s, m, page);
}

// --- copies -----------------------------------------------------------------------------------------

/// latency + bytes / bandwidth fitted to memmove times of chunks of 4 KiB .. 4 MiB.
void measure_copies(const Session& s, DeviceModel& m) {
  const std::size_t buffer = s.quick ? 16 * kMiB : 64 * kMiB;
  const int reps = s.quick ? 3 : 15;
  std::vector<std::byte> src(buffer, std::byte{1}), dst(buffer, std::byte{2});
  std::vector<std::vector<double>> rows;
  std::vector<double> ones;
  std::string table;
  for (std::size_t size = 4 * kKiB; size <= 4 * kMiB; size *= 2) {
    const std::size_t count = std::max<std::size_t>(4, (s.quick ? 4 * kMiB : 32 * kMiB) / size);
    std::vector<double> per_copy;
    std::size_t off = 0;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      for (std::size_t c = 0; c < count; ++c) {  // rotating offsets: chunks come from memory, not cache
        copy_bytes(Device::host, dst.data() + off, src.data() + off, size);
        off = (off + size) % buffer;
      }
      per_copy.push_back(seconds_since(t0) / static_cast<double>(count));
    }
    const double t = median(per_copy);
    rows.push_back({1.0 / t, static_cast<double>(size) / t});  // relative residuals: each size weighs the same
    ones.push_back(1.0);
    table += fmt::format("{}{} KiB {:.3g} s", table.empty() ? "" : ", ", size / kKiB, t);
  }
  const std::vector<double> x = nonnegative_least_squares(rows, ones);
  const double latency = clamp_to(x[0], 0, 10);
  const double bandwidth = x[1] > 0 ? clamp_to(1.0 / x[1], 1e3, 1e300) : 1e300;
  const std::string what = fmt::format("least-squares fit (relative error) of latency + bytes / bandwidth to memmove "
                                       "(alloc/copy.hpp copy_bytes) of chunks of 4 KiB .. 4 MiB at rotating offsets in "
                                       "{} MiB, {} repetitions per size, median per size", buffer / kMiB, reps);
  s.set(m, &DeviceModel::host_bandwidth, "host_bandwidth", bandwidth, s.source(what));
  s.set(m, &DeviceModel::host_transfer_latency_s, "host_transfer_latency_s", latency, s.source(what));
  s.set(m, &DeviceModel::device_copy_latency_s, "device_copy_latency_s", latency,
        s.source(what + "; on the host a device copy (copy-on-write) is the same memmove as a host transfer"));
  s.say(fmt::format("host_bandwidth = {}, host_transfer_latency_s = device_copy_latency_s = {:.3g} s ({})",
                    gbps(bandwidth), latency, table));
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
  const std::vector<int> blocks = {1, 16, 128}, batches = s.quick ? std::vector<int>{1, 16, 64} : std::vector<int>{1, 16, 128};
  for (const int b : blocks)
    for (const int n : batches) {
      const OverheadRun r = overhead_run(s, b, n, reps);
      rows.push_back({r.steps, r.sequences, r.entries});
      y.push_back(r.wall_s);
    }
  const std::vector<double> x = nonnegative_least_squares(rows, y);
  const std::string what = fmt::format(
      "kvlab's own scheduler (experiments/replayer.hpp replay(), memory mode, paged-B backend, llama-3-8b, prompts of "
      "512 and outputs of {} tokens arriving at once) at block sizes 1, 16, 128 x batch sizes {}, {}, {}: "
      "least-squares fit (non-negative) of the replay's wall time = a * steps + b * sequences + c * block-table "
      "entries over the {} runs, each the median of {} repetitions",
      s.quick ? 48 : 192, batches[0], batches[1], batches[2], rows.size(), reps);
  s.set(m, &DeviceModel::step_overhead_s, "step_overhead_s", clamp_to(x[0], 0, 10), s.source("a of the " + what));
  s.set(m, &DeviceModel::sequence_overhead_s, "sequence_overhead_s", clamp_to(x[1], 0, 10), s.source("b of the " + what));
  s.set(m, &DeviceModel::block_table_entry_s, "block_table_entry_s", clamp_to(x[2], 0, 10), s.source("c of the " + what));
  s.say(fmt::format("step_overhead_s = {:.3g}, sequence_overhead_s = {:.3g}, block_table_entry_s = {:.3g}", x[0], x[1], x[2]));
}

DeviceModel calibrate_host(const CalibrateOptions& o) {
  DeviceModel m;
  m.name = o.name;
  const Session s{host_machine_name(), today_utc(), o.quick, default_thread_pool(), o.progress};
  const std::string load = load_average();
  s.say(fmt::format("calibrating the host: {}, {}; load average {}{}", s.machine, s.date, load,
                    o.quick ? " (quick: short, noisier measurements)" : ""));
  m.description = sanitize(fmt::format("host {} measured by kvlab calibrate{} on {} (load average at start {})",
                                       s.machine, o.quick ? " --quick" : "", s.date, load));
  m.sources["name"] = "kvlab calibrate --name";
  m.sources["description"] = "kvlab calibrate";
  const auto t0 = Clock::now();
  measure_memory_and_flops(s, m);
  measure_attention(s, m);
  measure_mapping(s, m);
  measure_copies(s, m);
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
  if (rows.empty() || rows.size() != y.size()) KVLAB_THROW(InvalidArgument, "least squares: rows and values differ in number");
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

std::vector<double> nonnegative_least_squares(const std::vector<std::vector<double>>& rows, const std::vector<double>& y) {
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
  if (::access(parent.c_str(), W_OK | X_OK) != 0) throw Error("cannot write " + file.string() + ": " + std::strerror(errno));
}

DeviceModel calibrate_device(const CalibrateOptions& o) {
  if (o.name.empty() || o.name.find_first_of(" \t/#\r\n") != std::string::npos)
    KVLAB_THROW(InvalidArgument, "--name must be one word without '/' or '#' (got '" + o.name + "')");
  if (o.device == "host") return calibrate_host(o);
  if (o.device != "cuda") KVLAB_THROW(InvalidArgument, "--device must be host or cuda (got '" + o.device + "')");
  const CudaStatus& c = cuda_status();
  if (!c.available) throw Error("calibrate --device cuda: no CUDA GPU found (" + c.message + ")");
  throw Error("calibrate --device cuda: found " + c.device_name +
              ", but GPU calibration is not implemented yet (map_s/unmap_s through vmm/cuda_vm_driver, memory "
              "bandwidth with a device copy and attention with kernels/cuda are still to be written); use "
              "--device host here, or write the GPU's file by hand (docs/clock.md)");
}

}  // namespace kvlab
