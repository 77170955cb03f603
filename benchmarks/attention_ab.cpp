// Two builds of the host attention kernel in one process, timed back to back on the same data:
// scripts/attention_ab.sh compiles kernels/host_attention.cpp at a base revision as
// host_attention_a and the working tree's as host_attention_b, and links them with this driver.
//
// Why: this host's memory bandwidth and clock move 10-50 % within minutes (docs/kernels.md), so
// two benchmark processes run one after the other cannot resolve a 5 % change. Here every round
// runs A and B once each, in a seeded random order, and the result is the median over rounds of
// time(A) / time(B): B's speed relative to A's, taken seconds apart.
//
// Cases (llama-3-8b geometry: 32 query / 8 KV heads, head dim 128, fp16 KV):
//   decode from memory      batch 32, context 4096 (512 MiB of KV), every thread and one thread
//   paged-16 from memory    the same KV as a shuffled block pool, every thread
//   decode in L2            batch 2, context 256 (2 MiB of KV, about one core's L2), one thread
//   prefill                 4 sequences, 256 new tokens each on 3840 cached, every thread
// --quick shrinks every case (CI checks that the driver runs and the builds agree, not speed).
//
// Before timing, A's and B's outputs are compared on every case: they must agree to 1e-5
// (relative to the largest output), or the driver exits 1 (a faster kernel that computes
// something else is not faster).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.hpp"
#include "alloc/memory/huge_pages.hpp"
#include "kernels/kv_view.hpp"
#include "kernels/measure/block_pool_copy.hpp"

namespace kvlab {
void host_attention_a(const AttentionParams& p, const KvView& kv, ThreadPool& pool);
void host_attention_b(const AttentionParams& p, const KvView& kv, ThreadPool& pool);
}  // namespace kvlab

namespace {

using namespace kvlab;

constexpr int kQHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr std::int64_t kRow = static_cast<std::int64_t>(kKvHeads) * kHeadDim;

using HalfVector = std::vector<half_t, HugePageAllocator<half_t>>;

/// A contiguous fp16 KV cache of `batch` sequences of `context` tokens, random in [-1, 1).
struct Cache {
  int batch, context;
  HalfVector k, v;
  std::vector<half_t*> kptr, vptr;
  std::vector<std::int32_t> lens;

  Cache(int b, int c) : batch(b), context(c) {
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    k.resize(static_cast<std::size_t>(b) * c * kRow);
    v.resize(k.size());
    for (auto& x : k) x = from_float<half_t>(uni(rng));
    for (auto& x : v) x = from_float<half_t>(uni(rng));
    for (int s = 0; s < b; ++s) {
      kptr.push_back(k.data() + static_cast<std::size_t>(s) * c * kRow);
      vptr.push_back(v.data() + static_cast<std::size_t>(s) * c * kRow);
    }
    lens.assign(static_cast<std::size_t>(b), c);
  }
  [[nodiscard]] KvView view() const {
    return erase(ContiguousKv<half_t>{kptr.data(), vptr.data(), kRow, kHeadDim}, kKvHeads, kHeadDim);
  }
  [[nodiscard]] double bytes() const { return 2.0 * static_cast<double>(k.size()) * sizeof(half_t); }
};

/// The same cache as a block pool of `block_size` tokens per block, blocks in a shuffled order.
struct PagedCache {
  BlockPoolCopy<half_t> pool;
  PagedCache(const Cache& c, int block_size)
      : pool(c.kptr.data(), c.vptr.data(), c.batch, c.context, kRow, block_size) {}
  [[nodiscard]] KvView view() { return erase(pool.view(kHeadDim), kKvHeads, kHeadDim); }
};

/// Queries and outputs for `tokens` query tokens (one per sequence in decode).
struct Queries {
  std::vector<float> q, out_a, out_b;
  std::vector<std::int32_t> indptr;  // empty: decode
  explicit Queries(int tokens) : q(static_cast<std::size_t>(tokens) * kQHeads * kHeadDim) {
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    for (auto& x : q) x = uni(rng);
    out_a.assign(q.size(), std::nanf(""));
    out_b.assign(q.size(), std::nanf(""));
  }
};

AttentionParams params(const Cache& c, Queries& qs, int batch) {
  AttentionParams p;
  p.batch = batch;
  p.num_q_heads = kQHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kHeadDim;
  p.scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
  p.q = qs.q.data();
  p.seq_lens = c.lens.data();
  if (!qs.indptr.empty()) p.q_indptr = qs.indptr.data();
  return p;
}

/// Fails (exit 1) unless A's and B's outputs agree; NaN anywhere fails.
void check_agree(const char* name, const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0, worst = 0;
  for (const float x : a) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);  // NaN: the test below fails
    if (!(d <= 1e-5 * std::max(scale, 1e-30))) {
      std::fprintf(stderr, "attention_ab: %s: outputs differ at %zu: A %.9g, B %.9g\n", name, i, a[i], b[i]);
      std::exit(1);
    }
    worst = std::max(worst, d);
  }
  std::printf("# %s: outputs agree (largest difference %.3g of %.3g)\n", name, worst, scale);
}

