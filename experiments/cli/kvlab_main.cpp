// kvlab: the command line. `kvlab help` lists the commands; each has --help with examples.
// Bad arguments print one line on stderr and exit with status 2; failures (an output that cannot be
// written, stdout included) print one line and exit with status 1.
#include <boost/program_options.hpp>

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <optional>
#include <iostream>
#include <sstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "alloc/cuda/cuda_runtime.hpp"
#include "alloc/core/error.hpp"
#include "alloc/faults/fault_injection.hpp"
#include "alloc/memory/limiting_adaptor.hpp"
#include "alloc/core/model_geometry.hpp"
#include "serving/replay/backend_factory.hpp"
#include "experiments/runs/calibrate.hpp"
#include "experiments/cli/messages.hpp"
#include "experiments/cli/run_backends.hpp"
#include "experiments/cli/run_options.hpp"
#include "experiments/cli/run_tenants.hpp"
#include "experiments/cli/tenants_file.hpp"
#include "serving/replay/tenants.hpp"
#include "serving/support/provenance.hpp"
#include "serving/clock/cost_model.hpp"
#include "experiments/figures/figures.hpp"
#include "serving/support/atomic_file.hpp"
#include "serving/report/summary_json.hpp"
#include "serving/support/progress.hpp"
#include "serving/replay/replayer.hpp"
#include "serving/replay/step_plan.hpp"
#include "experiments/runs/run_control.hpp"
#include "kernels/attention.hpp"
#include "kernels/simt/emulated_attention.hpp"
#include "serving/report/report.hpp"
#include "experiments/runs/sweep.hpp"
#include "serving/support/shell.hpp"
#include "serving/traces/trace_reader.hpp"
#include "serving/traces/workload.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace kvlab;
using namespace kvlab::cli;

namespace {

/// The test seams of this process, read from the environment once, here at the composition root
/// and nowhere else; each is injected where it applies (docs/bad-inputs.md):
///   KVLAB_FAIL_WRITES_AFTER_BYTES=N  every write fails (ENOSPC) once N bytes went out (fail_writes_after)
///   KVLAB_MAX_MAP_COUNT=N            host vmm drivers take N for vm.max_map_count (PosixVmDriver)
struct TestSeams {
  std::int64_t max_map_count = 0;
} g_seams;

/// A whole number >= 0 in environment variable `name`, or -1 when it is unset or not one.
std::int64_t seam_value(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return *end == '\0' && n >= 0 ? n : -1;
}

void read_test_seams() {
  if (const std::int64_t n = seam_value("KVLAB_FAIL_WRITES_AFTER_BYTES"); n >= 0) fail_writes_after(n);
  g_seams.max_map_count = std::max<std::int64_t>(0, seam_value("KVLAB_MAX_MAP_COUNT"));
}

/// The command as the user could type it again (recorded in every output file).
std::string command_line(int argc, char** argv) {
  std::vector<std::string> words = {"kvlab"};
  words.insert(words.end(), argv + 1, argv + argc);
  return shell_join_one_line(words);
}

/// collect's CSV: named, not a directory, in a directory that exists and can be written (checked
/// before the points are read).
void check_output_file(const fs::path& file) {
  if (file.empty()) throw UsageError("the CSV argument names no file");
  std::error_code ec;
  if (fs::is_directory(file, ec)) throw UsageError("CSV " + file.string() + ": is a directory");
  const fs::path parent = file.has_parent_path() ? file.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec))
    throw Error("cannot write " + file.string() + ": " + std::strerror(fs::exists(parent, ec) ? ENOTDIR : ENOENT));
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    throw Error("cannot write " + file.string() + ": " + std::strerror(errno));
}

/// Flushes stdout; false (errno set) when anything written to it was lost (a full disk, a closed pipe).
bool stdout_ok() {
  errno = 0;
  std::cout.flush();
  const bool ok = static_cast<bool>(std::cout) && std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (!ok && errno == 0) errno = EIO;
  return ok;
}

