#include "experiments/figures.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "alloc/error.hpp"
#include "alloc/memory_resource.hpp"
#include "experiments/backend_factory.hpp"
#include "experiments/progress.hpp"
#include "experiments/replayer.hpp"
#include "experiments/report.hpp"
#include "experiments/trace_reader.hpp"
#include "kernels/attention.hpp"
#include "vmm/posix_vm_driver.hpp"
#include "vmm/vmm_backend.hpp"

namespace kvlab {

namespace fs = std::filesystem;

namespace {

// ----------------------------------------------------------------------------------------------
// Shared pieces: tables written as CSV, the README, the machine, the workloads.

/// A small table of strings: written as data.csv and as a Markdown table in the README.
struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;

  void add(std::vector<std::string> row) { rows.push_back(std::move(row)); }
  void write_csv(const fs::path& file, const std::string& command) const {
    std::ofstream f(file);
    if (!f) KVLAB_THROW(Error, "cannot write " + file.string());
    f << "# " << command << "\n";
    for (std::size_t i = 0; i < columns.size(); ++i) f << (i ? "," : "") << columns[i];
    f << "\n";
    for (const auto& r : rows) {
      for (std::size_t i = 0; i < r.size(); ++i) f << (i ? "," : "") << csv_field(r[i]);
      f << "\n";
    }
  }

  [[nodiscard]] std::string markdown() const {
    std::ostringstream s;
    s << "|";
    for (const auto& c : columns) s << " " << c << " |";
    s << "\n|";
    for (std::size_t i = 0; i < columns.size(); ++i) s << "---|";
    s << "\n";
    for (const auto& r : rows) {
      s << "|";
      for (const auto& v : r) s << " " << v << " |";
      s << "\n";
    }
    return s.str();
  }
};

std::string fmt(double v, int digits = 2) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}
std::string pct(double fraction) { return fmt(100.0 * fraction, 1); }

std::string machine() {
  std::ifstream cpu("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpu, line))
    if (line.starts_with("model name")) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  return model + ", " + std::to_string(std::thread::hardware_concurrency()) + " hardware threads";
}

void write_readme(const FigureContext& ctx, const std::string& name, const std::string& title,
                  const std::string& setup, const std::string& clock, const Table& table, const std::string& notes) {
  std::ofstream f(ctx.out / "README.md");
  if (!f) KVLAB_THROW(Error, "cannot write " + (ctx.out / "README.md").string());
  f << "# " << name << " — " << title << "\n\n"
    << "- command: `" << ctx.command << "`\n"
    << "- scale: " << (ctx.full ? "paper (--full)" : "smoke (default; --full for paper scale)") << "\n"
    << "- machine: " << machine() << "\n"
    << "- device and clock: " << clock << "\n"
    << "- setup: " << setup << "\n\n"
    << table.markdown() << "\n"
    << notes << "\n\n"
    << "Files: `data.csv` (the numbers above, first line the command), `" << name << ".png` (the plot, drawn by "
    << "`scripts/plot.py figure " << name << " DIR`).\n";
}

void plot(const FigureContext& ctx, const std::string& name) {
  const std::string script = std::string(KVLAB_SOURCE_DIR) + "scripts/plot.py";
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    if (std::system((std::string(python) + " -c 'import matplotlib' >/dev/null 2>&1").c_str()) != 0) continue;
    const std::string cmd = std::string(python) + " " + shell_quote(script) + " figure " + name + " " + shell_quote(ctx.out.string());
    if (std::system(cmd.c_str()) == 0) return;
    KVLAB_THROW(Error, "plotting " + name + " failed: " + cmd);
  }
  std::cerr << "kvlab figure: no python3 with matplotlib; " << name << ".png not drawn (scripts/setup.sh installs it)\n";
}

/// ShareGPT request lengths (Llama-2 tokenizer, 8k filter) with Poisson arrivals.
std::vector<Request> sharegpt(const FigureContext& ctx, double rate, std::int64_t n, std::uint64_t seed = 0) {
  TraceOptions t;
  t.poisson_rate = rate;
  t.max_requests = n;
  t.seed = seed;
  return read_trace(resolve_trace("sharegpt_8k_filtered_stats_llama2_tokenizer.csv", ctx.trace_dir), t).requests;
}