double seconds(const std::function<void()>& f, int reps) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

double quantile(std::vector<double> x, double q) {
  std::sort(x.begin(), x.end());
  return x[static_cast<std::size_t>(q * static_cast<double>(x.size() - 1) + 0.5)];
}

struct Case {
  const char* name;
  AttentionParams p;
  KvView kv;
  ThreadPool* pool;
  Queries* qs;
  int reps;     // kernel calls per timing (small cases are repeated to last milliseconds)
  double work;  // bytes or FLOPs per call
  const char* unit;
};

void run_case(const Case& c, int rounds, std::mt19937& rng) {
  // Poisoned afresh for every case: cases share queries, and a build that skipped writing its
  // output must not pass on the previous case's numbers.
  std::fill(c.qs->out_a.begin(), c.qs->out_a.end(), std::nanf(""));
  std::fill(c.qs->out_b.begin(), c.qs->out_b.end(), std::nanf(""));
  AttentionParams pa = c.p, pb = c.p;
  pa.out = c.qs->out_a.data();
  pb.out = c.qs->out_b.data();
  host_attention_a(pa, c.kv, *c.pool);
  host_attention_b(pb, c.kv, *c.pool);
  check_agree(c.name, c.qs->out_a, c.qs->out_b);
  std::vector<double> ratio, rate_a, rate_b;
  for (int r = 0; r < rounds; ++r) {
    double ta = 0, tb = 0;
    const auto time_a = [&] { ta = seconds([&] { host_attention_a(pa, c.kv, *c.pool); }, c.reps); };
    const auto time_b = [&] { tb = seconds([&] { host_attention_b(pb, c.kv, *c.pool); }, c.reps); };
    if (rng() & 1U) {
      time_a();
      time_b();
    } else {
      time_b();
      time_a();
    }
    ratio.push_back(ta / tb);
    rate_a.push_back(c.work / ta);
    rate_b.push_back(c.work / tb);
  }
  std::printf("%-24s B/A speed %.3f (quartiles %.3f..%.3f)   A %7.2f %s   B %7.2f %s\n", c.name, quantile(ratio, 0.5),
              quantile(ratio, 0.25), quantile(ratio, 0.75), quantile(rate_a, 0.5) / 1e9, c.unit,
              quantile(rate_b, 0.5) / 1e9, c.unit);
  std::fflush(stdout);
}

double prefill_flops(int seqs, int fresh, int context) {
  double flops = 0;
  for (int i = 0; i < fresh; ++i) flops += 4.0 * kHeadDim * (context - fresh + i + 1) * kQHeads * seqs;
  return flops;
}

void run_all(int rounds, bool quick) {
  std::mt19937 rng(3);
  ThreadPool one(1);
  ThreadPool& all = default_thread_pool();
  {
    const Cache c(quick ? 5 : 32, quick ? 300 : 4096);
    Queries qs(c.batch);
    PagedCache paged(c, 16);
    const AttentionParams p = params(c, qs, c.batch);
    run_case({"decode, memory, all", p, c.view(), &all, &qs, 1, c.bytes(), "GB/s"}, rounds, rng);
    run_case({"decode, memory, 1 thread", p, c.view(), &one, &qs, 1, c.bytes(), "GB/s"}, rounds, rng);
    run_case({"paged-16, memory, all", p, paged.view(), &all, &qs, 1, c.bytes(), "GB/s"}, rounds, rng);
  }
  {
    const Cache c(2, quick ? 37 : 256);
    Queries qs(c.batch);
    run_case({"decode, L2, 1 thread", params(c, qs, c.batch), c.view(), &one, &qs, quick ? 2 : 200, c.bytes(), "GB/s"},
             rounds, rng);
  }
  {
    const int seqs = quick ? 3 : 4, fresh = quick ? 19 : 256;
    const Cache c(seqs, quick ? 100 : 4096);
    Queries qs(seqs * fresh);
    for (int s = 0; s <= seqs; ++s) qs.indptr.push_back(s * fresh);
    run_case(
        {"prefill, all", params(c, qs, seqs), c.view(), &all, &qs, 1, prefill_flops(seqs, fresh, c.context), "GFLOP/s"},
        rounds, rng);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 21;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--rounds N] [--quick]  (built and run by scripts/attention_ab.sh)\n", argv[0]);
      return 2;
    }
  }
  if (rounds < 1) {
    std::fprintf(stderr, "attention_ab: --rounds must be at least 1\n");
    return 2;
  }
  run_all(rounds, quick);
  return 0;
}