/// Commands that take no positional arguments reject stray ones instead of ignoring them.

const char* kUsage =
    "kvlab - a testbed for GPU memory management of LLM KV caches\n"
    "\n"
    "Usage: kvlab COMMAND [OPTIONS]\n"
    "\n"
    "Commands:\n"
    "  replay    replay a workload (trace or synthetic) through one KV-cache backend\n"
    "  compare   replay the same workload through several backends side by side; table + PNG chart\n"
    "  sweep     run a grid of replays (backends x sizes x workloads x models x capacities) in parallel\n"
    "  collect   merge the points of a sweep into one CSV\n"
    "  figure    reproduce a paper figure into results/NAME (data, plot, README with the paper's numbers)\n"
    "  calibrate measure this machine into a device model file (the modelled clock's constants)\n"
    "  devices   show the devices this binary can use (host always; CUDA when a driver and GPU exist)\n"
    "  models    list the model presets and their KV bytes per token\n"
    "  version   print the version\n"
    "\n"
    "Run 'kvlab COMMAND --help' for a command's options and examples.\n";

int cmd_devices() {
  std::cout << "host: " << std::thread::hardware_concurrency() << " hardware threads\n";
  const CudaStatus& c = cuda_status();
  std::cout << "cuda: " << (c.available ? "available - " : "unavailable - ") << c.message << "\n";
  if (c.compiled)
    std::cout << "      runtime " << c.runtime_version << " (static), driver " << c.driver_version << "\n";
  std::cout << "emulated: "
            << (KVLAB_HAS_CUDA_HEADERS ? "available - the CUDA code path on the host (driver double, SIMT emulator)"
                                       : "unavailable - built without the CUDA toolkit headers")
            << "\n";
  return 0;
}

int cmd_models() {
  std::cout << "model           layers  q_heads  kv_heads  head_dim  KV bytes/token  max_context\n";
  for (const auto& name : model_preset_names()) {
    const ModelGeometry m = model_preset(name);
    std::printf("%-15s %6d %8d %9d %9d %15zu %12d\n", m.name.c_str(), m.num_layers, m.num_q_heads, m.num_kv_heads,
                m.head_dim, m.kv_bytes_per_token(), m.max_context);
  }
  return 0;
}

const char* kReplayExamples =
    "\nExamples:\n"
    "  kvlab replay --backend paged-16                      # synthetic workload, OPT-13B, 12 GiB of KV\n"
    "  kvlab replay --backend contiguous-pow2 --trace AzureLLMInferenceTrace_conv.csv --model llama-3-8b \\\n"
    "      --capacity-gib 8 --limit 2000        # a trace needs a model whose context holds its requests\n"
    "  kvlab replay --backend paged-16 --trace sharegpt_8k_filtered_stats_llama2_tokenizer.csv --rate 2 \\\n"
    "      --model llama-3-8b --capacity-gib 8\n"
    "  kvlab replay --backend paged-16 --model llama-3-8b --capacity-gib 1 --execute --execute-layers 2\n"
    "  kvlab replay --backend vmm-2m --device emulated --execute --verify-kv --execute-layers 1 --model yi-6b \\\n"
    "      --capacity-gib 0.25 --max-seq-len 256 --requests 8 --prompt-len uniform:8:40 --output-len uniform:2:10\n"
    "      # the CUDA code path without a GPU (docs/devices.md)\n"
    "  kvlab replay --config results/my-run/run.json --out /tmp/rerun  # rerun a recorded run elsewhere\n";

const char* kReplayAbout =
    "Replays a workload under continuous batching through one KV-cache backend and prints where the\n"
    "KV capacity went (token states, reserved, internal and external fragmentation, free), batch\n"
    "sizes, throughput and latency.\n\n";

const char* kCompareAbout =
    "Replays one workload through several backends (by default the three contiguous reservation\n"
    "policies, paged at several block sizes and vmm at several page sizes), prints a side-by-side\n"
    "table and, with --out, writes compare.csv and a PNG chart of the memory breakdown and\n"
    "throughput.\n\n";

