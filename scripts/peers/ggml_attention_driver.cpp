// Peer benchmark driver: times ggml's CPU flash attention (ggml_flash_attn_ext) at the shape of
// kvlab's BM_DecodeContiguous (benchmarks/attention_bench.cpp): llama-3-8b decode,
// 32 query / 8 KV heads, head dim 128, fp16 K and V, 32 sequences of 4096 tokens, one query token
// per sequence, fp32 q and out, scale 1/sqrt(128).
//
// This file is kvlab's own code; ggml itself is never in the repository. It is not part of the
// CMake build: scripts/peers/ggml_attention.sh downloads ggml, builds its CPU library outside the
// checkout and compiles this file against it.
//
//   ggml_attention_driver [--threads N] [--min-runs N] [--min-seconds S] [--warmup N] [--seed N]
//
// Prints one `key=value` line per result; the last line starts with `ggml_peer` and holds the
// median seconds per call and the KV bytes read per second (2 * 32 * 4096 * 8 * 128 * 2 bytes per
// call, the figure kvlab's benchmark divides by). Exits 1 if the result disagrees with a float64
// reference on sampled (sequence, head) pairs by more than 1e-2 or is NaN, 2 on bad arguments.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace {

constexpr int64_t kHeadDim = 128, kTokens = 4096, kQHeads = 32, kKvHeads = 8, kSeqs = 32;
constexpr double kKvBytes = 2.0 * kSeqs * kTokens * kKvHeads * kHeadDim * 2;  // K and V, fp16
constexpr double kTolerance = 1e-2;

struct Options {
  int threads = 2;
  int min_runs = 20;
  double min_seconds = 2.0;
  int warmup = 3;
  uint64_t seed = 42;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "ggml_attention_driver: %s (try --help)\n", what.c_str());
  std::exit(2);
}

double number_arg(int argc, char** argv, int& i, double lo, double hi) {
  if (i + 1 >= argc) usage_error(std::string(argv[i]) + " needs a value");
  char* end = nullptr;
  const double v = std::strtod(argv[i + 1], &end);
  if (end == argv[i + 1] || *end != '\0' || !(v >= lo && v <= hi))
    usage_error(std::string(argv[i]) + " must be a number in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                "], got '" + argv[i + 1] + "'");
  ++i;
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: ggml_attention_driver [--threads N] [--min-runs N] [--min-seconds S] [--warmup N] [--seed N]\n"
          "Times ggml_flash_attn_ext on the CPU at kvlab's BM_DecodeContiguous shape\n"
          "(q F32 [128,1,32,32], K/V F16 [128,4096,8,32], no mask, scale 1/sqrt(128)).\n"
          "defaults: --threads 2 --min-runs 20 --min-seconds 2 --warmup 3 --seed 42\n");
      std::exit(0);
    } else if (a == "--threads") {
      o.threads = static_cast<int>(number_arg(argc, argv, i, 1, 512));
    } else if (a == "--min-runs") {
      o.min_runs = static_cast<int>(number_arg(argc, argv, i, 1, 1e6));
    } else if (a == "--min-seconds") {
      o.min_seconds = number_arg(argc, argv, i, 0, 3600);
    } else if (a == "--warmup") {
      o.warmup = static_cast<int>(number_arg(argc, argv, i, 0, 1000));
    } else if (a == "--seed") {
      o.seed = static_cast<uint64_t>(number_arg(argc, argv, i, 0, 9.0e15));
    } else {
      usage_error("unknown argument '" + a + "'");
    }
  }
  return o;
}

/// splitmix64: cheap, seeded, uniform in [-1, 1).
struct Rng {
  uint64_t s;
  float next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
};

void fill_f32(ggml_tensor* t, Rng& rng) {
  auto* p = static_cast<float*>(t->data);
  for (int64_t i = 0, n = ggml_nelements(t); i < n; ++i) p[i] = rng.next();
}

void fill_f16(ggml_tensor* t, Rng& rng) {
  std::vector<float> buf(1 << 16);
  auto* p = static_cast<ggml_fp16_t*>(t->data);
  for (int64_t i = 0, n = ggml_nelements(t); i < n;) {
    const int64_t c = std::min<int64_t>(static_cast<int64_t>(buf.size()), n - i);
    for (int64_t j = 0; j < c; ++j) buf[j] = rng.next();
    ggml_fp32_to_fp16_row(buf.data(), p + i, c);
    i += c;
  }
}

/// Element (d, i1, i2, i3) of a contiguous 4-d tensor, as float.
double at(const ggml_tensor* t, int64_t d, int64_t i1, int64_t i2, int64_t i3) {
  const char* p = static_cast<const char*>(t->data) + d * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
  if (t->type == GGML_TYPE_F16) return ggml_fp16_to_fp32(*reinterpret_cast<const ggml_fp16_t*>(p));
  return *reinterpret_cast<const float*>(p);
}