/// Alpaca-like lengths (short instructions): lognormal prompts with mean ~19 tokens and outputs
/// with mean ~58 tokens, the averages vLLM reports for Alpaca (Fig. 11).
std::vector<Request> alpaca_like(double rate, std::int64_t n, std::uint64_t seed = 0) {
  SyntheticWorkload w;
  w.num_requests = n;
  w.rate = rate;
  w.prompt = LengthDistribution::parse("lognormal:2.78:0.6:512", "prompt");
  w.output = LengthDistribution::parse("lognormal:3.8:0.7:1024", "output");
  w.seed = seed;
  return generate(w);
}

ReplayResult run(const FigureContext& ctx, const std::string& backend, const BackendOptions& o,
                 const std::vector<Request>& w, const ReplayConfig& c) {
  auto b = make_backend(backend, o);
  Progress progress("  " + backend, ctx.progress);
  return replay(*b, w, c, [&](auto d, auto t) { progress.update(d, t); });
}

BackendOptions opt13b_12gb() {
  BackendOptions o;
  o.model = model_preset("opt-13b");
  o.capacity_bytes = 12'000'000'000;  // the KV space OPT-13B leaves on a 40 GB A100 in the vLLM paper
  return o;
}

ReplayConfig a100_40gb() {
  ReplayConfig c;
  c.device = device_model_preset("a100-40gb");
  return c;
}

const char* kModelledA100 = "modelled: declared A100-40GB roofline (1.555 TB/s, 312 TFLOP/s); no GPU was used";

// ----------------------------------------------------------------------------------------------
// 1 + 2. vLLM Fig. 2 (memory breakdown) and Fig. 13 (batched requests) share their replays.

struct OrcaVsVllm {
  std::vector<std::string> backends = {"contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged-16"};
  std::vector<std::string> labels = {"Orca (Max)", "Orca (Pow2)", "Orca (Oracle)", "vLLM (paged, block 16)"};
  std::vector<ReplaySummary> results;
};

OrcaVsVllm orca_vs_vllm(const FigureContext& ctx) {
  OrcaVsVllm r;
  const auto w = sharegpt(ctx, 2.0, ctx.full ? 3000 : 400);
  for (const auto& b : r.backends) r.results.push_back(run(ctx, b, opt13b_12gb(), w, a100_40gb()).summary);
  return r;
}

const std::string kOrcaSetup =
    "OPT-13B, 12 GB of KV cache (A100-40GB), ShareGPT request lengths (sharegpt_8k_filtered_stats_llama2_tokenizer.csv; "
    "requests longer than OPT's 2048-token context rejected, as vLLM filters them), Poisson arrivals at 2 req/s, "
    "FCFS continuous batching, recompute preemption";

void memory_breakdown(const FigureContext& ctx) {
  const double paper[] = {20.4, 26.8, 38.2, 96.3};
  const OrcaVsVllm r = orca_vs_vllm(ctx);
  Table t{{"system", "backend", "token_states_pct", "reserved_pct", "internal_frag_pct", "external_frag_pct", "free_pct",
           "token_states_pct_of_used", "paper_token_states_pct_of_used"}};
  for (std::size_t i = 0; i < r.results.size(); ++i) {
    const MemoryFractions& f = r.results[i].mean_fractions;
    const double used = 1.0 - f.free;
    t.add({r.labels[i], r.backends[i], pct(f.token_states), pct(f.reserved), pct(f.internal_fragmentation),
           pct(f.external_fragmentation), pct(f.free), pct(used > 0 ? f.token_states / used : 0), fmt(paper[i], 1)});
  }
  t.write_csv(ctx.out / "data.csv", ctx.command);
  write_readme(ctx, "memory-breakdown", "vLLM (SOSP'23) Figure 2: where the KV cache memory goes", kOrcaSetup,
               kModelledA100, t,
               "Shares are averaged over the replay weighted by step time (docs/metrics.md). The paper's bars divide the "
               "*used* KV memory into four categories, which `token_states_pct_of_used` matches; the first five "
               "columns divide the whole capacity, free memory included. Differences to expect: the paper's ShareGPT "
               "sample (OPT tokenizer, mean 161 prompt / 338 output tokens) is shorter than the Llama-2-tokenized "
               "ShareGPT file read here, so sequences fill more of a max-length reservation; and the modelled "
               "roofline clock is faster than the paper's GPU, so fewer requests overlap. What reproduces is the "
               "ordering and the gap between reservation schemes and paging.");
  plot(ctx, "memory-breakdown");
}