const char* kCompareExamples =
    "\nExamples:\n"
    "  kvlab compare --trace AzureLLMInferenceTrace_conv.csv --model llama-3-8b --capacity-gib 8 \\\n"
    "      --time-scale 0.5 --out results/compare-azure-conv   # the main job (scripts/run.sh)\n"
    "  kvlab compare --backends contiguous-max,paged-16 --requests 500 --rate 4\n"
    "  kvlab compare --model llama-3-8b --capacity-gib 8 --samples 4 --out /tmp/sampling\n";

/// kvlab replay and kvlab compare: one backend without a chart, or several with one.
int cmd_run(const std::string& command, const std::vector<std::string>& given_args, const std::string& invocation) {
  const bool compare = command == "compare";
  RunCommand run = parse_run_command(command, given_args);
  run.options.max_map_count = g_seams.max_map_count;
  if (run.help) {
    std::cout << "Usage: kvlab " << command << " [OPTIONS]\n\n"
              << (compare ? kCompareAbout : kReplayAbout) << run.help_text
              << (compare ? kCompareExamples : kReplayExamples);
    return 0;
  }
  if (!run.options.tenants.empty()) return run_tenants(run.options, run.backends, invocation);
  return run_backends(run.options, run.backends, invocation, compare);
}

fs::path self_exe() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find the kvlab executable (/proc/self/exe)");
  return p;
}

/// kvlab sweep's options, and its --help text.
struct SweepArgs {
  std::string config, out;
  int jobs = 0;
  bool slurm = false, dry = false, progress = true;
  SlurmOptions resources;

  /// Parses `args`; false when --help was printed.
  bool parse(const std::vector<std::string>& args) {
    po::options_description opts("kvlab sweep options");
    opts.add_options()("help,h", "show this help")("config", po::value(&config), "the sweep file (also positional)")(
        "out", po::value(&out)->default_value("results/sweep"), "one point-NNNN/ directory per grid point under here")(
        "jobs,j", po::value(&jobs)->default_value(0), "concurrent replays (0: one per hardware thread)")(
        "slurm", po::bool_switch(&slurm),
        "write OUT/sweep.sbatch (a Slurm array of the unfinished points) instead of running")(
        "time", po::value(&resources.time), "--slurm: #SBATCH --time (e.g. 01:00:00)")(
        "mem", po::value(&resources.mem), "--slurm: #SBATCH --mem (e.g. 16G)")("gres", po::value(&resources.gres),
                                                                               "--slurm: #SBATCH --gres (e.g. gpu:1)")(
        "partition", po::value(&resources.partition), "--slurm: #SBATCH --partition")(
        "account", po::value(&resources.account), "--slurm: #SBATCH --account")(
        "dry-run", po::bool_switch(&dry), "list the points and their commands, run nothing")("no-progress",
                                                                                             "no progress line");
    po::positional_options_description pos;
    pos.add("config", 1);
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::cout << "Usage: kvlab sweep CONFIG [OPTIONS]\n\n"
                   "Runs every combination of the axes in CONFIG as a `kvlab replay`, in parallel local processes;\n"
                   "each point's directory holds command.txt (its exact command) and its results; points already\n"
                   "complete (complete.json) are skipped, so an interrupted sweep resumes. Sweep file format:\n"
                   "experiments/runs/sweep.hpp and docs/experiments.md.\n\n"
                << opts
                << "\nExamples:\n"
                   "  kvlab sweep experiments/sweeps/block-size.sweep -j 2 --out results/sweep-block-size\n"
                   "  kvlab sweep my.sweep --slurm --time 02:00:00 --mem 32G --out /scratch/sweep && sbatch "
                   "/scratch/sweep/sweep.sbatch\n"
                   "  kvlab collect results/sweep-block-size\n";
      return false;
    }
    po::notify(vm);
    progress = vm.count("no-progress") == 0;
    check(vm);
    return true;
  }

  void check(const po::variables_map& vm) {
    if (config.empty()) throw UsageError("no sweep file given (kvlab sweep CONFIG)");
    if (jobs < 0) throw UsageError("-j must not be negative");
    if (jobs == 0) jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (!slurm)
      for (const char* o : {"time", "mem", "gres", "partition", "account"})
        if (vm.count(o)) throw UsageError(fmt::format("--{} applies only with --slurm", o));
    validate_slurm_options(resources);
    check_output_dir_name(out, "--out");
    if (slurm) validate_slurm_out(out);  // before anything is created
  }
};

