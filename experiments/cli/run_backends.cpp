#include "experiments/cli/run_backends.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>

#include "alloc/core/error.hpp"
#include "alloc/faults/fault_injection.hpp"
#include "alloc/memory/huge_pages.hpp"
#include "experiments/cli/messages.hpp"
#include "experiments/runs/run_control.hpp"
#include "serving/report/summary_json.hpp"
#include "serving/support/atomic_file.hpp"
#include "serving/support/progress.hpp"
#include "serving/support/shell.hpp"

namespace kvlab::cli {

namespace fs = std::filesystem;

/// Creates an output directory and checks that files can be made in it, before any work starts:
/// one line naming the directory when it cannot (exit 1).
void prepare_output_dir(const fs::path& dir, const std::string& option) {
  check_output_dir_name(dir.string(), option);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create directory " + dir.string() + ": " + ec.message());
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error("cannot write in directory " + dir.string() + ": " + std::strerror(errno));
}

namespace {

/// compare.csv, the chart, and last the completion marker naming every file of the run.
void finish_output_dir(std::ostream& out, const fs::path& dir, const std::string& invocation,
                       const std::string& description, const std::vector<ReplaySummary>& rows, bool chart,
                       const Provenance& provenance, bool plans) {
  throw_if_interrupted();
  write_file_atomically(dir / "run.json", run_json(invocation, provenance));
  write_compare_csv(dir / "compare.csv", description, rows);
  out << "files written under " << dir.string() << "/\n";
  // The chart is of this compare.csv or there is none: an older run's never stands beside new data.
  if (!chart) fs::remove(dir / "compare.png");
  std::vector<std::string> files = {"run.json", "compare.csv"};
  for (const ReplaySummary& s : rows)
    for (const char* f : {"steps.csv", "requests.csv", "summary.json", "plans.txt"})
      if (plans || f != std::string_view("plans.txt")) files.push_back(s.backend + "/" + f);
  if (chart) {
    std::string error;
    switch (plot_compare(dir, &error)) {
      case PlotOutcome::drawn:
        out << "chart: " << (dir / "compare.png").string() << "\n";
        files.push_back("compare.png");
        break;
      case PlotOutcome::no_python:
        fs::remove(dir / "compare.png");
        out << "no chart: python3 with matplotlib not found (scripts/setup.sh installs it)\n";
        break;
      case PlotOutcome::no_script:
        fs::remove(dir / "compare.png");
        out << "no chart: scripts/plot.py not found beside kvlab or in its source tree (set KVLAB_PLOT_SCRIPT)\n";
        break;
      case PlotOutcome::failed:  // the run is not complete: no marker, exit 1 (a signal says so instead)
        throw_if_interrupted();
        throw Error("drawing " + (dir / "compare.png").string() + " failed (scripts/plot.py compare): " + error);
    }
  }
  throw_if_interrupted();
  write_completion_marker(dir, invocation, files);
}

/// --dump-plans: a backend's plans, printed, or with --out written to BACKEND/plans.txt. Without
/// --dump-plans an older run's plans.txt is removed: it would not be this run's.
void write_plans(std::ostream& out, const RunOptions& c, const std::string& backend, std::int64_t steps,
                 const std::string& plans) {
  if (c.dump_plans == 0) {
    if (!c.out_dir.empty()) fs::remove(fs::path(c.out_dir) / backend / "plans.txt");
    return;
  }
  if (c.out_dir.empty()) {
    out << "plans of " << backend << ", the first " << steps << ":\n" << plans << "\n";
    return;
  }
  write_file_atomically(fs::path(c.out_dir) / backend / "plans.txt", plans);
}

/// Replays the workload through one backend on the run's device, with the faults armed (copies,
/// and on the emulated device driver calls too); prints the fault and integrity line. Afterwards the
/// emulated device must hold nothing and have seen no contract violation. `built`: the backend
/// run_backends already made for the name check (memory mode), else one is made here on the
/// device's memory.
ReplayResult replay_one(std::ostream& out, std::ostream& err, const RunOptions& c, const std::string& name,
                        std::unique_ptr<KvBackend> built, DeviceContext& device, const std::vector<Request>& workload,
                        const ReplayConfig& rc) {
  auto backend = built ? std::move(built) : make_backend(name, c.backend_options(&device.memory(), &device));
  Progress progress("replay " + backend->name(), c.progress);
  const bool teardown_fault = c.inject_faults == "teardown";
  std::unique_ptr<FaultInjector> faults = c.inject_faults.empty() || teardown_fault ? nullptr : c.fault_plan();
  std::optional<ScopedCopyFaults> guard;
  struct DriverFaults {  // disarmed however the replay ends, before the backend's teardown
    DeviceContext& device;
    ~DriverFaults() {
      try {
        device.inject_driver_faults(nullptr);
      } catch (...) {  // only a failed allocation of the entry list; never let it escape a destructor
      }
    }
  } driver_faults{device};
  if (faults) {
    guard.emplace(*faults);
    device.inject_driver_faults(faults.get());
  }
  ReplayResult r = replay(*backend, workload, rc, [&](auto d, auto t) { progress.update(d, t); });
  device.inject_driver_faults(nullptr);  // teardown runs without faults: what it frees must come back
  guard.reset();
  if (faults || c.verify_kv)
    out << r.summary.backend << ": " << (faults ? std::to_string(faults->injected()) + " faults injected, " : "")
        << r.summary.failed << " requests failed with a reason, " << r.summary.rejected << " rejected"
        << (c.verify_kv ? ", " + std::to_string(r.summary.kv_tokens_checked) + " token reads verified, " +
                              std::to_string(r.summary.kv_mismatches) + " KV mismatches"
                        : std::string())
        << "\n";
  if (teardown_fault) device.refuse_unmaps(true);
  backend.reset();
  // A fault found at teardown does not undo the measurement: it is recorded with the results, said
  // at once, and makes the run exit non-zero (run_backends).
  if (std::string problems = device.problems(); !problems.empty()) {
    r.summary.device_fault =
        "--device " + device.spec().name() + ": backend " + r.summary.backend + " left the device unclean: " + problems;
    err << "kvlab: " << r.summary.device_fault << "\n";
  }
  if (teardown_fault) {  // the driver answers again: what the fault held back is given back now
    device.refuse_unmaps(false);
    (void)device.problems();
  }
  return r;
}

/// More than 1 % of a run's requests rejected: one line on `err` saying how many, the commonest
/// reason, and which option changes it (a README example once rejected all its requests silently).
void warn_about_rejections(std::ostream& err, const ReplayResult& r) {
  const ReplaySummary& s = r.summary;
  if (s.requests == 0 || s.rejected * 100 <= s.requests) return;
  std::map<std::string, std::int64_t> reasons;
  for (const RequestRecord& rec : r.requests)
    if (rec.status == RequestRecord::Status::rejected) ++reasons[rec.reason];
  const auto top = std::max_element(reasons.begin(), reasons.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
  std::string hint = "a larger --capacity-gib";
  if (top->first.starts_with("longer than max_seq_len"))
    hint =
        "--max-seq-len (a model with a longer context: kvlab models), shorter --prompt-len/--output-len, or "
        "--long-requests truncate";
  else if (top->first == "empty prompt")
    hint = "a trace whose prompts are not empty";
  err << fmt::format(
      "kvlab: warning: {}: {} of {} requests ({:.1f} %) were rejected, {} of them: {}; change it with {}\n", s.backend,
      s.rejected, s.requests, 100.0 * static_cast<double>(s.rejected) / static_cast<double>(s.requests), top->second,
      top->first, hint);
}

/// Replays one workload through each named backend; prints the table; writes files.
/// Refuses (exit 2, before anything is written) a run whose records would pass the memory limit.
void check_kept_memory(const std::vector<Request>& workload, const ReplayConfig& rc, double max_memory_gib) {
  const KeptMemoryEstimate kept = estimate_kept_memory(workload, rc);
  const double machine = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  const double limit = max_memory_gib > 0 ? max_memory_gib * 0x1p30 : machine / 2;
  if (static_cast<double>(kept.bytes) <= limit) return;
  throw UsageError(fmt::format(
      "--max-memory-gib: this run would keep up to {:.2f} GiB in memory ({} requests, {} generated tokens' "
      "inter-token gaps{}), over the limit of {:.2f} GiB{}; shorten the workload (--limit, --requests, "
      "--output-len){} or raise --max-memory-gib",
      static_cast<double>(kept.bytes) / 0x1p30, kept.requests, kept.generated_tokens,
      kept.steps > 0 ? fmt::format(", up to {} steps for steps.csv", kept.steps) : std::string(), limit / 0x1p30,
      max_memory_gib > 0 ? "" : " (half of this machine's memory)", kept.steps > 0 ? ", drop --out" : ""));
}

/// Makes each named backend once, before any long run: a bad name, one named twice, or a preemption
/// it cannot do fails here. Memory mode replays these; with KV storage (`storage`) they were only
/// accounting probes and each replay makes its own on the device's memory (nullptr here).
std::vector<std::unique_ptr<KvBackend>> make_named_backends(const RunOptions& c, const std::vector<std::string>& names,
                                                            const BackendOptions& probe, bool storage) {
  std::vector<std::unique_ptr<KvBackend>> built;
  std::vector<std::pair<std::string, std::string>> canonical;  // (canonical name, as given)
  for (const auto& n : names) {
    auto b = make_backend(n, probe);
    // Two spellings of one backend (paged-16, paged-016) would write one folder twice.
    for (const auto& [name, given] : canonical)
      if (name == b->name())
        throw UsageError(
            fmt::format("--backends: '{}' and '{}' are the same backend ({}); name each backend once", given, n, name));
    canonical.emplace_back(b->name(), n);
    if (c.preemption == "swap" && !b->supports_swap())
      throw UsageError(
          fmt::format("--preemption swap: backend {} cannot swap (choose backends that can, e.g. paged-16, "
                      "or --preemption recompute)",
                      n));
    built.push_back(storage ? nullptr : std::move(b));
  }
  return built;
}

}  // namespace

int run_backends(const RunOptions& c, const std::vector<std::string>& names, const std::string& invocation, bool chart,
                 const RunHooks& hooks) {
  std::ostream& out = hooks.out != nullptr ? *hooks.out : std::cout;
  std::ostream& err = hooks.err != nullptr ? *hooks.err : std::cerr;
  if (names.empty()) throw UsageError("no backend named");
  const ModelGeometry model = model_preset(c.model_name);
  // Execute mode needs real KV bytes: the device's memory (host memory by default), one backend at
  // a time. The device is opened first: without the GPU asked for, nothing else runs.
  const std::unique_ptr<DeviceContext> device = c.open_device();
  const BackendOptions probe = c.backend_options(nullptr, device.get());
  // Memory mode replays the backends made here (each is made once per run); with KV storage these
  // are accounting-only probes, and each replay makes its own on the device's memory, one at a time.
  const bool storage = c.execute || c.verify_kv;
  std::vector<std::unique_ptr<KvBackend>> built = make_named_backends(c, names, probe, storage);
  auto [workload, description] = c.workload();
  ReplayConfig rc = c.replay_config();
  // SIGINT/SIGTERM stop the replay between steps (Python: its own signal check).
  rc.at_step_boundary = hooks.at_step_boundary ? hooks.at_step_boundary : std::function<void()>(throw_if_interrupted);
  if (hooks.admission_order) rc.schedule.admission_order = hooks.admission_order;
  if (hooks.preemption_victim) rc.schedule.preemption_victim = hooks.preemption_victim;
  rc.keep_steps = hooks.keep_steps || !c.out_dir.empty();  // the CLI keeps only what it writes (steps.csv)
  check_kept_memory(workload, rc, c.max_memory_gib);       // before --out is touched
  std::optional<OutputLock> lock;  // one run per --out at a time (experiments/runs/run_control.hpp)
  if (!c.out_dir.empty()) {
    prepare_output_dir(c.out_dir, "--out");  // fail now, not after the replays
    lock.emplace(c.out_dir, invocation);
    remove_completion_marker(c.out_dir);  // an interrupted re-run must not look complete
  }
  if (c.device.kind != Device::host) rc.device_memory = &device->memory();  // the kernels' q, out, offsets
  out << "workload: " << description << "\n"
      << "model: " << model.name << " (" << model.kv_bytes_per_token() << " KV bytes/token), capacity "
      << c.capacity_gib << " GiB, clock " << c.clock_description(rc.device) << "\n";
  if (c.device.kind != Device::host) out << "device: " << device->describe() << "\n";
  if (c.device.kind == Device::host && storage) out << "host memory: " << describe_host_huge_pages() << "\n";
  out << "\n";
  std::vector<ReplaySummary> rows;
  bool corrupted = false;
  std::vector<std::string> faults;
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::string plans;  // --dump-plans: the first N plans, as text
    std::int64_t planned = 0;
    ReplayConfig rc_backend = rc;
    if (c.dump_plans > 0)
      rc_backend.on_plan = [&](const StepPlan& plan) {
        if (planned++ < c.dump_plans) plans += format_plan(plan);
      };
    const ReplayResult r = replay_one(out, err, c, names[i], std::move(built[i]), *device, workload, rc_backend);
    warn_about_rejections(err, r);
    if (c.verify_kv && r.summary.kv_mismatches > 0) corrupted = true;
    if (!r.summary.device_fault.empty()) faults.push_back(r.summary.device_fault);
    rows.push_back(r.summary);
    const RunInfo info{invocation,     model.name,      description,          r.summary.clock,
                       rc.device.name, c.device.name(), c.provenance(*device)};
    if (!c.out_dir.empty()) write_replay_files(c.out_dir, info, r);
    if (hooks.on_result) hooks.on_result(r, info);
    write_plans(out, c, r.summary.backend, std::min(planned, c.dump_plans), plans);
  }
  print_summary_table(out, rows);
  if (corrupted) {
    err << "kvlab: KV integrity check failed: some KV did not read back as written\n";
    return 1;
  }
  if (!c.out_dir.empty())
    finish_output_dir(out, c.out_dir, invocation, description, rows, chart, c.provenance(*device), c.dump_plans > 0);
  if (!faults.empty()) {
    err << "kvlab: " << faults.size() << " of " << names.size()
        << " backend(s) left the device unclean (recorded as device_fault in their summary.json); first: "
        << faults.front() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace kvlab::cli
