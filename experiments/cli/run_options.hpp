// The options replay and compare share (the workload, the model and capacity, the scheduler, the
// device and the outputs), their bounds and combinations checked before anything runs, and how
// they become a workload, a replay configuration and backend options. The command line's
// parsing lives here, apart from the commands, so it is tested and fuzzed alone
// (tests/fuzz/options_fuzz.cpp).
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "serving/replay/backend_factory.hpp"
#include "alloc/core/device.hpp"
#include "alloc/faults/fault_injection.hpp"
#include "serving/clock/device_model.hpp"
#include "serving/support/provenance.hpp"
#include "serving/replay/replayer.hpp"
#include "serving/replay/serving_metrics.hpp"
#include "serving/traces/workload.hpp"
#include "kernels/attention.hpp"

namespace kvlab::cli {

namespace po = boost::program_options;

/// Commands that take no positional arguments reject stray ones instead of ignoring them.
inline const po::positional_options_description kNoPositional;

/// `s` split at each `separator` (getline's rule: a trailing separator adds no empty item); empty
/// items kept or dropped.
[[nodiscard]] std::vector<std::string> split_on(const std::string& s, char separator, bool keep_empty);
/// A comma-separated list, empty items dropped.
[[nodiscard]] std::vector<std::string> split_list(const std::string& s);

/// An output directory named by OPTION: given, and not an existing non-directory. Creates nothing.
void check_output_dir_name(const std::string& dir, const std::string& option);

/// An option's value as the provenance records it (switches as true/false, a flag without a value
/// as "").
[[nodiscard]] std::string option_text(const boost::any& a);
/// Every option in `vm` and its value as given or defaulted, for the provenance every output records.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> resolved_options(const po::variables_map& vm);

/// Every registered backend family's form, for --backend's help (from the registry, so a new family
/// shows up without touching this file).
[[nodiscard]] std::string backend_usage();

/// `args` with the options a run.json (`--config FILE`) recorded, for each option of `opts` the
/// command line does not give: so `kvlab replay --config DIR/run.json` reruns that run with every
/// value it had, defaults included (a changed default cannot change the rerun), and any option
/// given beside --config wins. Without --config, `args` unchanged.
[[nodiscard]] std::vector<std::string> with_config(const po::options_description& opts,
                                                   const std::vector<std::string>& args, const std::string& command);

/// Options shared by replay and compare: the workload, the model and capacity, the scheduler.
struct RunOptions {
  std::vector<std::pair<std::string, std::string>> options;  ///< resolved, for the provenance
  bool rate_given = false;                                   ///< --rate on the command line (not its default)
  std::string trace, trace_dir, trace_format, prompt_len, output_len, model_name, device_model, out_dir;
  std::string long_policy, preemption, lengths_from, inject_faults, kernels, schedule, device_text, prefill_steps;
  DeviceSpec device;
  double lpm_max_wait = 5.0;
  std::string goodput_text;
  ServingSlo goodput;
  std::string percentiles_text = "90,99";
  std::vector<double> percentiles = kDefaultPercentiles;
  double capacity_gib = 0, rate = 0, burstiness = 1, time_scale = 1, max_memory_gib = 0;
  std::int64_t requests = 0, max_seq_len = 0, max_batched = 0, limit = 0, shared_prefix = 0;
  std::string tenants;                 ///< --tenants FILE (empty: one workload)
  std::string tenant_policy = "auto";  ///< --tenant-policy
  int tensor_parallel = 0;             ///< --tensor-parallel N (0: the device model's own)
  std::int64_t dump_plans = 0;         ///< --dump-plans N: the scheduler's plans of the first N steps (0: none)
  bool dump_plans_given = false;
  static constexpr std::int64_t kMaxDumpedPlans = 1'000'000;
  int max_running = 0, samples = 1, execute_layers = 0, prefix_groups = 0, turns = 1;
  double beam_reselect = 0;
  std::uint64_t seed = 0;
  std::string seed_text;
  bool chunked = false, execute = false, progress = true, verify_kv = false;
  /// Not an option: the test seam KVLAB_MAX_MAP_COUNT the kvlab binary reads at start (0: none).
  std::int64_t max_map_count = 0;

  void add(po::options_description& o);

  po::options_description workload_options();

  po::options_description scheduling_options();

  po::options_description output_options();

  void check(const po::variables_map& vm);

  /// Every numeric option within its documented bounds (docs/bad-inputs.md, group numbers).
  void check_numbers() const;

  /// Paths, named choices and the options that need others.
  void check_names(const po::variables_map& vm);

  /// Options that would be silently ignored in this combination are errors instead.
  void check_applicable(const po::variables_map& vm) const;

  /// --device combinations that would mean nothing.
  void check_device() const;

  /// --tensor-parallel N above 1: the modelled clock only, heads that split evenly, an interconnect.
  void check_tensor_parallel() const;

  /// --inject-faults nth:N | random:P[:SEED] as an armed injector.
  std::unique_ptr<FaultInjector> fault_plan() const;

  std::filesystem::path trace_directory() const;

  /// The workload and a one-line description of it.
  std::pair<std::vector<Request>, std::string> workload() const;

  ReplayConfig replay_config() const;

  BackendOptions backend_options(MemoryResource* memory, DeviceContext* ctx = nullptr) const;

  /// The run's device: host memory, a GPU, or the emulated device sized for the KV capacity plus
  /// headroom for per-batch arrays and kernel arguments.
  std::unique_ptr<DeviceContext> open_device() const;

  /// The provenance of this run's outputs: the options, the device as it describes itself and the
  /// attention kernels execute mode runs.
  Provenance provenance(const DeviceContext& d) const;

  /// The GPU attention --kernels resolves to (auto: FlashInfer's on a GPU where built).
  bool flashinfer_kernels() const;
  GpuKernel gpu_kernel() const;

  /// What execute mode's clock measures, for the header line (and summary.json's "clock": every
  /// result names the kernels that produced it).
  std::string clock_description(const DeviceModel& model) const;
};

/// replay's or compare's arguments, parsed (--config applied) and checked.
struct RunCommand {
  RunOptions options;
  std::vector<std::string> backends;  ///< replay: the one --backend; compare: --backends, split
  bool help = false;                  ///< --help was asked for: `help_text` is what to print
  std::string help_text;              ///< the options' table (the command adds its usage and examples)
};

/// One option of replay or compare, as --help lists it.
struct OptionInfo {
  std::string name;          ///< the long name, without "--"
  bool takes_value = false;  ///< false: a switch
  std::string default_text;  ///< the default as run.json records it ("" when none)
  std::string description;
};

/// replay's or compare's options, in --help's order (the Python package checks its keyword
/// arguments against these and documents them from here).
[[nodiscard]] std::vector<OptionInfo> run_command_options(std::string_view command);

/// Parses and checks `kvlab COMMAND ARGS` for COMMAND replay or compare. Bad input throws
/// UsageError, InvalidArgument or a boost::program_options error (each one line, exit 2); nothing
/// is read but a --config file, nothing is written.
[[nodiscard]] RunCommand parse_run_command(std::string_view command, const std::vector<std::string>& args);

}  // namespace kvlab::cli