int cmd_sweep(const std::vector<std::string>& args, const std::string& invocation) {
  SweepArgs a;
  if (!a.parse(args)) return 0;
  const auto points = expand_sweep(read_sweep_file(a.config));
  const fs::path exe = self_exe();
  if (a.dry) {
    for (const auto& p : points) std::cout << p.name << ": " << point_command(p, a.out, exe) << "\n";
    return 0;
  }
  prepare_output_dir(a.out, "--out");
  const OutputLock lock(a.out, invocation);  // one sweep per directory (each point is locked by its replay)
  if (a.slurm) {
    const std::size_t tasks = write_slurm_script(points, a.out, exe, a.resources);
    write_sweep_grid(points, a.out);
    if (tasks == 0)
      std::cout << "all " << points.size() << " points are complete; nothing to submit\n";
    else
      std::cout << tasks << " of " << points.size() << " points: sbatch "
                << shell_quote((fs::path(a.out) / "sweep.sbatch").string()) << "\n";
    return 0;
  }
  write_sweep_grid(points, a.out);
  std::cout << points.size() << " points under " << a.out << "/ with " << a.jobs << " jobs\n";
  const int failed = run_sweep(points, a.out, a.jobs, exe, a.progress);
  const Collected c = collect_sweep(a.out);
  if (c.rows == 0) {  // a header alone is no result (kvlab collect refuses it too)
    fs::remove(fs::path(a.out) / "collected.csv");
    std::cout << "no point finished: nothing collected; " << failed << " points failed (see their stderr.txt)\n";
    return 1;
  }
  write_file_atomically(fs::path(a.out) / "collected.csv", c.csv);
  std::cout << c.rows << " rows in " << (fs::path(a.out) / "collected.csv").string();
  if (failed) std::cout << "; " << failed << " points failed (see their stderr.txt)";
  std::cout << "\n";
  return failed ? 1 : 0;
}

int cmd_collect(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "Usage: kvlab collect SWEEP_DIR [CSV]\n\nMerges the finished points (a valid complete.json) of the\n"
                 "sweep's current grid (sweep-grid.json), SWEEP_DIR/point-*/compare.csv, into one CSV (default\n"
                 "SWEEP_DIR/collected.csv): each row with its point, one column per sweep axis, and its command.\n"
                 "Points left out (unfinished, failed, or not in the current grid) are listed.\n\nExample:\n"
                 "  kvlab collect results/sweep-block-size\n";
    return args.empty() ? 2 : 0;
  }
  if (!fs::is_directory(args[0])) throw UsageError("'" + args[0] + "' is not a sweep directory");
  if (args.size() > 2) throw UsageError("collect takes a sweep directory and optionally a CSV path");
  const fs::path csv = args.size() > 1 ? fs::path(args[1]) : fs::path(args[0]) / "collected.csv";
  check_output_file(csv);
  check_collect_output(args[0], csv);
  const Collected c = collect_sweep(args[0]);  // read everything first: nothing found, nothing written
  for (const std::string& s : c.skipped) std::cout << "skipped " << s << "\n";
  if (c.rows == 0)
    throw UsageError("'" + args[0] + "' holds no finished sweep point (point-*/ with a valid complete.json)");
  write_file_atomically(csv, c.csv);
  std::cout << c.rows << " rows in " << csv.string() << "\n";
  return 0;
}

