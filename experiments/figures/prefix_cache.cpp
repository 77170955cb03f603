// SGLang (Fig. 8 style): prefix-cache hit rate against batch size, KV capacity and cache policy, and
// throughput, on traces that carry prompt token ids or block hashes.
#include <fmt/format.h>

#include "experiments/figures/figure_kit.hpp"
#include "experiments/figures/figure_list.hpp"
#include "serving/replay/schedule_policy.hpp"
#include "serving/traces/trace_reader.hpp"

namespace kvlab::fig {

namespace {
struct Source {
  std::string label, file;
  double anchor_pct;
  std::string anchor;  ///< who reports anchor_pct
};

const std::vector<Source>& sources() {
  static const std::vector<Source> all = {
      {"Mooncake conversation", "conversation_trace.jsonl", 40.0, "Mooncake (FAST'25) cache ratio"},
      {"Mooncake synthetic", "synthetic_trace.jsonl", 66.0, "Mooncake (FAST'25) cache ratio"},
      {"ShareGPT (LLMServingSim, token ids)", "sharegpt-llama-3.1-8b-300-sps10.jsonl", 7.59,
       "LLMServingSim prefix hit ratio, 16-token blocks"},
  };
  return all;
}

double counter(const ReplaySummary& s, const std::string& name) {
  for (const auto& [n, v] : s.backend_counters)
    if (n == name) return v;
  return 0;
}

/// One replay's numbers, for the table and for the notes written from them. A rate is named by
/// its denominator: of_prompt (every request's prompt tokens, once) or of_looked_up (the prompt
/// tokens first admissions looked up: a chunked prefill's later chunks are not looked up).
struct Point {
  std::string trace, backend, schedule;
  int capacity_gib = 0, max_batch = 0;
  std::int64_t prompt_tokens = 0, hit_tokens = 0, looked_up_tokens = 0;  // first admissions
  std::int64_t readmission_hit_tokens = 0, preemptions = 0;
  double of_prompt = 0, of_looked_up = 0;
};

/// The replay of `w` through `backend` with `capacity_gib` of KV and at most `max_batch` running
/// sequences: a table row and its numbers.
Point measure(const FigureContext& ctx, const Source& src, const std::vector<Request>& w, BackendOptions o,
              const std::string& backend, int capacity_gib, int max_batch, Table& t, bool lpm = false) {
  o.capacity_bytes = static_cast<std::size_t>(capacity_gib) << 30;
  ReplayConfig c;
  c.schedule.policy = lpm ? SchedulePolicy::lpm : SchedulePolicy::fcfs;
  c.max_running = max_batch;
  c.max_batched_tokens = 32768;
  c.chunked_prefill = true;
  const ReplaySummary s = run(ctx, backend, o, w, c).summary;
  const auto ratio = [](std::int64_t a, std::int64_t b) {
    return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0;
  };
  // Across requests: admissions after a preemption (mostly re-hitting their own KV) left out, as
  // vLLM v1 leaves its preempted_* stats out of the hit rate.
  Point p{src.label, backend, lpm ? "lpm" : "fcfs", capacity_gib, max_batch};
  p.prompt_tokens = s.prompt_tokens;
  p.hit_tokens = s.prefix_hit_tokens - s.prefix_preempted_hit_tokens;
  p.looked_up_tokens = s.prefix_lookup_tokens - s.prefix_preempted_lookup_tokens;
  p.readmission_hit_tokens = s.prefix_preempted_hit_tokens;
  p.preemptions = s.preemptions;
  p.of_prompt = ratio(p.hit_tokens, p.prompt_tokens);
  p.of_looked_up = ratio(p.hit_tokens, p.looked_up_tokens);
  t.add({src.label, backend, p.schedule, std::to_string(capacity_gib), std::to_string(max_batch),
         std::to_string(p.prompt_tokens), std::to_string(p.hit_tokens), pct(p.of_prompt),
         std::to_string(p.looked_up_tokens), pct(p.of_looked_up), std::to_string(p.readmission_hit_tokens),
         std::to_string(p.preemptions), fixed(counter(s, "prefix_inserted_blocks"), 0),
         fixed(counter(s, "prefix_evictions"), 0), fixed(s.mean_batch),
         fixed(s.makespan_s > 0 ? static_cast<double>(s.generated_tokens) / s.makespan_s : 0, 0),
         fixed(s.mean_ttft_s, 3), fixed(src.anchor_pct, 2), src.anchor});
  return p;
}

/// The hash cache with a host-memory tier of 512 GiB (accounting only: no host bytes are allocated).
const char* const kHostBackend = "paged-16-hash-host512";

/// How to read the table; every number in it recorded in `f` with its source.
std::string notes(Facts& f, int small, int home) {
  const SchedulePolicyOptions lpm;
  const DeviceModel clock = ReplayConfig{}.device;  // the one measure() replays on
  return fmt::format(
      "hit_rate_of_prompt_tokens_pct = prefix_hit_tokens / prompt_tokens: prompt tokens served from the cache over "
      "every served request's prompt tokens, counted once (requests rejected as too long for the capacity are not "
      "served, so at {} GiB the Mooncake traces serve fewer prompt tokens than at {} GiB). "
      "hit_rate_of_looked_up_tokens_pct divides the same hits by the "
      "prompt tokens looked up (looked_up_tokens), which leaves out the later chunks of a chunked prefill, so it is "
      "higher; it is not a share of the prompts. Both leave out admissions of requests preempted before "
      "(recompute), as vLLM v1 leaves its preempted_* counters out of its hit rate: readmission_hit_tokens is what "
      "those found, mostly their own prompt and generated tokens from before the preemption. Every full block is "
      "cached as soon as it is full, prefill chunks and decode alike (vLLM v1, "
      "SGLang); generated tokens have ids where the trace implies them (a Mooncake conversation's next turn holds "
      "the previous prompt and answer) and fresh unique ids otherwise, so only the request itself can re-hit "
      "them. schedule: fcfs admits in arrival order; lpm is SGLang's longest prefix match (the waiting requests "
      "with the most cached prompt tokens first, among the first {}; one that waited {} s goes first). "
      "paged-16-hash-host512 adds a {} GiB host tier to the hash cache: evicted cached blocks move there and "
      "come back on a hit, each transfer charged at the device model's host link bandwidth ({} GB/s for the "
      "A100). inserted_blocks are entries made, evicted_blocks entries dropped altogether; summary.json's "
      "counters have the host tier's own (prefix_host_*). "
      "The anchors are what the trace owners report: Mooncake's cache ratios assume a large distributed cache "
      "over the whole trace; LLMServingSim's {} % is for the same ShareGPT file at 16-token blocks.",
      f.quote("smallest KV capacity (GiB)", small, 0, "setup"),
      f.quote("batch sweep's KV capacity (GiB)", home, 0, "setup"),
      f.quote("lpm: waiting requests reordered", static_cast<double>(lpm.window), 0,
              "SchedulePolicyOptions (SGLang's 128)"),
      f.quote("lpm: fairness bound (s)", lpm.max_wait_s, 0, "SchedulePolicyOptions"),
      f.quote("host tier (GiB)", 512, 0, "setup (paged-16-hash-host512)"),
      f.quote("host link bandwidth (GB/s)", clock.host_bandwidth / 1e9, 0, "device model " + clock.name),
      f.quote("LLMServingSim ShareGPT hit rate (%)", 7.59, 2, "LLMServingSim, the anchor column"));
}

/// What the table says, trace by trace, in numbers taken from it.
std::string findings(const std::vector<Point>& pts, int home, int top, int small, int large) {
  const auto at = [&](const std::string& trace, const std::string& backend, int gib,
                      const std::string& schedule = "fcfs") -> const Point* {
    for (const Point& p : pts)
      if (p.trace == trace && p.backend == backend && p.capacity_gib == gib && p.max_batch == top &&
          p.schedule == schedule)
        return &p;
    return nullptr;
  };
  std::string out;
  for (const Source& src : sources()) {
    const Point* r = at(src.label, "paged-16-radix", home);
    const Point *rs = at(src.label, "paged-16-radix", small), *rl = at(src.label, "paged-16-radix", large);
    const Point *hs = at(src.label, "paged-16-hash", small), *hl = at(src.label, "paged-16-hash", large);
    const Point *ls = at(src.label, "paged-16-radix", small, "lpm"),
                *ll = at(src.label, "paged-16-radix", large, "lpm");
    const Point *os = at(src.label, kHostBackend, small), *ol = at(src.label, kHostBackend, large);
    if (!r || !rs || !rl || !hs || !hl || !ls || !ll || !os || !ol) continue;
    out += fmt::format(
        " {}: at {} GiB and batch {} radix serves {} % of the {} prompt tokens from the cache ({} hit tokens; {} % "
        "of the {} looked up; its {} preemptions' re-admissions found {} more, left out); from {} to {} GiB the "
        "share of prompt tokens goes {} -> {} % with radix, {} -> {} % with hash, {} -> {} % with hash and the "
        "host tier, and {} -> {} % with radix under longest-prefix-match scheduling ({} and {} preemptions).",
        src.label, home, top, pct(r->of_prompt), r->prompt_tokens, r->hit_tokens, pct(r->of_looked_up),
        r->looked_up_tokens, r->preemptions, r->readmission_hit_tokens, small, large, pct(rs->of_prompt),
        pct(rl->of_prompt), pct(hs->of_prompt), pct(hl->of_prompt), pct(os->of_prompt), pct(ol->of_prompt),
        pct(ls->of_prompt), pct(ll->of_prompt), ls->preemptions, ll->preemptions);
  }
  return out;
}

void prefix_cache(const FigureContext& ctx) {
  const std::vector<int> batches = ctx.full ? std::vector<int>{8, 32, 128, 512} : std::vector<int>{8, 64, 256};
  const std::vector<int> capacities = ctx.full ? std::vector<int>{8, 16, 64, 128} : std::vector<int>{8, 16, 64};
  const int home = 64;  // GiB of the batch sweep
  BackendOptions o;
  o.model = model_preset("llama-3-8b");
  o.max_seq_len = 200'000;  // Mooncake prompts reach 191k tokens
  Table t{{"trace", "backend", "schedule", "capacity_gib", "max_batch", "prompt_tokens", "prefix_hit_tokens",
           "hit_rate_of_prompt_tokens_pct", "looked_up_tokens", "hit_rate_of_looked_up_tokens_pct",
           "readmission_hit_tokens", "preemptions", "inserted_blocks", "evicted_blocks", "mean_batch",
           "throughput_tokens_per_s", "ttft_mean_s", "anchor_pct", "anchor"}};
  std::vector<Point> pts;
  for (const Source& src : sources()) {
    TraceOptions topt;
    topt.max_requests = ctx.full ? 0 : 300;
    const auto w = read_trace(resolve_trace(src.file, ctx.trace_dir), topt).requests;
    for (int mb : batches) pts.push_back(measure(ctx, src, w, o, "paged-16-radix", home, mb, t));  // SGLang Fig. 8
    for (const std::string backend : {"paged-16-radix", "paged-16-hash", "paged-16"})  // capacity and policy
      for (int gib : capacities) {
        if (backend == "paged-16-radix" && gib == home) continue;  // in the batch sweep
        pts.push_back(measure(ctx, src, w, o, backend, gib, batches.back(), t));
      }
    for (int gib : capacities)  // cache-aware scheduling: SGLang's longest prefix match
      pts.push_back(measure(ctx, src, w, o, "paged-16-radix", gib, batches.back(), t, true));
    for (int gib : capacities)  // a host tier under the device cache
      pts.push_back(measure(ctx, src, w, o, kHostBackend, gib, batches.back(), t));
  }
  Facts facts;
  const std::string reading = notes(facts, capacities.front(), home);
  publish(ctx,
          {"prefix-cache",
           "SGLang (Fig. 8 style): prefix-cache hit rate against batch size, KV capacity and cache policy, and "
           "throughput",
           fmt::format("Llama-3-8B geometry with max_seq_len 200k, paged backend (block 16) with the radix (SGLang) "
                       "and hash (vLLM v1) prefix caches, the hash cache with a 512 GiB host tier, and without; batch "
                       "sweep at {} GiB of KV, capacity sweep at "
                       "batch {}; Mooncake traces (hash_ids per 512-token block, turned into token ids) and the "
                       "LLMServingSim ShareGPT file (real token ids); trace arrival times; chunked prefill, 32k "
                       "tokens per step{}",
                       home, batches.back(), ctx.full ? "" : "; first 300 requests of each trace"),
           "modelled: declared A100-80GB roofline; prefill skipped for hit tokens; no GPU was used",
           reading + findings(pts, home, batches.back(), capacities.front(), capacities.back()) +
               " docs/prefix-caching.md explains the numbers.",
           "", facts},
          t);
}
}  // namespace

Figure prefix_cache_figure() {
  return {"prefix-cache", "SGLang Fig. 8 style: prefix-cache hit rate vs batch size, capacity, policy", prefix_cache};
}

}  // namespace kvlab::fig