void batch_size(const FigureContext& ctx) {
  const double paper[] = {7.00, 9.81, 13.62, 30.42};
  const OrcaVsVllm r = orca_vs_vllm(ctx);
  Table t{{"system", "backend", "mean_batched_requests", "max_batch", "preemptions", "paper_mean_batched_requests"}};
  for (std::size_t i = 0; i < r.results.size(); ++i)
    t.add({r.labels[i], r.backends[i], fmt(r.results[i].mean_batch), std::to_string(r.results[i].max_batch),
           std::to_string(r.results[i].preemptions), fmt(paper[i])});
  t.write_csv(ctx.out / "data.csv", ctx.command);
  write_readme(ctx, "batch-size", "vLLM (SOSP'23) Figure 13: average number of batched requests", kOrcaSetup,
               kModelledA100, t,
               "Mean batch = sequences per step weighted by step time. The batch a system sustains is bounded by how "
               "many sequences its KV layout fits; paging lifts that bound, the paper's central result.");
  plot(ctx, "batch-size");
}

// ----------------------------------------------------------------------------------------------
// 3. vLLM Fig. 18b: block size.

void block_size(const FigureContext& ctx) {
  const std::vector<int> sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  Table t{{"workload", "block_size", "mean_normalized_latency_s_per_token", "mean_ttft_s", "token_states_pct",
           "reserved_pct", "internal_frag_pct", "mean_batch", "preemptions"}};
  const std::int64_t n = ctx.full ? 2000 : 300;
  const std::vector<std::pair<std::string, std::vector<Request>>> workloads = {
      {"ShareGPT @ 2 req/s", sharegpt(ctx, 2.0, n)}, {"Alpaca-like @ 30 req/s", alpaca_like(30.0, n)}};
  for (const auto& [label, w] : workloads)
    for (int b : sizes) {
      const ReplaySummary s = run(ctx, "paged-" + std::to_string(b), opt13b_12gb(), w, a100_40gb()).summary;
      t.add({label, std::to_string(b), fmt(s.mean_normalized_latency_s, 4), fmt(s.mean_ttft_s, 3),
             pct(s.mean_fractions.token_states), pct(s.mean_fractions.reserved),
             pct(s.mean_fractions.internal_fragmentation), fmt(s.mean_batch), std::to_string(s.preemptions)});
    }
  t.write_csv(ctx.out / "data.csv", ctx.command);
  write_readme(ctx, "block-size", "vLLM (SOSP'23) Figure 18b: latency and fragmentation against block size",
               "OPT-13B, 12 GB of KV, paged backend at block sizes 1..256; ShareGPT lengths at 2 req/s and "
               "Alpaca-like lengths (lognormal, means ~19 / ~58 tokens) at 30 req/s",
               kModelledA100, t,
               "Paper: block sizes 16 to 128 are best on ShareGPT, 16 to 32 on Alpaca; smaller blocks lose on GPU "
               "kernel efficiency (more block-table lookups, less parallelism per block), larger ones on internal "
               "fragmentation. The modelled clock has no block-size term, so this figure shows only the "
               "fragmentation side: internal fragmentation grows with block size, most on the short Alpaca "
               "sequences. The kernel side is measured on the host in `kernel-overhead`.");
  plot(ctx, "block-size");
}

// ----------------------------------------------------------------------------------------------
// 4. Kernel overhead of the paged view (vLLM Fig. 18a, vAttention).