/// The regular files a figure left in its folder (names relative to it), for its marker.
std::vector<std::string> result_files(const fs::path& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name != kLockFile && name != kMarkerFile) files.push_back(name);
  }
  std::sort(files.begin(), files.end());
  return files;
}

/// "CUDA device 0 (NVIDIA H100 80GB HBM3" -> "cuda-device-0-nvidia-h100-80gb-hbm3": a directory
/// name for a device's results (the description up to its first ';', which starts the versions).
std::string device_slug(const std::string& name) {
  std::string slug;
  for (const char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      slug += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!slug.empty() && slug.back() != '-')
      slug += '-';
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug.empty() ? "gpu" : slug;
}

/// The figures --device runs: every one that measures on a device (all, or the one named); a
/// modelled figure named with a device is a usage error.
/// The figures `names` picks ("all" or NAME[,NAME...]; unknown names fail), less `skip` (names,
/// comma-separated), that can run on `device`.
std::vector<const Figure*> device_figures(const std::string& names, const std::string& skip, const DeviceSpec& device) {
  std::vector<const Figure*> picked;
  if (names.empty()) (void)find_figure(names);  // "unknown figure ''"
  if (names == "all") {
    for (const Figure& f : figures()) picked.push_back(&f);
  } else {
    for (const std::string& n : split_list(names))
      if (const Figure& f = find_figure(n); std::ranges::find(picked, &f) == picked.end()) picked.push_back(&f);
  }
  if (picked.empty()) throw UsageError("name a figure, several (NAME,NAME) or all");
  for (const std::string& n : split_list(skip)) std::erase(picked, &find_figure(n));
  if (picked.empty()) throw UsageError("--skip leaves no figure to make");
  std::vector<const Figure*> todo;
  for (const Figure* f : picked)
    if (f->on_device || device.kind == Device::host) todo.push_back(f);
  if (todo.empty()) {
    std::string measured;
    for (const Figure& g : figures())
      if (g.on_device) measured += (measured.empty() ? "" : ", ") + g.name;
    throw UsageError(
        fmt::format("figure {} is modelled on the host (its clock is a device model): --device {} "
                    "applies to the measured figures ({})",
                    picked.front()->name, device.name(), measured));
  }
  return todo;
}

/// --format: png, pdf and/or svg, comma-separated (exit 2 otherwise).
void check_plot_formats(const std::string& formats) {
  for (const std::string& f : split_list(formats))
    if (f != "png" && f != "pdf" && f != "svg")
      throw UsageError("--format: '" + f + "' is not png, pdf or svg (comma-separated, e.g. png,pdf)");
  if (split_list(formats).empty()) throw UsageError("--format: name png, pdf and/or svg");
}

/// Runs one figure into ctx.out and writes its marker; false when it left the device unclean (its
/// files stand, the fault written beside them).
bool run_figure(const Figure& f, const FigureContext& ctx, DeviceContext* device_context) {
  const auto t0 = std::chrono::steady_clock::now();
  std::cout << "figure " << f.name << " (" << f.title << ")\n";
  fs::remove(ctx.out / "device_fault.txt");  // a clean re-run leaves no old fault behind
  f.run(ctx);
  throw_if_interrupted();  // a figure stopped by a signal gets no marker
  bool clean = true;
  if (device_context) {  // a fault at teardown: the figure's files stand, the fault is written beside them
    if (const std::string problems = device_context->problems(); !problems.empty()) {
      const std::string fault = "figure " + f.name + " left device resources behind: " + problems;
      write_file_atomically(ctx.out / "device_fault.txt", fault + "\n");
      std::cerr << "kvlab figure: " << fault << "\n";
      clean = false;
    }
  }
  write_completion_marker(ctx.out, ctx.command, result_files(ctx.out));
  std::cout << "  -> " << ctx.out.string() << "/ in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
  return clean;
}