/// Max abs difference between ggml's output and a float64 softmax(q k^T * scale) v for one
/// (sequence, query head); query head h reads KV head h / (32 / 8), as in kvlab and ggml.
double reference_error(const ggml_tensor* q, const ggml_tensor* k, const ggml_tensor* v, const ggml_tensor* out,
                       int64_t seq, int64_t head, double scale) {
  const int64_t kvh = head / (kQHeads / kKvHeads);
  std::vector<double> s(kTokens);
  double m = -INFINITY;
  for (int64_t t = 0; t < kTokens; ++t) {
    double dot = 0;
    for (int64_t d = 0; d < kHeadDim; ++d) dot += at(q, d, 0, head, seq) * at(k, d, t, kvh, seq);
    s[t] = dot * scale;
    m = std::max(m, s[t]);
  }
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - m));
  double err = 0;
  for (int64_t d = 0; d < kHeadDim; ++d) {
    double acc = 0;
    for (int64_t t = 0; t < kTokens; ++t) acc += s[t] * at(v, d, t, kvh, seq);
    // out is [head_dim, n_heads, n_q_tokens, n_seqs] (ggml permutes heads and tokens)
    const double got = at(out, d, head, 0, seq);
    const double e = std::abs(got - acc / sum);
    err = std::isnan(got) ? INFINITY : std::max(err, e);
  }
  return err;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));

  const size_t q_bytes = sizeof(float) * kHeadDim * kQHeads * kSeqs;
  const size_t kv_bytes = static_cast<size_t>(kKvBytes);
  ggml_init_params ip{};
  ip.mem_size = 2 * q_bytes + kv_bytes + 16 * ggml_tensor_overhead() + ggml_graph_overhead() + (1 << 20);
  ip.mem_buffer = nullptr;
  ip.no_alloc = false;
  ggml_context* ctx = ggml_init(ip);
  if (!ctx) {
    std::fprintf(stderr, "ggml_attention_driver: ggml_init could not allocate %zu bytes\n", ip.mem_size);
    return 1;
  }

  // ggml order is innermost first: [head_dim, tokens, heads, sequences].
  ggml_tensor* q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, kHeadDim, 1, kQHeads, kSeqs);
  ggml_tensor* k = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, kHeadDim, kTokens, kKvHeads, kSeqs);
  ggml_tensor* v = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, kHeadDim, kTokens, kKvHeads, kSeqs);
  Rng rng{opt.seed};
  fill_f16(k, rng);
  fill_f16(v, rng);
  fill_f32(q, rng);

  // No mask: this ggml accepts mask == NULL (every one of the 4096 positions is attended).
  ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, v, nullptr, static_cast<float>(scale), 0.0f, 0.0f);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);

  ggml_threadpool_params tpp = ggml_threadpool_params_default(opt.threads);
  ggml_threadpool* pool = ggml_threadpool_new(&tpp);
  ggml_cplan plan = ggml_graph_plan(graph, opt.threads, pool);
  std::vector<uint8_t> work(plan.work_size);
  plan.work_data = work.data();
  auto run_once = [&] {
    if (ggml_graph_compute(graph, &plan) != GGML_STATUS_SUCCESS) {
      std::fprintf(stderr, "ggml_attention_driver: ggml_graph_compute failed\n");
      std::exit(1);
    }
  };

  run_once();
  const std::pair<int64_t, int64_t> pairs[] = {{0, 0}, {0, 31}, {5, 3}, {13, 17}, {22, 8}, {31, 30}};
  double max_err = 0;
  for (const auto& [seq, head] : pairs) max_err = std::max(max_err, reference_error(q, k, v, out, seq, head, scale));
  std::printf("max_abs_err=%.3e pairs=%zu tolerance=%.0e\n", max_err, std::size(pairs), kTolerance);
  if (!(max_err <= kTolerance)) {
    std::fprintf(stderr, "ggml_attention_driver: result differs from the float64 reference by %.3e (> %.0e)\n", max_err,
                 kTolerance);
    return 1;
  }

  for (int i = 0; i < opt.warmup; ++i) run_once();
  std::vector<double> times;
  const double start = now();
  while (static_cast<int>(times.size()) < opt.min_runs || now() - start < opt.min_seconds) {
    const double t0 = now();
    run_once();
    times.push_back(now() - t0);
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  double total = 0;
  for (double t : times) total += t;

  std::printf("runs=%zu min_s=%.6f max_s=%.6f mean_s=%.6f\n", n, sorted.front(), sorted.back(), total / n);
  std::printf("ggml_peer threads=%d seconds_per_call_median=%.6f kv_bytes_per_call=%.0f kv_gb_per_s=%.3f\n",
              opt.threads, median, kKvBytes, kKvBytes / median / 1e9);

  ggml_threadpool_free(pool);
  ggml_free(ctx);
  return 0;
}