/// Median seconds of `reps` runs of attention over `layers` layers of the prepared batch.
double time_attention(KvBackend& b, const std::vector<SeqId>& ids, const std::vector<std::int32_t>& q_indptr,
                      int reps) {
  const ModelGeometry& m = b.model();
  const PreparedBatch pb = b.prepare_batch(ids);
  std::vector<float> q(static_cast<std::size_t>(q_indptr.back()) * m.num_q_heads * m.head_dim, 0.5f), out(q.size());
  AttentionParams p;
  p.batch = pb.batch;
  p.num_q_heads = m.num_q_heads;
  p.num_kv_heads = m.num_kv_heads;
  p.head_dim = m.head_dim;
  p.scale = 1.f / std::sqrt(static_cast<float>(m.head_dim));
  p.q = q.data();
  p.out = out.data();
  p.q_indptr = q_indptr.back() == pb.batch ? nullptr : q_indptr.data();
  p.seq_lens = pb.seq_lens;
  const KvView view = b.layer_view(0);
  host_attention(p, view);  // warm up
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    host_attention(p, view);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void kernel_overhead(const FigureContext& ctx) {
  // One layer of Llama-3-8B's attention (32 query / 8 KV heads, head dim 128, fp16 KV).
  ModelGeometry m = model_preset("llama-3-8b");
  m.name = "llama-3-8b (1 layer)";
  m.num_layers = 1;
  const int batch = 8, reps = ctx.full ? 15 : 3;
  const std::vector<std::int64_t> contexts = ctx.full ? std::vector<std::int64_t>{512, 2048, 8192}
                                                      : std::vector<std::int64_t>{256, 1024};
  const std::int32_t prefill_q = ctx.full ? 128 : 32;
  std::vector<std::string> backends = {"contiguous-oracle", "paged-1", "paged-16", "paged-256"};
  for (const auto& f : backend_forms())
    if (f.starts_with("vmm-")) {  // the vmm backend hands the kernel the contiguous view
      backends.push_back(f);
      break;
    }
  Table t{{"phase", "context", "backend", "latency_ms", "relative_to_contiguous"}};
  for (const char* phase : {"decode", "prefill"}) {
    for (std::int64_t ctx_len : contexts) {
      double base = 0;
      for (const auto& name : backends) {
        BackendOptions o;
        o.model = m;
        o.max_seq_len = 8192;
        o.capacity_bytes = static_cast<std::size_t>(batch) * (ctx_len + 512) * m.kv_bytes_per_token();
        o.memory = &host_memory_resource();
        auto b = make_backend(name, o);
        std::vector<SeqId> ids;
        std::vector<std::int32_t> q_indptr{0};
        const std::int32_t q_len = std::string(phase) == "decode" ? 1 : prefill_q;
        for (int s = 0; s < batch; ++s) {
          b->admit(s, {ctx_len, ctx_len}, ctx_len);
          ids.push_back(s);
          q_indptr.push_back(q_indptr.back() + q_len);
        }
        // Fill the cache so every view reads the same, non-trivial bytes.
        b->prepare_batch(ids);
        const KvView v = b->layer_view(0);
        for (int s = 0; s < batch; ++s)
          for (std::int64_t tok = 0; tok < ctx_len;) {
            const std::int64_t run_len = v.layout == KvLayout::paged ? as_paged<half_t>(v).run(s, tok, ctx_len)
                                                                     : ctx_len - tok;
            const std::size_t bytes = static_cast<std::size_t>(run_len) * v.token_stride * sizeof(half_t);
            half_t* k = v.layout == KvLayout::paged ? as_paged<half_t>(v).k(s, tok, 0) : as_contiguous<half_t>(v).k(s, tok, 0);
            half_t* val = v.layout == KvLayout::paged ? as_paged<half_t>(v).v(s, tok, 0) : as_contiguous<half_t>(v).v(s, tok, 0);
            std::memset(static_cast<void*>(k), 0x3c, bytes);  // 0x3c3c: a small positive half
            std::memset(static_cast<void*>(val), 0x3c, bytes);
            tok += run_len;
          }
        const double sec = time_attention(*b, ids, q_indptr, reps);
        if (name == "contiguous-oracle") base = sec;
        t.add({phase, std::to_string(ctx_len), name, fmt(sec * 1e3, 3), fmt(sec / base, 3)});
        for (SeqId id : ids) b->release(id);
      }
    }
  }
  t.write_csv(ctx.out / "data.csv", ctx.command);
  write_readme(ctx, "kernel-overhead",
               "vLLM (SOSP'23) Figure 18a / vAttention (ASPLOS'25): attention latency through paged, contiguous and "
               "vmm views",
               "one attention layer of Llama-3-8B (32 query / 8 KV heads, head dim 128, fp16 KV), batch 8, decode "
               "(1 query token) and prefill (" + std::to_string(prefill_q) + " query tokens after the cached "
               "context), the same cache bytes in each backend's own memory layout",
               "measured on the host CPU with kvlab's host attention kernel (median of " + std::to_string(reps) +
                   " runs); no GPU was used",
               t,
               "Paper (GPU): the paged attention kernel is 20-26 % slower than FasterTransformer's contiguous one "
               "(vLLM) and paged prefill up to 37-42 % slower (vAttention). On the host the paged view costs one "
               "block-table lookup per block; at block size 1 that is one per token, which is where it shows. The "
               "vmm backend hands out the contiguous view, so it runs the unmodified contiguous kernel.");
  plot(ctx, "kernel-overhead");
}

// ----------------------------------------------------------------------------------------------
// 7. vLLM Fig. 15: sharing in parallel sampling and beam search.

void sharing(const FigureContext& ctx) {
  const double paper_parallel[] = {6.09, 8.53, 9.79}, paper_beam[] = {37.56, 53.13, 55.16};
  const auto w = alpaca_like(ctx.full ? 10.0 : 20.0, ctx.full ? 2000 : 200);
  Table t{{"decoding", "outputs", "memory_saving_pct", "paper_memory_saving_pct", "mean_batch"}};
  const int outs[] = {2, 4, 6};
  for (int beam = 0; beam < 2; ++beam)
    for (int i = 0; i < 3; ++i) {
      ReplayConfig c = a100_40gb();
      c.samples_per_request = outs[i];
      c.beam_reselect_probability = beam ? 0.5 : 0.0;
      const ReplayResult r = run(ctx, "paged-16", opt13b_12gb(), w, c);
      double saved = 0, total = 0;
      for (const StepRecord& s : r.steps) {
        saved += s.duration_s * static_cast<double>(s.shared_savings_bytes);
        total += s.duration_s * static_cast<double>(s.shared_savings_bytes + s.allocated_bytes);
      }
      t.add({beam ? "beam search" : "parallel sampling", std::to_string(outs[i]), pct(total > 0 ? saved / total : 0),
             fmt(beam ? paper_beam[i] : paper_parallel[i]), fmt(r.summary.mean_batch)});
    }
  t.write_csv(ctx.out / "data.csv", ctx.command);
  write_readme(ctx, "sharing", "vLLM (SOSP'23) Figure 15: memory saved by sharing KV blocks",
               "OPT-13B, 12 GB of KV, paged backend (block 16), Alpaca-like lengths (lognormal, means ~19 / ~58 "
               "tokens); parallel sampling forks the prompt into n sequences; beam search is modelled as beams that, "
               "after every step, each continue from another beam with probability 0.5 (a seeded stand-in for top-k "
               "beam selection)",
               kModelledA100, t,
               "Memory saving = bytes that sharing saves / bytes the sequences would hold unshared, weighted by step "
               "time. Parallel sampling shares only the prompt, so its saving is small on Alpaca's short prompts; "
               "beam search also shares generated tokens, so it saves much more. The beam model is a stand-in: its "
               "reselection rate sets how much beams share.");
  plot(ctx, "sharing");
}

// ----------------------------------------------------------------------------------------------
// 8. Prefix caching (SGLang Fig. 8 style): hit rate against batch size, and throughput.

void prefix_cache(const FigureContext& ctx) {
  struct Source {
    std::string label, file;
    double anchor_pct;
    std::string anchor;
  };
  const std::vector<Source> sources = {
      {"Mooncake conversation", "conversation_trace.jsonl", 40.0, "Mooncake (FAST'25) cache ratio"},
      {"Mooncake synthetic", "synthetic_trace.jsonl", 66.0, "Mooncake (FAST'25) cache ratio"},
      {"ShareGPT (LLMServingSim, token ids)", "sharegpt-llama-3.1-8b-300-sps10.jsonl", 7.59,
       "LLMServingSim prefix hit ratio, 16-token blocks"},
  };
  const std::vector<int> batches = ctx.full ? std::vector<int>{8, 32, 128, 512} : std::vector<int>{8, 64, 256};
  BackendOptions o;
  o.model = model_preset("llama-3-8b");
  o.max_seq_len = 200'000;  // Mooncake prompts reach 191k tokens
  o.capacity_bytes = std::size_t{ctx.full ? 128ull : 64ull} << 30;
  Table t{{"trace", "backend", "max_batch", "hit_rate_pct", "prefill_tokens_saved", "mean_batch", "tokens_per_s",
           "mean_ttft_s", "anchor_pct", "anchor"}};
  for (const Source& src : sources) {
    TraceOptions topt;
    topt.max_requests = ctx.full ? 0 : 300;
    const auto w = read_trace(resolve_trace(src.file, ctx.trace_dir), topt).requests;
    for (const char* backend : {"paged-16-radix", "paged-16-hash", "paged-16"})
      for (int mb : batches) {
        if (std::string(backend) != "paged-16-radix" && mb != batches.back()) continue;  // one point each
        ReplayConfig c;
        c.max_running = mb;
        c.max_batched_tokens = 32768;
        c.chunked_prefill = true;
        const ReplaySummary s = run(ctx, backend, o, w, c).summary;
        const double queried = static_cast<double>(s.prefix_lookup_tokens);
        const double rate = queried > 0 ? static_cast<double>(s.prefix_hit_tokens) / queried : 0;
        t.add({src.label, backend, std::to_string(mb), pct(rate), std::to_string(s.prefix_hit_tokens), fmt(s.mean_batch),
               fmt(s.makespan_s > 0 ? static_cast<double>(s.generated_tokens) / s.makespan_s : 0, 0),
               fmt(s.mean_ttft_s, 3), fmt(src.anchor_pct, 2), src.anchor});
      }
  }
  t.write_csv(ctx.out / "data.csv", ctx.command);
  write_readme(ctx, "prefix-cache", "SGLang (Fig. 8 style): prefix-cache hit rate against batch size, and throughput",
               "Llama-3-8B geometry with max_seq_len 200k, " + std::to_string(o.capacity_bytes >> 30) +
                   " GiB of KV, paged backend (block 16) with the radix (SGLang) and hash (vLLM v1) prefix caches and "
                   "without; Mooncake traces (hash_ids per 512-token block, turned into token ids) and the "
                   "LLMServingSim ShareGPT file (real token ids); trace arrival times; chunked prefill, 32k tokens "
                   "per step" + std::string(ctx.full ? "" : "; first 300 requests of each trace"),
               "modelled: declared A100-80GB roofline; prefill skipped for hit tokens; no GPU was used", t,
               "Hit rate = prompt tokens served from the cache / prompt tokens looked up. The anchors are what the "
               "trace owners report: Mooncake's cache ratios assume a large distributed cache over the whole trace, "
               "so a smoke-scale prefix of the trace and a single node's KV capacity see less; LLMServingSim's 7.59 % "
               "is for the same ShareGPT file at 16-token blocks. Larger batches keep more sequences (and their "
               "prefixes) resident, which raises the hit rate until capacity, not batch size, limits it.");
  plot(ctx, "prefix-cache");
}

// ----------------------------------------------------------------------------------------------
// 5. vmm page size: map latency, mapping bandwidth and fragmentation.

struct MapTiming {
  double map_us = 0, unmap_us = 0, touch_map_us = 0;
};

/// Maps and unmaps `pages` pages of `page` bytes `rounds` times through the POSIX VM driver: the
/// mean per page of map+set_access and of unmap, and of map+set_access+first write (which is when
/// the host commits the physical page — the cost a GPU pays inside cuMemCreate/cuMemMap instead).
MapTiming time_mapping(std::size_t page, int pages, int rounds) {
  PosixVmDriver driver(page * static_cast<std::size_t>(pages));
  void* base = driver.reserve(page * static_cast<std::size_t>(pages), page);
  std::vector<PhysHandle> handles;
  for (int i = 0; i < pages; ++i) handles.push_back(*driver.create(page));
  MapTiming t;
  using clock = std::chrono::steady_clock;
  for (int r = 0; r < rounds; ++r) {
    const bool touch = r % 2 == 1;
    const auto t0 = clock::now();
    for (int i = 0; i < pages; ++i) {
      void* va = static_cast<char*>(base) + static_cast<std::size_t>(i) * page;
      (void)driver.map(va, page, handles[static_cast<std::size_t>(i)]);
      driver.set_access(va, page);
      if (touch)
        for (std::size_t off = 0; off < page; off += 4096) static_cast<volatile char*>(va)[off] = 1;
    }
    const auto t1 = clock::now();
    driver.synchronize();
    for (int i = 0; i < pages; ++i) driver.unmap(static_cast<char*>(base) + static_cast<std::size_t>(i) * page, page);
    const auto t2 = clock::now();
    const double per = 1e6 / pages / (rounds / 2.0);
    (touch ? t.touch_map_us : t.map_us) += std::chrono::duration<double>(t1 - t0).count() * per;
    t.unmap_us += std::chrono::duration<double>(t2 - t1).count() * 1e6 / pages / rounds;
  }
  for (PhysHandle h : handles) driver.release(h);
  driver.free_reservation(base, page * static_cast<std::size_t>(pages));
  return t;
}

void page_size(const FigureContext& ctx) {
  const std::vector<std::pair<std::string, std::size_t>> pages = {
      {"4k", 4096}, {"64k", 64 << 10}, {"256k", 256 << 10}, {"2m", 2 << 20}};
  Table t{{"page", "layout", "map_us_per_page", "unmap_us_per_page", "map_bandwidth_GBps", "map_touch_us_per_page",
           "map_touch_bandwidth_GBps", "token_states_pct", "internal_frag_pct", "reserved_pct", "mean_batch"}};
  const auto w = sharegpt(ctx, 4.0, ctx.full ? 2000 : 300);
  BackendOptions o;
  o.model = model_preset("llama-3-8b");
  o.capacity_bytes = std::size_t{8} << 30;
  ReplayConfig c;
  for (const auto& [label, bytes] : pages) {
    const int count = static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / bytes, 8, 4096));
    const MapTiming m = time_mapping(bytes, count, ctx.full ? 10 : 4);
    for (const char* layout : {"per-layer", "megacache"}) {
      const std::string name = "vmm-" + label + (std::string(layout) == "megacache" ? "-mega" : "");
      const ReplaySummary s = run(ctx, name, o, w, c).summary;
      t.add({label, layout, fmt(m.map_us, 2), fmt(m.unmap_us, 2), fmt(static_cast<double>(bytes) / m.map_us / 1e3, 1),
             fmt(m.touch_map_us, 2), fmt(static_cast<double>(bytes) / m.touch_map_us / 1e3, 2),
             pct(s.mean_fractions.token_states), pct(s.mean_fractions.internal_fragmentation),
             pct(s.mean_fractions.reserved), fmt(s.mean_batch)});
    }
  }
  t.write_csv(ctx.out / "data.csv", ctx.command);
  write_readme(ctx, "page-size", "vAttention (ASPLOS'25): mapping cost and fragmentation against page size",
               "mapping: the POSIX VM driver (memfd + mmap MAP_FIXED|MAP_SHARED + mprotect) mapping and unmapping "
               "up to 256 MiB in pages of each size; fragmentation: Llama-3-8B, 8 GiB of KV, ShareGPT lengths at "
               "4 req/s through vmm at each page size, per-layer tensors and the layer-interleaved megacache",
               "mapping measured on the host CPU (a GPU's cuMemMap path differs; run tests/gpu/run.sh there); "
               "fragmentation modelled (A100-80GB roofline)",
               t,
               "vAttention measured ~40 us per cuMemMap+cuMemSetAccess on a GPU and 7.6 GB/s of mapping bandwidth "
               "with 64 KiB pages, against a serving need of at most ~750 MB/s. On the host, mapping without "
               "touching is nearly free per page (the kernel defers the work), so `map_touch_*` — which includes "
               "committing the page on first write — is the fair comparison. Fragmentation: with per-layer tensors "
               "every sequence holds at least one page per layer for K and V (2 x 32 pages), so 2 MiB pages waste "
               "most of a page per tensor; the megacache puts all layers of a token in one tensor and brings that "
               "back to one page per sequence.");
  plot(ctx, "page-size");
}