int cmd_figure(const std::vector<std::string>& args, const std::string& invocation) {
  std::string name, out, trace_dir, device_text = "host", formats = "png", skip;
  bool full = false;
  po::options_description opts("kvlab figure options");
  opts.add_options()("help,h", "show this help")("name", po::value(&name),
                                                 "the figure (also positional), several as NAME,NAME, or all")(
      "skip", po::value(&skip), "figures to leave out (comma-separated), e.g. with all")(
      "full", po::bool_switch(&full), "paper scale (default: smoke scale, seconds)")(
      "device", po::value(&device_text)->default_value("host"),
      "host, cuda[:N] or emulated: where the measured figures (kernel-overhead, page-size, overlap, multi-tenant's "
      "page layouts) run")(
      "out", po::value(&out)->default_value("results"),
      "figures go to OUT/NAME/ (with --device cuda:N the default is results/gpu/cuda-device-N-<GPU name>, with "
      "emulated results/emulated)")("trace-dir", po::value(&trace_dir),
                                    "where the public traces are (default: $KVLAB_TRACE_DIR or ../shared/traces)")(
      "format", po::value(&formats)->default_value("png"), "the plot's files: png, pdf and/or svg, comma-separated")(
      "no-progress", "no progress lines");
  po::positional_options_description pos;
  pos.add("name", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(opts).positional(pos).run(), vm);
  if (vm.count("help") || (name.empty() && args.empty())) {
    std::cout << "Usage: kvlab figure NAME[,NAME...]|all [--skip NAMES] [--full] [--out DIR]\n\nFigures:\n";
    for (const Figure& f : figures()) std::printf("  %-18s %s\n", f.name.c_str(), f.title.c_str());
    std::cout
        << "\n"
        << opts
        << "\nExamples:\n"
           "  kvlab figure memory-breakdown            # smoke scale into results/memory-breakdown/\n"
           "  kvlab figure block-size --full           # paper scale\n"
           "  kvlab figure all --out /tmp/figs\n"
           "  kvlab figure all --skip kernel-overhead,prefix-cache   # all but the two slowest\n"
           "  kvlab figure sharing,multi-tenant\n"
           "  kvlab figure request-rate --format png,pdf   # a PDF beside the PNG for a paper\n"
           "  kvlab figure kernel-overhead --device cuda    # on GPU 0, into results/gpu/cuda-device-0-<GPU name>/\n";
    return vm.count("help") ? 0 : 2;
  }
  po::notify(vm);
  check_plot_formats(formats);
  const DeviceSpec device = parse_device_spec(device_text);
  const std::vector<const Figure*> todo = device_figures(name, skip, device);
  std::unique_ptr<DeviceContext> device_context;
  if (device.kind != Device::host) {
    device_context = std::make_unique<DeviceContext>(device, std::size_t{2} << 30);
    if (vm["out"].defaulted())
      out =
          device.kind == Device::cuda
              ? "results/gpu/" + device_slug(device_context->describe().substr(0, device_context->describe().find(';')))
              : "results/emulated";
    std::cout << "device: " << device_context->describe() << "\n";
  }
  check_output_dir_name(out, "--out");
  for (const Figure* f : todo) prepare_output_dir(fs::path(out) / f->name, "--out");  // before any figure runs
  // One run per figure folder at a time, and a figure is finished only with its marker
  // (experiments/runs/run_control.hpp), exactly as replay and compare --out.
  std::vector<std::unique_ptr<OutputLock>> locks;
  for (const Figure* f : todo) locks.push_back(std::make_unique<OutputLock>(fs::path(out) / f->name, invocation));
  for (const Figure* f : todo) remove_completion_marker(fs::path(out) / f->name);
  int faults = 0;
  for (const Figure* f : todo) {
    FigureContext ctx;
    ctx.full = full;
    ctx.out = fs::path(out) / f->name;
    ctx.trace_dir = trace_dir.empty() ? default_trace_dir() : fs::path(trace_dir);
    ctx.command = todo.size() > 1 ? "kvlab figure " + f->name + (full ? " --full" : "") +
                                        (device.kind == Device::host ? "" : " --device " + device.name())
                                  : invocation;
    ctx.progress = vm.count("no-progress") == 0;
    ctx.formats = formats;
    ctx.device = device_context.get();
    ctx.provenance = current_provenance(resolved_options(vm));
    if (device_context) ctx.provenance.device = device_context->describe();
    ctx.provenance.kernels = "as the README's clock line says (each figure names the kernels it measured)";
    if (!run_figure(*f, ctx, device_context.get())) ++faults;
  }
  return faults > 0 ? 1 : 0;
}

