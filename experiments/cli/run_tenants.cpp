#include "experiments/cli/run_tenants.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "alloc/core/model_geometry.hpp"
#include "experiments/cli/messages.hpp"
#include "experiments/cli/tenants_file.hpp"
#include "experiments/runs/run_control.hpp"
#include "serving/report/summary_json.hpp"
#include "serving/support/atomic_file.hpp"

namespace kvlab::cli {

namespace fs = std::filesystem;

namespace {

/// The tenants of --tenants FILE, their workloads built as `kvlab replay` would build each one.
std::vector<TenantSpec> read_tenants(const RunOptions& c, std::vector<std::string>& descriptions) {
  std::vector<TenantSpec> specs;
  for (const TenantLine& t : read_tenants_file(c.tenants)) {
    std::vector<std::string> args = t.args;
    if (!c.trace_dir.empty()) args.insert(args.end(), {"--trace-dir", c.trace_dir});
    TenantSpec s;
    s.name = t.name;
    try {
      const RunCommand tc = parse_run_command("replay", args);
      s.model = model_preset(tc.options.model_name);
      auto [requests, description] = tc.options.workload();
      s.requests = std::move(requests);
      descriptions.push_back(s.name + ": " + s.model.name + ", " + description +
                             (t.offset_s > 0 ? fmt::format(", from {:g} s", t.offset_s) : std::string()));
    } catch (const std::exception& e) {
      throw UsageError(t.where + ": " + e.what());
    }
    for (Request& r : s.requests) r.arrival_s += t.offset_s;
    s.share = t.share;
    s.limit_bytes = static_cast<std::size_t>(t.limit_gib * 0x1p30);
    s.priority = t.priority;
    for (const auto& [at, gib] : t.shrinks) s.limit_changes.push_back({at, static_cast<std::size_t>(gib * 0x1p30)});
    specs.push_back(std::move(s));
  }
  return specs;
}

/// One row of tenants.csv.
std::string tenant_row(const std::string& backend, TenantPolicy policy, const TenantRun& t, double end_s) {
  const ReplaySummary& s = t.result.summary;
  const IdleMemory idle = idle_memory(t.result, end_s);
  const PageMaps maps = page_maps(t.result);
  return fmt::format("{},{},{},{},{},{},{},{},{:.6g},{:.6g},{:.6g},{:.6g},{},{},{:.6g},{:.0f},{:.0f},{},{}\n", backend,
                     to_string(policy), t.name, s.requests, s.completed, s.rejected + s.failed, s.truncated,
                     s.preemptions, s.ttft.median_ms, s.p99_ttft_s * 1e3, s.tpot.mean_ms, s.makespan_s,
                     s.mean_held_bytes, s.peak_held_bytes, idle.idle_s, idle.held_bytes, idle.floor_bytes, maps.mapped,
                     maps.unmapped);
}

/// One row of gpu.csv: the tenants' memory together.
std::string gpu_row(const std::string& backend, TenantPolicy policy, const GpuMemory& g) {
  return fmt::format("{},{},{:.6g},{:.6g},{:.0f},{},{:.0f},{},{:.6g},{:.6g},{:.6g}\n", backend, to_string(policy),
                     g.start_s, g.end_s, g.mean_held_bytes, g.peak_held_bytes, g.mean_floor_bytes, g.peak_floor_bytes,
                     g.mean_floor_bytes > 0 ? g.mean_held_bytes / g.mean_floor_bytes : 0.0, g.mapped_pages_per_s,
                     g.unmapped_pages_per_s);
}

/// memory.csv's rows for one backend: each tenant's memory sampled on one grid over the timeline.
std::string memory_rows(const std::string& backend, TenantPolicy policy, const std::vector<TenantRun>& runs,
                        const GpuMemory& g) {
  const double every = std::max(0.5, (g.end_s - g.start_s) / 2000);  // at most about 2000 samples a tenant
  std::string out;
  for (const TenantRun& t : runs) {
    const std::vector<MemorySample> line = memory_timeline(t.result);
    for (double at = g.start_s; at <= g.end_s + 1e-9; at += every) {
      const MemorySample m = memory_at(line, at);
      out += fmt::format("{},{},{},{:.6g},{},{}\n", backend, to_string(policy), t.name, at - g.start_s, m.held_bytes,
                         m.floor_bytes);
    }
  }
  return out;
}

}  // namespace

/// kvlab replay|compare --tenants FILE: each backend replays every tenant of FILE on one timeline
/// (serving/replay/tenants.hpp), under a static split or an elastic pool.
int run_tenants(const RunOptions& c, const std::vector<std::string>& names, const std::string& invocation,
                const RunHooks& hooks, const TenantHooks& tenant_hooks) {
  if (names.empty()) throw UsageError("no backend named");
  std::ostream& out = hooks.out != nullptr ? *hooks.out : std::cout;
  std::vector<std::string> descriptions;
  const std::vector<TenantSpec> specs = read_tenants(c, descriptions);
  const std::unique_ptr<DeviceContext> device = c.open_device();
  const BackendOptions base = c.backend_options(nullptr, device.get());
  ReplayConfig rc = c.replay_config();
  rc.at_step_boundary = hooks.at_step_boundary ? hooks.at_step_boundary : std::function<void()>(throw_if_interrupted);
  rc.keep_steps = hooks.keep_steps || !c.out_dir.empty();
  std::optional<OutputLock> lock;
  if (!c.out_dir.empty()) {
    prepare_output_dir(c.out_dir, "--out");
    lock.emplace(c.out_dir, invocation);
    remove_completion_marker(c.out_dir);
  }
  out << "tenants (" << c.tenants << "), capacity " << c.capacity_gib << " GiB, clock "
      << c.clock_description(rc.device) << ":\n";
  for (const std::string& d : descriptions) out << "  " << d << "\n";
  std::string csv =
      "backend,policy,tenant,requests,completed,rejected_or_failed,truncated,preemptions,ttft_median_ms,"
      "ttft_p99_ms,tpot_mean_ms,makespan_s,mean_held_bytes,peak_held_bytes,idle_s,idle_held_bytes,idle_floor_bytes,"
      "mapped_pages,unmapped_pages\n";
  std::string gpu_csv =
      "backend,policy,start_s,end_s,mean_held_bytes,peak_held_bytes,mean_floor_bytes,peak_floor_bytes,held_over_floor_"
      "ratio,"
      "mapped_pages_per_s,unmapped_pages_per_s\n";
  std::string memory_csv = "backend,policy,tenant,time_s,held_bytes,floor_bytes\n";
  std::vector<std::string> files = {"run.json", "tenants.csv", "gpu.csv", "memory.csv"};
  out << fmt::format("\n{:<22} {:<8} {:<12} {:>9} {:>8} {:>12} {:>12} {:>9} {:>10} {:>10}\n", "backend", "policy",
                     "tenant", "completed", "preempt", "TTFT_ms", "p99TTFT_ms", "TPOT_ms", "held_GiB", "peak_GiB");
  for (const std::string& name : names) {
    const TenantPolicy policy = c.tenant_policy == "auto"
                                    ? (backend_shares_memory(name) ? TenantPolicy::elastic : TenantPolicy::static_split)
                                    : parse_tenant_policy(c.tenant_policy);
    const std::vector<TenantRun> runs = replay_tenants(specs, policy, name, base.capacity_bytes, base, rc);
    const GpuMemory gpu = gpu_memory(runs);
    if (!runs.empty()) gpu_csv += gpu_row(runs.front().result.summary.backend, policy, gpu);
    if (!runs.empty() && rc.keep_steps)
      memory_csv += memory_rows(runs.front().result.summary.backend, policy, runs, gpu);
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const ReplaySummary& s = runs[i].result.summary;
      out << fmt::format("{:<22} {:<8} {:<12} {:>9} {:>8} {:>12.1f} {:>12.1f} {:>9.1f} {:>10.3f} {:>10.3f}\n",
                         s.backend, to_string(policy), runs[i].name, s.completed, s.preemptions, s.ttft.mean_ms,
                         s.p99_ttft_s * 1e3, s.tpot.mean_ms, static_cast<double>(s.mean_held_bytes) / 0x1p30,
                         static_cast<double>(s.peak_held_bytes) / 0x1p30);
      csv += tenant_row(s.backend, policy, runs[i], gpu.end_s);
      const RunInfo info{invocation, specs[i].model.name,  descriptions[i], s.clock, rc.device.name,
                         "host",     c.provenance(*device)};
      if (tenant_hooks.on_tenant) tenant_hooks.on_tenant(runs[i].name, runs[i].result, info);
      if (c.out_dir.empty()) continue;
      write_replay_files(fs::path(c.out_dir) / runs[i].name, info, runs[i].result);
      for (const char* f : {"steps.csv", "requests.csv", "summary.json"})
        files.push_back(runs[i].name + "/" + s.backend + "/" + f);
    }
  }
  out << "held: physical KV memory held, time-weighted over busy time (elastic: the pages mapped; "
         "docs/elastic.md)\n";
  if (tenant_hooks.on_tables) tenant_hooks.on_tables({csv, gpu_csv, memory_csv});
  if (c.out_dir.empty()) return 0;
  throw_if_interrupted();
  write_file_atomically(fs::path(c.out_dir) / "run.json", run_json(invocation, c.provenance(*device)));
  write_file_atomically(fs::path(c.out_dir) / "tenants.csv", csv);
  write_file_atomically(fs::path(c.out_dir) / "gpu.csv", gpu_csv);
  write_file_atomically(fs::path(c.out_dir) / "memory.csv", memory_csv);
  out << "files written under " << c.out_dir << "/\n";
  write_completion_marker(c.out_dir, invocation, files);
  return 0;
}

}  // namespace kvlab::cli