// ----------------------------------------------------------------------------------------------
// 6. vAttention Fig. 11: per-step latency with synchronous vs background mapping.

void overlap(const FigureContext& ctx) {
  // Execute mode: host attention kernels over real vmm memory; the step time is the measured kernel
  // time plus the mapping done on the critical path. Short prompts and long outputs make many
  // sequences cross page boundaries during decode, as in vAttention's experiment.
  ModelGeometry m = model_preset("llama-3-8b");
  SyntheticWorkload w;
  w.num_requests = ctx.full ? 64 : 16;
  w.rate = 0;  // all at once: one full decode batch
  w.prompt = LengthDistribution::parse("uniform:64:256", "prompt");
  w.output = LengthDistribution::parse(ctx.full ? "fixed:256" : "fixed:48", "output");
  const auto workload = generate(w);
  BackendOptions o;
  o.model = m;
  o.max_seq_len = 1024;
  o.capacity_bytes = std::size_t{ctx.full ? 8ull : 3ull} << 30;
  o.memory = &host_memory_resource();
  ReplayConfig c;
  c.execute = true;
  c.execute_layers = 1;
  Table t{{"page", "mapping", "mean_step_ms", "p99_step_ms", "max_step_ms", "mean_critical_mapping_ms",
           "steps_with_mapping"}};
  Table series{{"page", "mapping", "step", "step_ms", "mapping_ms"}};
  // (4 KiB pages would need more than Linux's default 65,530 mappings per process at this size.)
  for (const char* page : {"16k", "64k"})
    for (const char* mode : {"synchronous", "background"}) {
      const std::string name = std::string("vmm-") + page + (std::string(mode) == "background" ? "-overlap" : "");
      const ReplayResult r = run(ctx, name, o, workload, c);
      std::vector<double> steps;
      double mapping = 0;
      int with_mapping = 0;
      for (std::size_t i = 0; i < r.steps.size(); ++i) {
        const StepRecord& s = r.steps[i];
        if (s.decode_tokens == 0) continue;  // decode steps only, as the paper plots
        steps.push_back(s.duration_s * 1e3);
        mapping += s.mapping_s * 1e3;
        with_mapping += s.mapping_s > 0;
        series.add({page, mode, std::to_string(i), fmt(s.duration_s * 1e3, 3), fmt(s.mapping_s * 1e3, 4)});
      }
      std::vector<double> sorted = steps;
      std::sort(sorted.begin(), sorted.end());
      double mean = 0;
      for (double x : steps) mean += x;
      mean /= std::max<std::size_t>(steps.size(), 1);
      t.add({page, mode, fmt(mean, 3), fmt(sorted.empty() ? 0 : sorted[sorted.size() * 99 / 100], 3),
             fmt(sorted.empty() ? 0 : sorted.back(), 3), fmt(mapping / std::max<std::size_t>(steps.size(), 1), 4),
             std::to_string(with_mapping)});
    }
  t.write_csv(ctx.out / "data.csv", ctx.command);
  series.write_csv(ctx.out / "steps.csv", ctx.command);
  write_readme(ctx, "overlap", "vAttention (ASPLOS'25) Figure 11: decode step latency, synchronous vs background mapping",
               "Llama-3-8B (one layer run, time scaled to 32), " + std::to_string(w.num_requests) +
                   " requests decoding together from 64-256-token prompts, vmm with 16 KiB and 64 KiB pages, "
                   "mapping on the critical path (synchronous) or by a background thread while the step computes",
               "measured on the host CPU: execute mode, step = attention kernel time + critical-path mapping time", t,
               "Paper (GPU, Yi-6B class model): 25 ms decode steps spike to 41 ms when sequences cross page "
               "boundaries and pages are mapped synchronously; background mapping removes the spikes. Here the "
               "host attention kernels are much slower than a GPU's, so mapping is a smaller share of a step, but "
               "the critical-path mapping time (and its spikes in steps.csv) drops to near zero with overlap.");
  plot(ctx, "overlap");
}

}  // namespace