int cmd_calibrate(const std::vector<std::string>& args) {
  CalibrateOptions o;
  std::string out;
  po::options_description opts("kvlab calibrate options");
  opts.add_options()("help,h", "show this help")("device", po::value(&o.device)->default_value("host"),
                                                 "host, cuda[:N] (a GPU), or emulated (the CUDA code path on the host: "
                                                 "tests it, measures no GPU)")(
      "base", po::value(&o.base)->default_value(o.base),
      "GPU only: the preset whose peak_flops and linear-layer constants the file takes (not measured)")(
      "out", po::value(&out), "the device model file to write (required)")(
      "name", po::value(&o.name)->default_value("host"), "the model's name (one word)")(
      "quick", po::bool_switch(&o.quick), "short measurements (seconds; for CI), noisier")(
      "kernels", po::value(&o.kernels)->default_value(o.kernels),
      "GPU only: the attention kernels measured: auto (FlashInfer's where built, else kvlab's), kvlab or flashinfer")(
      "no-progress", "no progress lines on stderr");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(opts).positional(kNoPositional).run(), vm);
  if (vm.count("help")) {
    std::cout
        << "Usage: kvlab calibrate --device host|cuda[:N]|emulated --out FILE [--name NAME] [--base PRESET] "
           "[--quick]\n\n"
           "Measures this machine (memory bandwidth, fp32 FMA peak, the attention kernel through the contiguous\n"
           "and paged views, map/unmap per page, copies, kvlab's own CPU time per step) and writes a device\n"
           "model file whose every constant names how it was measured; pass it to replay/compare with\n"
           "--device-model FILE. About 15 s on 2 cores (--quick: seconds). On a GPU the same measurements run\n"
           "through the CUDA kernels, the driver's VMM calls and cudaMemcpy; peak_flops and the linear layers\n"
           "come from --base. See docs/clock.md.\n\n"
        << opts
        << "\nExamples:\n"
           "  kvlab calibrate --device host --out serving/devices/host.txt --name host\n"
           "  kvlab calibrate --device host --out /tmp/ci.txt --quick && kvlab replay --device-model /tmp/ci.txt\n"
           "  kvlab calibrate --device cuda --base h100-sxm --name my-h100 --out my-h100.txt\n";
    return 0;
  }
  po::notify(vm);
  if (!vm.count("out")) throw UsageError("--out FILE is required (the device model file to write)");
  // Both checked before any measurement (exit 2); --base only where it is used (a GPU).
  if (parse_device_spec(o.device).kind != Device::host) {
    try {
      (void)device_model_preset(o.base);
    } catch (const InvalidArgument& e) {
      throw UsageError("--base: " + user_message(e));
    }
  }
  if (o.kernels != "auto" && o.kernels != "kvlab" && o.kernels != "flashinfer")
    throw UsageError("--kernels must be auto, kvlab or flashinfer (got '" + o.kernels + "')");
  if (o.kernels == "flashinfer" && (parse_device_spec(o.device).kind != Device::cuda || !flashinfer_built()))
    throw UsageError(flashinfer_built()
                         ? "--kernels flashinfer measures FlashInfer's CUDA kernels: it needs --device cuda"
                         : "--kernels flashinfer: this binary was built without FlashInfer");
  check_calibrate_output(out);
  if (vm.count("no-progress") == 0)
    o.progress = [](const std::string& line) { std::cerr << "calibrate: " << line << std::endl; };
  std::string fault;  // found at teardown: the measurements stand, the run fails
  const DeviceModel m = calibrate_device(o, &fault);
  const std::string text = format_device_model(m);
  (void)parse_device_model(text, out);  // what is written must read back
  write_file_atomically(out, text);
  std::cout << "wrote " << out << " (device model '" << m.name << "'; use it with --device-model " << out << ")\n";
  if (!fault.empty()) {
    std::cerr << "kvlab calibrate: " << fault << "\n";
    return 1;
  }
  return 0;
}

