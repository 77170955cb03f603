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

#include "alloc/memory/huge_pages.hpp"
#include "alloc/memory/memory_resource.hpp"
#include "experiments/figures/figure_kit.hpp"
#include "experiments/figures/figure_list.hpp"
#include "experiments/runs/calibrate.hpp"
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
/// Idle memory depends on where each run's blocks happened to land: the idle part replays this many
/// workloads (seeds) per backend and load and reports their mean and range.
constexpr int kIdleSeeds = 5;

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

/// Tenant i's workload seed: 1 + i, plus 10 per `draw` (the idle part's repeated workloads).
std::uint64_t workload_seed(int draw, int i) {
  return 1 + static_cast<std::uint64_t>(i) + 10 * static_cast<std::uint64_t>(draw);
}

std::vector<TenantSpec> tenants(const Load& load, double gap_s, bool system_prompts, int draw) {
  std::vector<TenantSpec> t(3);
  const char* names[] = {"chat", "code", "docs"};
  for (int i = 0; i < 3; ++i) {
    SyntheticWorkload w;
    w.num_requests = load.requests;
    w.rate = load.rate;
    w.burstiness = 3;
    w.prompt = LengthDistribution::parse("uniform:200:1200", "prompt");
    w.output = LengthDistribution::parse("uniform:50:300", "output");
    w.seed = workload_seed(draw, i);
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
                              const std::string& backend, TenantPolicy policy, int draw = 0) {
  if (ctx.progress)
    std::cerr << fmt::format("multi-tenant: {} {} {} gap {:g} s, seeds from {}\n", load.name, backend,
                             to_string(policy), gap_s, workload_seed(draw, 0));
  ReplayConfig c;  // the a100-80gb device model
  c.keep_steps = true;
  return replay_tenants(tenants(load, gap_s, system_prompts, draw), policy, backend,
                        static_cast<std::size_t>(load.kv_gib * kGiB), BackendOptions{}, c);
}

const char* const kAware = "elastic-16-radix-maxcached16000";
const char* const kBlind = "elastic-16-firstfree-radix-maxcached16000-lru";
const char* const kLocal = "elastic-16-local-radix-maxcached16000";
const char* const kSpread = "elastic-16-spread-radix-maxcached16000";
const char* const kCompact = "elastic-16-radix-maxcached16000-compact";
const char* const kIdleBackends[] = {kBlind, kAware, kLocal, kSpread, kCompact};
const char* const kTenantNames[] = {"chat", "code", "docs"};

/// Idle held / floor over the seeds' idle tenants, and what the whole GPU held while they ran.
struct IdleStats {
  double lo = std::numeric_limits<double>::infinity(), hi = 0, sum = 0;
  int n = 0;
  double gpu_peak_gib = 0;  // summed over the seeds (divide by `runs`)
  int runs = 0;
  double busy_held_gib = 0;  // tenants' mean held while their requests ran, summed (divide by `busy`)
  int busy = 0;
  [[nodiscard]] double mean() const { return n > 0 ? sum / n : 0; }
};

/// What the figure gathers as it replays: the table, the numbers its notes need, memory.csv.
struct Gathered {
  Table t{{"part", "load", "gap_s", "workload_seed", "backend", "policy", "tenant", "completed", "rejected",
           "preemptions", "ttft_p99_ms", "mean_held_gib", "peak_held_gib", "idle_s", "idle_held_gib", "idle_floor_gib",
           "idle_held_over_floor_ratio"}};
  std::map<std::tuple<double, std::string, std::string>, double> p99;  // (gap, policy, tenant) -> ms
  std::string memory = "policy,tenant,time_s,held_gib,floor_gib\n";
  std::map<std::pair<std::string, std::string>, IdleStats> idle;  // (load, backend)
  std::vector<Starved> starved;                                   // page-blind
};

/// The pool's policy for a backend that can share memory, a static split for one that cannot.
TenantPolicy pool_or_split(const std::string& backend) {
  return backend_shares_memory(backend) ? TenantPolicy::elastic : TenantPolicy::static_split;
}

void add_rows(Gathered& g, const std::string& part, const Load& load, double gap, TenantPolicy policy,
              const std::vector<TenantRun>& runs, int draw = 0) {
  const double end = gpu_memory(runs).end_s;
  for (const TenantRun& r : runs) {
    const ReplaySummary& s = r.result.summary;
    const IdleMemory idle = idle_memory(r.result, end);
    g.t.add({part, load.name, fixed(gap, 0), std::to_string(workload_seed(draw, 0)), s.backend,
             std::string(to_string(policy)), r.name, std::to_string(s.completed), std::to_string(s.rejected + s.failed),
             std::to_string(s.preemptions), fixed(s.p99_ttft_s * 1e3, 0),
             fixed(static_cast<double>(s.mean_held_bytes) / kGiB, 2),
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
/// tokens (kvcached's KVCACHED_MAX_CACHED_TOKENS); page-blind, page-aware (kvcached's), local,
/// spread and compaction; two loads, kIdleSeeds workloads each.
void run_idle(const FigureContext& ctx, Gathered& g) {
  for (const Load& load : {kLight, kBursts})
    for (const char* backend : kIdleBackends)
      for (int draw = 0; draw < kIdleSeeds; ++draw) {
        const std::vector<TenantRun> runs =
            replay(ctx, load, kHeadlineGap, true, backend, pool_or_split(backend), draw);
        add_rows(g, "idle", load, kHeadlineGap, pool_or_split(backend), runs, draw);
        for (const TenantRun& r : runs)  // a tenant that could not get memory beside the others
          if (const auto rejected = r.result.summary.rejected; rejected > 0 && backend == kBlind && draw == 0)
            g.starved.push_back({r.name, load.name, rejected});
        const GpuMemory gpu = gpu_memory(runs);
        IdleStats& st = g.idle[{load.name, backend}];
        st.gpu_peak_gib += static_cast<double>(gpu.peak_held_bytes) / kGiB;
        ++st.runs;
        for (const TenantRun& r : runs)
          if (r.result.summary.completed > 0) {
            st.busy_held_gib += static_cast<double>(r.result.summary.mean_held_bytes) / kGiB;
            ++st.busy;
          }
        for (const TenantRun& r : runs)
          if (const IdleMemory m = idle_memory(r.result, gpu.end_s); m.idle_s >= kMinIdleS && m.floor_bytes > 0) {
            const double ratio = m.held_bytes / m.floor_bytes;
            st.lo = std::min(st.lo, ratio);
            st.hi = std::max(st.hi, ratio);
            st.sum += ratio;
            ++st.n;
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

/// Whether the idle-memory goal holds under each load, as a clause.
std::string goal_text(double light, double bursts) {
  const bool l = light <= kIdleGoal, b = bursts <= kIdleGoal;
  return l && b ? "met under both loads"
         : l    ? "met under the light load, not under the bursts"
         : b    ? "met under the bursts, not under the light load"
                : "met under neither load";
}

/// One idle row of the notes' table: what a backend held idle, and the GPU while the tenants ran.
struct IdleKind {
  const char* backend;
  const char* label;  // the table's first column
  const char* key;    // the facts' name for it
};
const IdleKind kIdleKinds[] = {
    {kBlind, "page-blind (`-firstfree`: the block freed last; `-lru`: least recently used blocks evicted)",
     "page-blind"},
    {kAware, "page-aware, kvcached's (the fullest page group first; eviction that empties whole groups)", "page-aware"},
    {kLocal,
     "`-local`: page-aware eviction; a prompt on the fullest group that holds it whole, a sequence's next block "
     "beside its last, else the fullest group",
     "local"},
    {kSpread, "`-spread`: as `-local`, but a sequence whose group is full moves to the emptiest open group", "spread"},
    {kCompact, "page-aware + `-compact` (cached blocks moved; not in kvcached)", "compaction"},
};

/// "1.29 (1.15-1.43)": the mean over the idle tenants of every seed, and their range.
std::string idle_cell(const IdleStats& st, const std::string& what, Facts& f, std::string mean = {}) {
  if (mean.empty()) mean = f.quote(what + " idle held/floor, mean", st.mean(), 2, "this run");
  return fmt::format("{} ({}-{})", mean, f.quote(what + " idle held/floor, least", st.lo, 2, "this run"),
                     f.quote(what + " idle held/floor, most", st.hi, 2, "this run"));
}

/// The notes' paragraphs on idle memory, every number through `f`.
std::string idle_notes(const Gathered& g, Facts& f) {
  const auto at = [&](const Load& load, const char* backend) -> const IdleStats& {
    return g.idle.at({load.name, backend});
  };
  std::string table =
      "| allocation and eviction | light load | bursts | bursts, while requests run: a tenant's mean held / the "
      "GPU's peak (GiB) |\n|---|---|---|---|\n";
  for (const IdleKind& k : kIdleKinds) {
    const IdleStats& light = at(kLight, k.backend);
    const IdleStats& bursts = at(kBursts, k.backend);
    std::string light_mean;  // the two compared with kvcached are claims
    if (k.backend == kBlind)
      light_mean = f.claim("idle held / floor, page-blind, light load (mean)", light.mean(), 10.3 / 2.25, 2,
                           "kvcached PR #390: 10.3 GB idle against a 2.25 GB floor");
    if (k.backend == kAware)
      light_mean = f.claim("idle held / floor, page-aware, light load (mean)", light.mean(), 5.2 / 2.25, 2,
                           "kvcached PR #390: 5.2 GB with page-ordered eviction");
    const std::string key = std::string(k.key);
    table += fmt::format("| {} | {} | {} | {} / {} |\n", k.label, idle_cell(light, "light load, " + key, f, light_mean),
                         idle_cell(bursts, "bursts, " + key, f),
                         f.quote("bursts, " + key + ": a tenant's mean held while running (GiB)",
                                 bursts.busy_held_gib / bursts.busy, 2, "this run"),
                         f.quote("bursts, " + key + ": GPU held while running, peak (GiB)",
                                 bursts.gpu_peak_gib / bursts.runs, 2, "this run"));
  }
  std::string starved;
  for (const Starved& r : g.starved)
    starved += fmt::format(
        " Page-blind, tenant {} was starved under the {} load (first workload): {} of its requests could not fit "
        "beside the idle caches and were rejected (not left waiting).",
        r.tenant, r.load,
        f.quote(r.tenant + " rejected, " + r.load + " load, page-blind", static_cast<double>(r.rejected), 0,
                "this run"));
  const auto goal = [&](const char* backend) {
    return goal_text(at(kLight, backend).mean(), at(kBursts, backend).mean());
  };
  const IdleStats& aware = at(kBursts, kAware);
  const IdleStats& spread = at(kBursts, kSpread);
  return fmt::format(
      "**Idle memory** (tenants idle {} s or more). An idle tenant keeps its prefix cache, capped at {} tokens "
      "({} GiB of Llama-3-8B KV: the packed floor, `idle_floor_gib`). Where blocks land varies from run to run, so "
      "each load and backend replays {} workloads (`workload_seed`: the first tenant's seed). Held / floor, the "
      "mean over the idle tenants of every workload (their range):\n\n{}\n"
      "Issue 32's goal is {}x: kvcached's page-aware allocation and eviction {}; `-local` {}; `-spread` {}; with "
      "compaction {}. Under the bursts many requests decode at once, so a group fills with pieces of many "
      "sequences: filling the fullest group first puts the start of a new prompt into the last free blocks of a "
      "group and the rest of it elsewhere, and in a radix tree a cached block goes only after everything cached "
      "after it, so such a piece pins its group while any of its continuation is kept. Keeping a sequence's blocks "
      "together (`-local`, `-spread`) lets whole groups empty when the cap evicts. `-spread` pays while the tenants "
      "run: under the bursts a tenant held {} GiB on average while its requests ran against {} page-aware, and the "
      "GPU {} GiB at its peak against {}: a sequence whose group is full takes the emptiest open group, a wholly "
      "free one whenever the reserve holds one, so running sequences spread over more groups.{} kvcached measured an "
      "idle Qwen3-4B at {} GB against a {} GB floor, and {} GB with "
      "page-ordered eviction.\n\n"
      "**Compaction** (`-compact`, not in kvcached, which never moves a block): after each trim, cached blocks the "
      "cache alone holds move off the emptiest page groups onto free blocks of the fullest when that empties whole "
      "groups, each move one block copy that the clock charges. A replay counts the copies as the backend counter "
      "`compaction_moves`.",
      f.quote("least idle time counted (s)", kMinIdleS, 0, "setup"),
      f.quote("cached tokens per tenant (cap)", 16000, 0, "setup (kvcached's KVCACHED_MAX_CACHED_TOKENS example)"),
      f.quote("cap's bytes (GiB)", 16000.0 * 131072 / kGiB, 2, "16,000 tokens x 128 KiB"),
      f.quote("workloads per load and backend (idle part)", kIdleSeeds, 0, "setup"), table,
      f.quote("issue 32's goal for idle held/floor", kIdleGoal, 1, "issue 32"), goal(kAware), goal(kLocal),
      goal(kSpread), goal(kCompact),
      f.quote("bursts, spread: a tenant's mean held while running (GiB)", spread.busy_held_gib / spread.busy, 2,
              "this run"),
      f.quote("bursts, page-aware: a tenant's mean held while running (GiB)", aware.busy_held_gib / aware.busy, 2,
              "this run"),
      f.quote("bursts, spread: GPU held while running, peak (GiB)", spread.gpu_peak_gib / spread.runs, 2, "this run"),
      f.quote("bursts, page-aware: GPU held while running, peak (GiB)", aware.gpu_peak_gib / aware.runs, 2, "this run"),
      starved, f.quote("kvcached: idle footprint before (GB)", 10.3, 1, "kvcached PR #390 (Qwen3-4B)"),
      f.quote("kvcached: packed floor (GB)", 2.25, 2, "kvcached PR #390"),
      f.quote("kvcached: idle footprint with page-ordered eviction (GB)", 5.2, 1, "kvcached PR #390"));
}

/// The layouts the page-layout part times: paged-16's one region, per-layer and interleaved pages.
const char* const kLayoutBackends[] = {"paged-16", "elastic-16", "elastic-16-interleaved"};

/// Each layout's attention time per round, and its time over paged-16's in the same round.
struct LayoutTimes {
  std::vector<std::vector<double>> kernel = std::vector<std::vector<double>>(3);
  std::vector<std::vector<double>> ratio = std::vector<std::vector<double>>(3);
  std::vector<ReplaySummary> last = std::vector<ReplaySummary>(3);  // each layout's last run
};

/// Runs `rounds` rounds side by side, each layout once per round in a rotating order (one host
/// run moves by tens of percent when anything else runs, so the notes quote medians).
LayoutTimes time_layouts(const FigureContext& ctx, const BackendOptions& o, const std::vector<Request>& workload,
                         const ReplayConfig& c, int rounds) {
  LayoutTimes lt;
  for (int round = 0; round < rounds; ++round) {
    double per_round[3] = {};
    for (int k = 0; k < 3; ++k) {
      const auto b = static_cast<std::size_t>((k + round) % 3);
      lt.last[b] = run(ctx, kLayoutBackends[b], o, workload, c).summary;
      per_round[b] = lt.last[b].kernel_s;
    }
    for (std::size_t b = 0; b < 3; ++b) {
      lt.kernel[b].push_back(per_round[b]);
      lt.ratio[b].push_back(per_round[b] / per_round[0]);
    }
  }
  return lt;
}

/// 3. The page layout in execute mode: one tenant's requests decoding together over paged-16's one
/// region, elastic-16's per-layer pages and elastic-16-interleaved's, the attention kernels run over
/// the real KV memory (the host's, or --device's); kvcached measured its interleaved layout at +56 %
/// attention time on a GPU. Writes layout.csv; returns the notes' paragraph.
std::string run_layout(const FigureContext& ctx, Facts& f) {
  const bool emulated = ctx.device != nullptr && ctx.device->device() == Device::emulated;
  SyntheticWorkload w;
  w.num_requests = emulated ? 3 : ctx.full ? 40 : 8;
  w.rate = 0;  // all at once: one decode batch
  w.prompt = LengthDistribution::parse(emulated   ? "uniform:8:24"
                                       : ctx.full ? "uniform:512:1024"
                                                  : "uniform:128:256",
                                       "prompt");
  w.output = LengthDistribution::parse(emulated ? "fixed:6" : ctx.full ? "uniform:32:64" : "uniform:8:16", "output");
  w.seed = 1;
  BackendOptions o;
  o.model = model_preset("llama-3-8b");
  o.capacity_bytes = static_cast<std::size_t>((emulated ? 0.25 : ctx.full ? 6.0 : 1.0) * kGiB);
  o.memory = ctx.device != nullptr ? &ctx.device->memory() : &huge_page_host_memory_resource();
  o.device = ctx.device;
  ReplayConfig c;
  c.execute = true;
  c.execute_layers = ctx.full && !emulated ? 4 : 1;
  if (ctx.device != nullptr) c.device_memory = &ctx.device->memory();
  const int rounds = emulated ? 1 : ctx.full ? 5 : 3;
  const LayoutTimes lt = time_layouts(ctx, o, generate(w), c, rounds);
  const auto& [kernel, ratio, s] = lt;
  Table t{{"backend", "requests", "steps", "rounds", "median_kernel_s", "min_kernel_s", "max_kernel_s",
           "median_kernel_over_paged_ratio"}};
  std::vector<double> med(3), med_ratio(3);
  for (std::size_t b = 0; b < 3; ++b) {
    med[b] = median(kernel[b]);
    med_ratio[b] = median(ratio[b]);
    t.add({s[b].backend, std::to_string(s[b].completed), std::to_string(s[b].steps), std::to_string(rounds),
           fixed(med[b], 4), fixed(*std::ranges::min_element(kernel[b]), 4),
           fixed(*std::ranges::max_element(kernel[b]), 4), fixed(med_ratio[b], 3)});
  }
  t.write_csv(ctx.out / "layout.csv");
  const auto pct = [&](double r, const std::string& what) {
    return f.quote(what + " (%)", 100 * (r - 1), 1, "this run (layout.csv, median of the rounds)");
  };
  std::vector<double> inter_over_layer;
  for (int r = 0; r < rounds; ++r) inter_over_layer.push_back(kernel[2][r] / kernel[1][r]);
  const bool same_steps = s[0].steps == s[1].steps && s[1].steps == s[2].steps;
  return fmt::format(
      "**Page layout** ({}, execute mode: {} Llama-3-8B requests decoding together, {} of its {} layers run and "
      "the time scaled to all, {}, `layout.csv`): attention took a median {} s over paged-16's "
      "one region, {} s over elastic-16's per-layer pages and {} s over interleaved pages{}; round by round "
      "(the median of each round's ratio), attention time changed by {} % from paged-16 to per-layer pages, by "
      "{} % from paged-16 to interleaved pages and by {} % from per-layer to interleaved pages. kvcached measured {} % "
      "more attention time for its interleaved layout on a GPU; a "
      "kernel reads each block's K (and V) of a layer in one run either way, and only the stride between a "
      "layer's blocks changes.{}",
      ctx.device != nullptr ? "measured on the device the header names" : "measured on the host CPU",
      f.quote("layout: requests", static_cast<double>(w.num_requests), 0, "setup"),
      f.quote("layout: layers run", c.execute_layers, 0, "setup"),
      f.quote("Llama-3-8B layers", o.model.num_layers, 0, "model preset"),
      rounds == 1 ? std::string("one run of each")
                  : f.quote("layout: rounds", rounds, 0, "setup") + " rounds side by side",
      f.quote("layout: paged-16 attention, median (s)", med[0], 3, "this run (layout.csv)"),
      f.quote("layout: elastic-16 attention, median (s)", med[1], 3, "this run (layout.csv)"),
      f.quote("layout: elastic-16-interleaved attention, median (s)", med[2], 3, "this run (layout.csv)"),
      same_steps ? fmt::format(", the same {} steps each", s[0].steps) : std::string(", in different step counts"),
      pct(med_ratio[1], "layout: per-layer pages against paged-16"),
      pct(med_ratio[2], "layout: interleaved pages against paged-16"),
      pct(median(inter_over_layer), "layout: interleaved against per-layer pages"),
      f.quote("kvcached: interleaved layout's extra attention time (%)", 56, 0,
              "kvcached (ovg-project/kvcached) layout measurement, issue 32"),
      emulated ? " The emulated device proves the code path and says nothing about a GPU's speed." : "");
}

void multi_tenant(const FigureContext& ctx) {
  const std::vector<double> gaps =
      ctx.full ? std::vector<double>{0, 5, 10, 15, 20, 25, 30, 45, 60} : std::vector<double>{0, 10, 20, 30};
  Gathered g;
  run_bursts(ctx, gaps, g);
  run_idle(ctx, g);
  write_file_atomically(ctx.out / "memory.csv", g.memory);
  Facts f;
  const std::string layout = run_layout(ctx, f);
  const std::string text = ttft_notes(g, gaps, f) + "\n\n" + idle_notes(g, f) + "\n\n" + layout +
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
                       "page-blind ({}), page-aware ({}), local ({}), spread ({}) and page-aware with compaction "
                       "({}) at gap {} s, under the bursts and a light load ({} requests at {}/s on {} GiB), {} "
                       "workloads each",
                       kBursts.requests, kBursts.rate, kBursts.kv_gib, kBlind, kAware, kLocal, kSpread, kCompact,
                       kHeadlineGap, kLight.requests, kLight.rate, kLight.kv_gib, kIdleSeeds),
           "modelled: per-operation clock on the `a100-80gb` device model (docs/clock.md), one per tenant; the page "
           "layout part measured on " +
               (ctx.device != nullptr ? ctx.device->describe() : std::string("the host CPU")) + " (execute mode)",
           text, clock_sources(ReplayConfig{}.device), std::move(f)},
          g.t);
}
}  // namespace

Figure multi_tenant_figure() {
  return {"multi-tenant", "kvcached / Prism: tenants sharing one GPU's KV memory, static split vs elastic pool",
          multi_tenant, /*on_device=*/true};
}

}  // namespace kvlab::fig