const std::vector<Figure>& figures() {
  static const std::vector<Figure> all = {
      {"memory-breakdown", "vLLM Fig. 2: memory breakdown, Orca max/pow2/oracle vs paged", memory_breakdown},
      {"batch-size", "vLLM Fig. 13: average batched requests", batch_size},
      {"block-size", "vLLM Fig. 18b: latency and fragmentation vs block size", block_size},
      {"kernel-overhead", "vLLM Fig. 18a / vAttention: attention through paged, contiguous, vmm views", kernel_overhead},
      {"sharing", "vLLM Fig. 15: memory saved by parallel sampling and beam search", sharing},
      {"prefix-cache", "SGLang Fig. 8 style: prefix-cache hit rate vs batch size, throughput", prefix_cache},
      {"page-size", "vAttention: map latency, mapping bandwidth and fragmentation per page size", page_size},
      {"overlap", "vAttention Fig. 11: step latency with synchronous vs background mapping", overlap},
  };
  return all;
}

const Figure& find_figure(const std::string& name) {
  for (const Figure& f : figures())
    if (f.name == name) return f;
  std::string known;
  for (const Figure& f : figures()) known += (known.empty() ? "" : ", ") + f.name;
  KVLAB_THROW(InvalidArgument, "unknown figure '" + name + "' (known: " + known + ", all)");
}

}  // namespace kvlab