int run_command(int argc, char** argv) {
  const std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  const std::string command = argc >= 2 ? argv[1] : "";
  try {
    if (command.empty() || command == "help" || command == "--help" || command == "-h") {
      std::cout << kUsage;
      return command.empty() ? 2 : 0;
    }
    const bool no_args = args.empty();
    const bool simple = command == "version" || command == "--version" || command == "devices" || command == "models";
    if (simple && args.size() == 1 && (args.front() == "--help" || args.front() == "-h")) {
      std::cout << "Usage: kvlab " << command << "\n\n"
                << (command == "models"
                        ? "Lists the model presets: layers, heads, head dim, KV dtype and KV bytes per token.\n"
                    : command == "devices"
                        ? "Says what this machine offers: host threads, whether CUDA is usable, and why not.\n"
                        : "Prints kvlab's version and whether it was built with CUDA.\n")
                << "It takes no options.\n";
      return 0;
    }
    if (simple && !no_args) throw UsageError("'" + command + "' takes no arguments (got '" + args.front() + "')");
    if (command == "version" || command == "--version") {
      std::cout << "kvlab " << KVLAB_VERSION << (KVLAB_HAS_CUDA ? " (CUDA)" : " (host only)") << "\n";
      return 0;
    }
    if (command == "devices") return cmd_devices();
    if (command == "models") return cmd_models();
    if (command == "replay" || command == "compare" || command == "sweep" || command == "figure")
      install_interrupt_handlers();
    if (command == "replay" || command == "compare") return cmd_run(command, args, command_line(argc, argv));
    if (command == "sweep") return cmd_sweep(args, command_line(argc, argv));
    if (command == "collect") return cmd_collect(args);
    if (command == "calibrate") return cmd_calibrate(args);
    if (command == "figure") return cmd_figure(args, command_line(argc, argv));
    throw UsageError("unknown command '" + command + "' (try 'kvlab help')");
  } catch (const Interrupted& e) {  // SIGINT/SIGTERM/SIGHUP: stopped between steps, nothing half-written
    std::cerr << "kvlab " << one_line(command) << ": interrupted\n";
    return 128 + e.signal();
  } catch (const po::error_with_option_name& e) {
    print_error(command, "error", option_error_message(e));
    return 2;
  } catch (const po::error& e) {
    print_error(command, "error", e.what());
    return 2;
  } catch (const UsageError& e) {
    print_error(command, "error", e.what());
    return 2;
  } catch (const InvalidArgument& e) {  // bad names, bad values, malformed traces (file:line:field)
    print_error(command, "error", user_message(e));
    return 2;
  } catch (const std::bad_alloc&) {  // not a bare "std::bad_alloc": say what ran out and what to shrink
    print_error(command, "failed",
                "out of host memory (std::bad_alloc): the workload or the KV pool is larger than this machine can "
                "hold; reduce --requests, --capacity-gib, the output lengths or the trace (--limit)");
    return 1;
  } catch (const std::exception& e) {
    print_error(command, "failed", e.what());  // keeps the source location
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  read_test_seams();
  const int status = run_command(argc, argv);
  // What went to stdout counts as output too: lost (a full disk, a closed pipe) is a failure.
  if (!stdout_ok() && status == 0) {
    const std::string reason = std::strerror(errno);
    print_error(argc >= 2 ? argv[1] : "", "failed", "cannot write to stdout: " + reason);
    return 1;
  }
  return status;
}
