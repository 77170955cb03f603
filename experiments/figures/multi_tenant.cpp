// kvcached (ovg-project/kvcached; Prism, arXiv 2505.04021): three Llama-3-8B tenants sharing one
// A100-80GB's KV memory, a static split against an elastic pool, per-tenant p99 TTFT and memory
// held over time; where the pool stops helping (bursts closer together); and what an idle tenant
// keeps of its capped prefix cache with page-aware against page-blind allocation and eviction
// (kvcached issue #359, PR #390). docs/elastic.md.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>

#include "experiments/figures/figure_kit.hpp"
#include "experiments/figures/figure_list.hpp"
#include "serving/replay/tenants.hpp"
#include "serving/support/atomic_file.hpp"

namespace kvlab::fig {

namespace {
constexpr double kGiB = 0x1p30;
/// KV memory of an A100-80GB serving three Llama-3-8B: 80 GB (74.5 GiB) less three copies of the
/// weights (15 GiB each) and some 5 GiB of activations and CUDA graphs.
constexpr double kKvGib = 24;
constexpr double kHeadlineGap = 30;  // seconds between the tenants' bursts
/// An idle tenant is one idle this long at least (a tenant starved by another's cache idles for
/// moments only, between its own requests).
constexpr double kMinIdleS = 10;
constexpr double kIdleGoal = 1.4;  // issue 32: idle memory at most 1.4x the packed floor

struct Load {
  const char* name;
  std::int64_t requests;
  double rate;
  double kv_gib;
};
/// The bursts: each tenant sends `requests` at `rate` per second (gamma arrivals, cv 3).
constexpr Load kBursts{"bursts", 200, 20, kKvGib};
/// Idle memory, two loads: the bursts, and a lighter one on less memory (fewer requests decode at
/// once, so their blocks interleave less on the pages).
constexpr Load kLight{"light", 120, 6, 8};

std::vector<TenantSpec> tenants(const Load& load, double gap_s, bool system_prompts) {
  std::vector<TenantSpec> t(3);
  const char* names[] = {"chat", "code", "docs"};
  for (int i = 0; i < 3; ++i) {
    SyntheticWorkload w;
    w.num_requests = load.requests;
    w.rate = load.rate;
    w.burstiness = 3;
    w.prompt = LengthDistribution::parse("uniform:200:1200", "prompt");
    w.output = LengthDistribution::parse("uniform:50:300", "output");
    w.seed = 1 + static_cast<std::uint64_t>(i);
    if (system_prompts) {  // each request starts with one of 4 system prompts of 512 tokens
      w.prefix_groups = 4;
      w.shared_prefix_tokens = 512;
    }
    t[i].name = names[i];
    t[i].model = model_preset("llama-3-8b");
    t[i].requests = generate(w);
    for (Request& q : t[i].requests) q.arrival_s += gap_s * i;
  }
  return t;
}

/// A tenant that could not get memory beside the others' idle caches.
struct Starved {
  std::string tenant, load;
  std::int64_t rejected = 0;
};

std::vector<TenantRun> replay(const FigureContext& ctx, const Load& load, double gap_s, bool system_prompts,
                              const std::string& backend, TenantPolicy policy) {
  if (ctx.progress)
    std::cerr << fmt::format("multi-tenant: {} {} {} gap {:g} s\n", load.name, backend, to_string(policy), gap_s);
  ReplayConfig c;  // the a100-80gb device model
  c.keep_steps = true;
  return replay_tenants(tenants(load, gap_s, system_prompts), policy, backend,
                        static_cast<std::size_t>(load.kv_gib * kGiB), BackendOptions{}, c);
}

const char* const kAware = "elastic-16-radix-maxcached16000";
const char* const kBlind = "elastic-16-firstfree-radix-maxcached16000-lru";
const char* const kCompact = "elastic-16-radix-maxcached16000-compact";
const char* const kTenantNames[] = {"chat", "code", "docs"};

/// What the figure gathers as it replays: the table, the numbers its notes need, memory.csv.
struct Gathered {
  Table t{{"part", "load", "gap_s", "backend", "policy", "tenant", "completed", "rejected", "preemptions",
           "ttft_p99_ms", "mean_held_gib", "peak_held_gib", "idle_s", "idle_held_gib", "idle_floor_gib",
           "idle_held_over_floor_ratio"}};
  std::map<std::tuple<double, std::string, std::string>, double> p99;  // (gap, policy, tenant) -> ms
  std::string memory = "policy,tenant,time_s,held_gib,floor_gib\n";
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> idle;  // (load, backend) -> min, max
  std::vector<Starved> starved;                                                   // page-blind
};

/// The pool's policy for a backend that can share memory, a static split for one that cannot.
TenantPolicy pool_or_split(const std::string& backend) {
  return backend_shares_memory(backend) ? TenantPolicy::elastic : TenantPolicy::static_split;
}

void add_rows(Gathered& g, const std::string& part, const Load& load, double gap, TenantPolicy policy,
              const std::vector<TenantRun>& runs) {
  const double end = gpu_memory(runs).end_s;
  for (const TenantRun& r : runs) {
    const ReplaySummary& s = r.result.summary;
    const IdleMemory idle = idle_memory(r.result, end);
    g.t.add({part, load.name, fixed(gap, 0), s.backend, std::string(to_string(policy)), r.name,
             std::to_string(s.completed), std::to_string(s.rejected + s.failed), std::to_string(s.preemptions),
             fixed(s.p99_ttft_s * 1e3, 0), fixed(static_cast<double>(s.mean_held_bytes) / kGiB, 2),
             fixed(static_cast<double>(s.peak_held_bytes) / kGiB, 2), fixed(idle.idle_s, 1),
             fixed(idle.held_bytes / kGiB, 2), fixed(idle.floor_bytes / kGiB, 2),
             idle.floor_bytes > 0 ? fixed(idle.held_bytes / idle.floor_bytes, 2) : "n/a"});
    if (part == "bursts") g.p99[{gap, std::string(to_string(policy)), r.name}] = s.p99_ttft_s * 1e3;
  }
}

/// 1. The bursts, static split (paged-16 at a third each) against the pool (elastic-16), per gap;
/// memory over time at the headline gap.
void run_bursts(const FigureContext& ctx, const std::vector<double>& gaps, Gathered& g) {
  const std::pair<const char*, TenantPolicy> setups[] = {{"paged-16", TenantPolicy::static_split},
                                                         {"elastic-16", TenantPolicy::elastic},
                                                         {"elastic-16", TenantPolicy::fair_share}};
  for (const double gap : gaps)
    for (const auto& [backend, policy] : setups) {
      const std::vector<TenantRun> runs = replay(ctx, kBursts, gap, false, backend, policy);
      add_rows(g, "bursts", kBursts, gap, policy, runs);
      if (gap != kHeadlineGap) continue;
      const GpuMemory gpu = gpu_memory(runs);
      for (const TenantRun& r : runs) {
        const std::vector<MemorySample> line = memory_timeline(r.result);
        for (double at = gpu.start_s; at <= gpu.end_s + 1e-9; at += 0.5) {
          const MemorySample m = memory_at(line, at);
          g.memory += fmt::format("{},{},{:.1f},{:.4f},{:.4f}\n", to_string(policy), r.name, at - gpu.start_s,
                                  static_cast<double>(m.held_bytes) / kGiB, static_cast<double>(m.floor_bytes) / kGiB);
        }
      }
    }
}

/// 2. Idle memory: the tenants' prompts start with system prompts, each caches at most 16,000
/// tokens (kvcached's KVCACHED_MAX_CACHED_TOKENS), page-aware against page-blind, two loads.
void run_idle(const FigureContext& ctx, Gathered& g) {
  for (const Load& load : {kLight, kBursts})
    for (const std::string backend : {kAware, kBlind, kCompact}) {
      const std::vector<TenantRun> runs = replay(ctx, load, kHeadlineGap, true, backend, pool_or_split(backend));
      add_rows(g, "idle", load, kHeadlineGap, pool_or_split(backend), runs);
      for (const TenantRun& r : runs)  // a tenant that could not get memory beside the others
        if (const auto rejected = r.result.summary.rejected; rejected > 0 && backend == kBlind)
          g.starved.push_back({r.name, load.name, rejected});
      const double end = gpu_memory(runs).end_s;
      auto& [lo, hi] = g.idle[{load.name, backend}];
      lo = std::numeric_limits<double>::infinity();
      hi = 0;
      for (const TenantRun& r : runs)
        if (const IdleMemory m = idle_memory(r.result, end); m.idle_s >= kMinIdleS && m.floor_bytes > 0) {
          lo = std::min(lo, m.held_bytes / m.floor_bytes);
          hi = std::max(hi, m.held_bytes / m.floor_bytes);
        }
    }
}

/// The TTFT numbers the notes quote: the least and most a tenant gains at the headline gap, the
/// smallest gap from which every tenant gains, and how many lose with the bursts together.
struct TtftFindings {
  double worst = std::numeric_limits<double>::infinity(), best = 0, helps_from = -1;
  int worse_at_zero = 0;
  // Fair share: tenants worse off than static at gap 0, the most one loses there (p99 over
  // static's, -1: none loses), the smallest gap from which every tenant gains, and the gaps at
  // which it gives every tenant the first-come pool's p99.
  int fair_worse_at_zero = 0;
  double fair_worst_loss = -1, fair_helps_from = -1;
  int fair_same_as_pool = 0;
};

/// The smallest gap from which (to the largest) every tenant's p99 under `policy` is below static's; -1: none.
double helps_from(const Gathered& g, const std::vector<double>& gaps, const char* policy) {
  double from = -1;
  for (auto it = gaps.rbegin(); it != gaps.rend(); ++it) {
    bool all = true;
    for (const char* tenant : kTenantNames)
      all = all && g.p99.at({*it, policy, tenant}) < g.p99.at({*it, "static", tenant});
    if (!all) break;
    from = *it;
  }
  return from;
}
TtftFindings ttft_findings(const Gathered& g, const std::vector<double>& gaps) {
  TtftFindings f;
  const auto p99 = [&](double gap, const char* policy, const char* tenant) { return g.p99.at({gap, policy, tenant}); };
  for (const char* tenant : kTenantNames) {
    const double ratio = p99(kHeadlineGap, "static", tenant) / p99(kHeadlineGap, "elastic", tenant);
    f.best = std::max(f.best, ratio);
    f.worst = std::min(f.worst, ratio);
    f.worse_at_zero += p99(0, "elastic", tenant) >= p99(0, "static", tenant);
  }
  f.helps_from = helps_from(g, gaps, "elastic");
  f.fair_helps_from = helps_from(g, gaps, "fair-share");
  for (const char* tenant : kTenantNames) {
    const double ratio = p99(0, "fair-share", tenant) / p99(0, "static", tenant);
    if (ratio < 1) continue;
    ++f.fair_worse_at_zero;
    f.fair_worst_loss = std::max(f.fair_worst_loss, ratio);
  }
  for (const double gap : gaps) {
    bool same = true;
    for (const char* tenant : kTenantNames)
      same = same && p99(gap, "fair-share", tenant) == p99(gap, "elastic", tenant);
    f.fair_same_as_pool += same;
  }
  return f;
}

/// The notes' sentences on the fair-share pool, every number through `f`.
std::string fair_share_notes(const TtftFindings& tf, const std::vector<double>& gaps, Facts& f) {
  const std::string loss =
      tf.fair_worse_at_zero == 0
          ? std::string("none of the three is worse off than with a static third")
          : fmt::format("{} of the three {} worse off than with a static third, the most by {} %",
                        f.quote("tenants worse off with fair share at gap 0", tf.fair_worse_at_zero, 0, "this run"),
                        tf.fair_worse_at_zero == 1 ? "is" : "are",
                        f.quote("fair share at gap 0: largest p99 TTFT loss against static (%)",
                                (tf.fair_worst_loss - 1) * 100, 1, "this run"));
  const std::string from = tf.fair_helps_from < 0
                               ? std::string("at no gap swept does every tenant gain")
                               : fmt::format("every tenant gains from a gap of {} s on",
                                             f.quote("smallest gap at which all tenants gain with fair share (s)",
                                                     tf.fair_helps_from, 0, "this run"));
  return fmt::format(
      " A fair-share pool (`--tenant-policy fair-share`: a tenant holding less than its third that waits for memory "
      "holds back new admissions of the tenants holding at least theirs; nothing is preempted or taken back) {}: "
      "at gap 0, {}; {}; at {} of the {} gaps swept it gives every tenant exactly the first-come pool's p99.",
      tf.fair_worse_at_zero < tf.worse_at_zero    ? "leaves fewer tenants worse off than the first-come pool"
      : tf.fair_worse_at_zero == tf.worse_at_zero ? "leaves as many tenants worse off as the first-come pool"
                                                  : "leaves more tenants worse off than the first-come pool",
      loss, from, f.quote("gaps at which fair share equals the first-come pool", tf.fair_same_as_pool, 0, "this run"),
      f.quote("gaps swept", static_cast<double>(gaps.size()), 0, "setup"));
}

/// The notes' paragraph on TTFT, every number through `f`.
std::string ttft_notes(const Gathered& g, const std::vector<double>& gaps, Facts& f) {
  const TtftFindings tf = ttft_findings(g, gaps);
  const std::string least = f.claim("p99 TTFT static / elastic, tenant helped least", tf.worst, 2, 1,
                                    "kvcached README / Prism (arXiv 2505.04021): 2-28x, lower end");
  const std::string most = f.claim("p99 TTFT static / elastic, tenant helped most", tf.best, 28, 1,
                                   "kvcached README / Prism (arXiv 2505.04021): 2-28x, upper end");
  const std::string gap = f.quote("headline gap between bursts (s)", kHeadlineGap, 0, "setup");
  const std::string low = f.quote("kvcached: TTFT reduction, lower end (x)", 2, 0, "kvcached README / Prism");
  const std::string high = f.quote("kvcached: TTFT reduction, upper end (x)", 28, 0, "kvcached README / Prism");
  const std::string from =
      tf.helps_from < 0
          ? std::string("At no gap swept is every tenant better off")
          : fmt::format("From a gap of {} s on, every tenant is better off in the pool",
                        f.quote("smallest gap at which all tenants gain (s)", tf.helps_from, 0, "this run"));
  const std::string worse = f.quote("tenants worse off in the pool at gap 0", tf.worse_at_zero, 0, "this run");
  return fmt::format(
      "**TTFT.** With bursts {} s apart, the pool cuts every tenant's p99 TTFT: by {}x for the tenant it helps "
      "least, {}x for the one it helps most. kvcached reports {}-{}x lower TTFT than a static split for three "
      "Llama-3.1-8B on one A100-80GB (claims below; its load and engines are not ours). The static split's tenants "
      "never touch each other's memory; in the pool, the tenant whose burst comes first holds what it needs and "
      "returns it as its requests end. {}. With the bursts together (gap 0), {} of the three tenants are worse off "
      "in the first-come pool than with a third each: the first to arrive takes the memory and the others queue "
      "behind it.{} Per-tenant limits (`limit-gib=`, `shrink=`) and priorities (`priority=`) are the other remedies "
      "built.",
      gap, least, most, low, high, from, worse, fair_share_notes(tf, gaps, f));
}

/// Whether the idle-memory goal holds under each load, as a clause; `why` follows where it does not.
std::string goal_text(double light_hi, double bursts_hi, const std::string& why) {
  const bool light = light_hi <= kIdleGoal, bursts = bursts_hi <= kIdleGoal;
  return light && bursts ? "met under both loads"
         : light         ? "met under the light load, not under the bursts" + why
         : bursts        ? "met under the bursts, not under the light load" + why
                         : "met under neither load" + why;
}

/// The notes' paragraph on compaction, every number through `f`.
std::string compaction_notes(const Gathered& g, Facts& f) {
  const auto [light_lo, light_hi] = g.idle.at({kLight.name, kCompact});
  const auto [burst_lo, burst_hi] = g.idle.at({kBursts.name, kCompact});
  const auto range = [&](double lo, double hi, const std::string& what) {
    const std::string most = f.quote(what + " idle held/floor, most", hi, 2, "this run");
    if (fixed(lo, 2) == most) return most + "x";
    return f.quote(what + " idle held/floor, least", lo, 2, "this run") + "x to " + most + "x";
  };
  const std::string light = range(light_lo, light_hi, "light load, compaction");
  const std::string bursts = range(burst_lo, burst_hi, "bursts, compaction");
  return fmt::format(
      "**Compaction** (`-compact`, not in kvcached, which never moves a block): after each trim, cached blocks "
      "the cache alone holds move off the emptiest page groups onto free blocks of the fullest when that empties "
      "whole groups, each move one block copy that the clock charges. The idle tenants then held {} their floor "
      "under the light load and {} under the bursts: the goal {}. A replay counts the copies as the "
      "backend counter `compaction_moves`.",
      light, bursts, goal_text(light_hi, burst_hi, ""));
}

/// The notes' paragraph on idle memory, every number through `f`.
std::string idle_notes(const Gathered& g, Facts& f) {
  const auto [light_aware_lo, light_aware_hi] = g.idle.at({kLight.name, kAware});
  const auto [light_blind_lo, light_blind_hi] = g.idle.at({kLight.name, kBlind});
  const auto [burst_aware_lo, burst_aware_hi] = g.idle.at({kBursts.name, kAware});
  const auto [burst_blind_lo, burst_blind_hi] = g.idle.at({kBursts.name, kBlind});
  // "1.29x to 1.34x", or one "2.91x" when both print alike; `most`: the largest as printed already
  // (a claim's value), else quoted here.
  const auto range = [&](double lo, double hi, const std::string& what, std::string most = {}) {
    if (most.empty()) most = f.quote(what + " idle held/floor, most", hi, 2, "this run");
    if (fixed(lo, 2) == most) return most + "x";
    return f.quote(what + " idle held/floor, least", lo, 2, "this run") + "x to " + most + "x";
  };
  const std::string blind_light =
      range(light_blind_lo, light_blind_hi, "light load, page-blind",
            f.claim("idle held / floor, page-blind, light load (most)", light_blind_hi, 10.3 / 2.25, 2,
                    "kvcached PR #390: 10.3 GB idle against a 2.25 GB floor"));
  const std::string aware_light = range(light_aware_lo, light_aware_hi, "light load, page-aware",
                                        f.claim("idle held / floor, page-aware, light load (most)", light_aware_hi,
                                                5.2 / 2.25, 2, "kvcached PR #390: 5.2 GB with page-ordered eviction"));
  const std::string blind_bursts = range(burst_blind_lo, burst_blind_hi, "bursts, page-blind");
  const std::string aware_bursts = range(burst_aware_lo, burst_aware_hi, "bursts, page-aware");
  const std::string goal = goal_text(light_aware_hi, burst_aware_hi,
                                     ". Where it is missed, many requests decode at once and their blocks interleave "
                                     "on the groups, and what stops page-aware eviction is the radix tree: a cached "
                                     "block can only go after everything cached after it, so a system prompt or an "
                                     "early prompt block pins its page group as long as any continuation is kept "
                                     "(kvcached evicts vLLM's hashed blocks one by one, which can leave blocks whose "
                                     "prefix is gone)");
  std::string starved;
  for (const Starved& r : g.starved)
    starved += fmt::format(
        "Page-blind, tenant {} was starved under the {} load: {} of its requests could not fit "
        "beside the idle caches and were rejected (not left waiting). ",
        r.tenant, r.load,
        f.quote(r.tenant + " rejected, " + r.load + " load, page-blind", static_cast<double>(r.rejected), 0,
                "this run"));
  return fmt::format(
      "**Idle memory** (tenants idle {} s or more). An idle tenant keeps its prefix cache, capped at {} tokens ({} "
      "GiB of Llama-3-8B KV: the packed floor, `idle_floor_gib`). Page-blind (`-firstfree`: the block freed last; "
      "`-lru`: least recently used blocks evicted to the cap) it held {} its floor under the light load and {} "
      "under the bursts; page-aware (the fullest page group first; eviction that empties whole groups) {} and {}. "
      "Issue 32's goal is {}x: {}. {}kvcached measured an idle Qwen3-4B at {} GB against a {} GB floor, and {} GB "
      "with page-ordered eviction.",
      f.quote("least idle time counted (s)", kMinIdleS, 0, "setup"),
      f.quote("cached tokens per tenant (cap)", 16000, 0, "setup (kvcached's KVCACHED_MAX_CACHED_TOKENS example)"),
      f.quote("cap's bytes (GiB)", 16000.0 * 131072 / kGiB, 2, "16,000 tokens x 128 KiB"), blind_light, blind_bursts,
      aware_light, aware_bursts, f.quote("issue 32's goal for idle held/floor", kIdleGoal, 1, "issue 32"), goal,
      starved, f.quote("kvcached: idle footprint before (GB)", 10.3, 1, "kvcached PR #390 (Qwen3-4B)"),
      f.quote("kvcached: packed floor (GB)", 2.25, 2, "kvcached PR #390"),
      f.quote("kvcached: idle footprint with page-ordered eviction (GB)", 5.2, 1, "kvcached PR #390"));
}

void multi_tenant(const FigureContext& ctx) {
  const std::vector<double> gaps =
      ctx.full ? std::vector<double>{0, 5, 10, 15, 20, 25, 30, 45, 60} : std::vector<double>{0, 10, 20, 30};
  Gathered g;
  run_bursts(ctx, gaps, g);
  run_idle(ctx, g);
  write_file_atomically(ctx.out / "memory.csv", g.memory);
  Facts f;
  const std::string text = ttft_notes(g, gaps, f) + "\n\n" + idle_notes(g, f) + "\n\n" + compaction_notes(g, f) +
                           "\n\nMemory held over time at the headline gap is in `memory.csv` (the plot's middle "
                           "panel). Tenants share memory, not compute: each prices its steps on its own modelled "
                           "clock (kvcached's engines also share the SMs).";
  publish(ctx,
          {"multi-tenant",
           "kvcached / Prism: three models sharing one GPU's KV memory, static split against an elastic pool",
           fmt::format("three Llama-3-8B tenants (chat, code, docs), each a burst of {} requests at {}/s (gamma "
                       "arrivals, cv 3), prompts uniform 200-1200 and outputs 50-300 tokens, the bursts GAP seconds "
                       "apart; {} GiB of KV (an A100-80GB less three copies of the weights); static: paged-16 at a "
                       "third of it each; elastic: elastic-16 tenants sharing it, first come first served (`kvlab "
                       "compare --tenants FILE`, docs/elastic.md). Idle rows: every prompt starts with one of 4 "
                       "system prompts of 512 tokens, radix prefix caching capped at 16,000 cached tokens, "
                       "page-aware ({}) against page-blind ({}) and page-aware with compaction ({}) at gap {} s, "
                       "under the bursts and a light load ({} requests at {}/s on {} GiB)",
                       kBursts.requests, kBursts.rate, kBursts.kv_gib, kAware, kBlind, kCompact, kHeadlineGap,
                       kLight.requests, kLight.rate, kLight.kv_gib),
           "modelled: per-operation clock on the `a100-80gb` device model (docs/clock.md), one per tenant; no GPU "
           "was used",
           text, clock_sources(ReplayConfig{}.device), std::move(f)},
          g.t);
}
}  // namespace

Figure multi_tenant_figure() {
  return {"multi-tenant", "kvcached / Prism: tenants sharing one GPU's KV memory, static split vs elastic pool",
          multi_tenant};
}

}  // namespace kvlab::fig
