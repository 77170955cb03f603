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

#include "alloc/cuda_runtime.hpp"
#include "alloc/error.hpp"
#include "alloc/faults/fault_injection.hpp"
#include "alloc/limiting_adaptor.hpp"
#include "alloc/model_geometry.hpp"
#include "experiments/backend_factory.hpp"
#include "experiments/calibrate.hpp"
#include "experiments/provenance.hpp"
#include "experiments/cost_model.hpp"
#include "experiments/figures.hpp"
#include "experiments/atomic_file.hpp"
#include "experiments/summary_json.hpp"
#include "experiments/progress.hpp"
#include "experiments/replayer.hpp"
#include "experiments/run_control.hpp"
#include "kernels/attention.hpp"
#include "kernels/simt/emulated_attention.hpp"
#include "experiments/report.hpp"
#include "experiments/sweep.hpp"
#include "experiments/shell.hpp"
#include "experiments/trace_reader.hpp"
#include "experiments/workload.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace kvlab;

namespace {

/// An error in what the user typed: reported as one line, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The command as the user could type it again (recorded in every output file).
std::string command_line(int argc, char** argv) {
  std::vector<std::string> words = {"kvlab"};
  words.insert(words.end(), argv + 1, argv + argc);
  return shell_join_one_line(words);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

/// A kvlab error as the user should read it: without the "kvlab error at SOURCE:LINE: " prefix,
/// which locates kvlab's code, not the user's input (the message itself names the input).
/// `text` with every control character written as an escape (\n, \t, \xHH): an error quoting
/// what the user typed or a trace held stays one line and puts no raw escape sequence on a terminal.
/// Bytes that are not UTF-8 (a trace's raw bytes) are escaped the same way, so the line is text.
std::string one_line(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u >= 0x80) {  // a UTF-8 sequence kept whole when it is one, else its first byte escaped
      const std::size_t n = u >= 0xf0 && u <= 0xf4 ? 4 : u >= 0xe0 ? 3 : u >= 0xc2 && u <= 0xdf ? 2 : 0;
      bool valid = n > 0 && i + n <= text.size();
      for (std::size_t k = 1; valid && k < n; ++k) valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
      if (valid && n == 3) {  // no overlong forms, no surrogates
        const auto b = static_cast<unsigned char>(text[i + 1]);
        valid = !(u == 0xe0 && b < 0xa0) && !(u == 0xed && b >= 0xa0);
      } else if (valid && n == 4) {
        const auto b = static_cast<unsigned char>(text[i + 1]);
        valid = !(u == 0xf0 && b < 0x90) && !(u == 0xf4 && b >= 0x90);
      }
      if (valid) {
        out.append(text.substr(i, n));
        i += n;
      } else {
        out += fmt::format("\\x{:02x}", u);
        ++i;
      }
      continue;
    }
    const char c = text[i++];
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out;
}

/// The one line a failed command prints: "kvlab COMMAND: error: ..." (what the user typed or
/// gave) or "kvlab COMMAND: failed: ..." (anything else, with its source location).
void print_error(std::string_view command, std::string_view kind, std::string_view message) {
  std::cerr << "kvlab " << one_line(command) << ": " << kind << ": " << one_line(message) << "\n";
}

std::string user_message(const std::exception& e) {
  std::string m = e.what();
  if (m.rfind("kvlab error at ", 0) == 0)
    if (const auto colon = m.find(": "); colon != std::string::npos) m.erase(0, colon + 2);
  return m;
}

/// An output directory named by OPTION: given, and not an existing non-directory. Creates nothing.
void check_output_dir_name(const std::string& dir, const std::string& option) {
  if (dir.empty()) throw UsageError(option + " names no directory");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) throw UsageError(option + " " + dir + ": is not a directory");
}

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
const po::positional_options_description kNoPositional;

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

/// Options shared by replay and compare: the workload, the model and capacity, the scheduler.
/// Every option in `vm` and its value as given or defaulted (switches as true/false), for the
/// provenance every output records.
/// An option's value as the provenance records it (switches as true/false, a flag without a value
/// as "").
std::string option_text(const boost::any& a) {
  if (const auto* s = boost::any_cast<std::string>(&a)) return *s;
  if (const auto* b = boost::any_cast<bool>(&a)) return *b ? "true" : "false";
  if (const auto* d = boost::any_cast<double>(&a)) return fmt::format("{}", *d);
  if (const auto* i = boost::any_cast<int>(&a)) return std::to_string(*i);
  if (const auto* l = boost::any_cast<std::int64_t>(&a)) return std::to_string(*l);
  if (const auto* u = boost::any_cast<std::uint64_t>(&a)) return std::to_string(*u);
  return a.empty() ? "" : "(set)";
}

std::vector<std::pair<std::string, std::string>> resolved_options(const po::variables_map& vm) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, v] : vm) out.emplace_back(name, option_text(v.value()));
  return out;
}

/// Every registered backend family's form, for --backend's help (from the registry, so a new family
/// shows up without touching this file).
std::string backend_usage() {
  std::string s;
  for (const BackendFamily& f : backend_families()) s += (s.empty() ? "" : "; ") + f.usage;
  return s + " (docs/backend-interface.md)";
}

struct Common {
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
  int max_running = 0, samples = 1, execute_layers = 0, prefix_groups = 0, turns = 1;
  double beam_reselect = 0;
  std::uint64_t seed = 0;
  std::string seed_text;
  bool chunked = false, execute = false, progress = true, verify_kv = false;

  void add(po::options_description& o) { o.add(workload_options()).add(scheduling_options()).add(output_options()); }

  po::options_description workload_options() {
    po::options_description w("Workload");
    w.add_options()("trace", po::value(&trace), "replay a trace file (a name in --trace-dir, or a path)")(
        "trace-dir", po::value(&trace_dir),
        "where trace names are looked up (default: $KVLAB_TRACE_DIR or ../shared/traces)")(
        "trace-format", po::value(&trace_format)->default_value("auto"),
        "auto, azure, vidur, mooncake, llmservingsim or kvlab")("limit", po::value(&limit)->default_value(0),
                                                                "use only the first N requests (0: all)")(
        "time-scale", po::value(&time_scale)->default_value(1.0), "multiply arrival times (0.5 = twice the load)")(
        "requests", po::value(&requests)->default_value(200), "synthetic: number of requests")(
        "rate", po::value(&rate)->default_value(2.0),
        "synthetic (or a length-only trace): arrivals per second (0: all at once)")(
        "burstiness", po::value(&burstiness)->default_value(1.0),
        "coefficient of variation of gamma gaps (1: Poisson)")(
        "prompt-len", po::value(&prompt_len)->default_value("uniform:16:1024"),
        "synthetic prompt lengths: fixed:N, uniform:LO:HI or lognormal:MU:SIGMA[:MAX]")(
        "output-len", po::value(&output_len)->default_value("uniform:16:512"), "synthetic output lengths, same forms")(
        "lengths-from", po::value(&lengths_from), "synthetic: resample (prompt, output) pairs from this trace")(
        "prefix-groups", po::value(&prefix_groups)->default_value(0), "synthetic: requests share G system prompts")(
        "shared-prefix", po::value(&shared_prefix)->default_value(0), "synthetic: tokens in each shared system prompt")(
        "turns", po::value(&turns)->default_value(1),
        "synthetic: multi-turn chats of N turns; each prompt holds the conversation so far")(
        "seed", po::value(&seed_text)->default_value("0"), "random seed of the workload (a non-negative integer)");
    return w;
  }

  po::options_description scheduling_options() {
    po::options_description m("Model, memory and scheduling");
    m.add_options()("model", po::value(&model_name)->default_value("opt-13b"), "model preset (see 'kvlab models')")(
        "capacity-gib", po::value(&capacity_gib)->default_value(12.0), "KV cache capacity in GiB")(
        "max-seq-len", po::value(&max_seq_len)->default_value(0),
        "longest sequence in tokens (0: the model's context; at most 16777216)")(
        "max-running", po::value(&max_running)->default_value(256), "most sequences in a batch")(
        "max-batched-tokens", po::value(&max_batched)->default_value(8192), "tokens computed per step")(
        "chunked-prefill", po::bool_switch(&chunked), "split long prompts to fit --max-batched-tokens")(
        "prefill-steps", po::value(&prefill_steps)->default_value("mixed"),
        "mixed (new prompts join the decode step, vLLM v1) or separate (a step runs the prompts it can admit "
        "or the decodes, never both: vLLM v0, the vLLM paper's system)")(
        "samples", po::value(&samples)->default_value(1), "parallel sampling: sequences per request (shared prompt)")(
        "beam-reselect", po::value(&beam_reselect)->default_value(0.0),
        "beam search with --samples N beams: after each decode step a beam continues, with this probability, "
        "from a fork of another beam (shares generated tokens too); 0: independent samples")(
        "preemption", po::value(&preemption)->default_value("recompute"), "recompute or swap")(
        "schedule", po::value(&schedule)->default_value("fcfs"),
        "admission order: fcfs, or lpm (longest prefix match first, SGLang's; needs prefix caching to matter)")(
        "lpm-max-wait", po::value(&lpm_max_wait)->default_value(5.0),
        "lpm fairness bound: a request waiting this many seconds goes ahead of all that have not")(
        "goodput", po::value(&goodput_text),
        "service-level objectives in ms, as vLLM's bench serve: ttft:MS,tpot:MS,e2el:MS (any of them); "
        "summary.json's serving and compare.csv then report goodput (requests meeting all, per second) and the "
        "share that meets them")(
        "percentiles", po::value(&percentiles_text)->default_value("90,99"),
        "the latency percentiles summary.json and compare.csv report beside mean, median and std (vLLM's "
        "--metric-percentiles): e.g. 50,90,99.9; each becomes columns NAME_pN_ms")(
        "long-requests", po::value(&long_policy)->default_value("reject"),
        "requests longer than max-seq-len: reject or truncate")(
        "device-model", po::value(&device_model)->default_value("a100-80gb"),
        "device of the modelled clock: a preset (a100-40gb, a100-80gb, h100-sxm, h200, host) or a device model "
        "file (kvlab calibrate --out FILE); see docs/clock.md")(
        "execute", po::bool_switch(&execute),
        "execute mode: run the attention kernels over real KV memory; the clock is their measured time")(
        "device", po::value(&device_text)->default_value("host"),
        "where KV memory lives and execute mode's kernels run: host, cuda[:N] (a GPU), or emulated (the CUDA code "
        "path on the host: the CUDA driver double and the SIMT emulator); needs --execute or --verify-kv unless host; "
        "see docs/devices.md")("execute-layers", po::value(&execute_layers)->default_value(0),
                               "execute mode: run N layers, scale to all (0: all)")(
        "kernels", po::value(&kernels)->default_value("auto"),
        "execute mode's attention: auto (FlashInfer's on a GPU where built, else kvlab's), kvlab (kvlab's host "
        "or CUDA kernels; 'native' is the same), flashinfer (FlashInfer's: its non-paged kernel over contiguous "
        "views, its paged one over paged views; --device cuda only), flashinfer-paged (FlashInfer's paged kernel "
        "for every view), or emulated (kvlab's CUDA kernels under the host SIMT emulator, --device host)")(
        "verify-kv", po::bool_switch(&verify_kv),
        "write a known pattern into every KV slot and read all resident KV back after every step (slow)")(
        "inject-faults", po::value(&inject_faults),
        "make device copies fail: nth:N (the N-th copy) or random:P[:SEED]; needs --execute or --verify-kv. "
        "teardown (--device emulated): every cuMemUnmap fails once a backend finished, as the H200's deallocations "
        "did; its results must stand, recorded with the fault");
    return m;
  }

  po::options_description output_options() {
    po::options_description out("Output");
    out.add_options()("out", po::value(&out_dir),
                      "write run.json, compare.csv and per backend summary.json, "
                      "steps.csv and requests.csv here (columns: docs/schema.md)")(
        "max-memory-gib", po::value(&max_memory_gib)->default_value(0.0),
        "refuse a run that would keep more than this in memory (per-request and per-step records, every token's "
        "inter-token gap; estimated from the workload before it starts); 0: half of this machine's memory")(
        "config", po::value<std::string>(),
        "FILE: a run.json or summary.json; rerun with every option it recorded "
        "(defaults included), options given beside it win")("no-progress", "no progress line on stderr");
    return out;
  }

  void check(const po::variables_map& vm) {
    options = resolved_options(vm);
    rate_given = vm.count("rate") != 0 && !vm["rate"].defaulted();
    progress = vm.count("no-progress") == 0;
    check_numbers();
    check_names(vm);
    check_applicable(vm);
  }

  /// Every numeric option within its documented bounds (docs/bad-inputs.md, group numbers).
  void check_numbers() const {
    if (requests < 0) throw UsageError("--requests must not be negative (got " + std::to_string(requests) + ")");
    // A synthetic workload is held whole (about 1.3 KB a request with its records): 10 M is ~13 GB.
    if (requests > 10'000'000)
      throw UsageError("--requests must be at most 10000000 (got " + std::to_string(requests) + ")");
    if (!(capacity_gib > 0) || !std::isfinite(capacity_gib))
      throw UsageError("--capacity-gib must be a positive number");
    if (!(max_memory_gib >= 0) || !std::isfinite(max_memory_gib))
      throw UsageError("--max-memory-gib must be a number >= 0 (0: half of this machine's memory)");
    if (max_running < 1) throw UsageError("--max-running must be at least 1");
    if (max_batched < 1) throw UsageError("--max-batched-tokens must be at least 1");
    if (max_seq_len < 0) throw UsageError("--max-seq-len must not be negative");
    // Larger than any model's context by far, and small enough that no backend's arithmetic on
    // it (reservations, slot sizes in bytes) can overflow.
    constexpr std::int64_t kMaxSeqLen = std::int64_t{1} << 24;
    if (max_seq_len > kMaxSeqLen)
      throw UsageError(fmt::format("--max-seq-len must be at most {} tokens (got {})", kMaxSeqLen, max_seq_len));
    if (samples < 1 || samples > max_running) throw UsageError("--samples must be between 1 and --max-running");
    if (!(beam_reselect >= 0 && beam_reselect <= 1))
      throw UsageError("--beam-reselect must be a probability in [0, 1]");
    if (beam_reselect > 0 && samples < 2) throw UsageError("--beam-reselect needs beams: --samples 2 or more");
    if (limit < 0) throw UsageError("--limit must not be negative");
    if (turns < 1) throw UsageError("--turns must be at least 1");
    if (prefix_groups < 0 || shared_prefix < 0)
      throw UsageError("--prefix-groups and --shared-prefix must not be negative");
    if (!(rate >= 0) || !std::isfinite(rate)) throw UsageError("--rate must be a number >= 0");
    // Bounds that keep every arrival time, gap and derived rate a finite, representable number
    // (--rate 4.9e-324 wrote inf arrival times; --burstiness 1e155 broke the gamma gaps).
    if (rate > 0 && !(rate >= 1e-6 && rate <= 1e9))
      throw UsageError(
          fmt::format("--rate must be 0 (all at once) or between 1e-06 and 1e+09 requests/s (got {})", rate));
    if (!(burstiness > 0)) throw UsageError("--burstiness must be positive");
    if (!(burstiness <= 1000))
      throw UsageError(
          fmt::format("--burstiness must be at most 1000 (the gaps' coefficient of variation; got {})", burstiness));
    if (!(time_scale > 0) || !std::isfinite(time_scale)) throw UsageError("--time-scale must be a positive number");
    if (!(time_scale >= 1e-6 && time_scale <= 1e6))
      throw UsageError(fmt::format("--time-scale must be between 1e-06 and 1e+06 (got {})", time_scale));
    if (!(capacity_gib <= 1e6)) throw UsageError("--capacity-gib must be at most 1e6 (a million GiB)");
  }

  /// Paths, named choices and the options that need others.
  void check_names(const po::variables_map& vm) {
    if (vm.count("trace") && trace.empty()) throw UsageError("--trace names no file");
    if (vm.count("lengths-from") && lengths_from.empty()) throw UsageError("--lengths-from names no file");
    if (vm.count("out")) check_output_dir_name(out_dir, "--out");
    if (trace.empty() && !vm["trace-format"].defaulted()) throw UsageError("--trace-format applies only with --trace");
    if (seed_text.find('-') != std::string::npos) throw UsageError("--seed must be a non-negative integer");
    if (execute_layers < 0) throw UsageError("--execute-layers must not be negative");
    try {
      std::size_t used = 0;
      seed = std::stoull(seed_text, &used);
      if (used != seed_text.size()) throw std::invalid_argument("trailing");
    } catch (const std::logic_error&) {
      throw UsageError("--seed must be a non-negative integer (got '" + seed_text + "')");
    }
    if (execute_layers > model_preset(model_name).num_layers)
      throw UsageError("--execute-layers " + std::to_string(execute_layers) + " exceeds the model's " +
                       std::to_string(model_preset(model_name).num_layers) + " layers");
    if (long_policy != "reject" && long_policy != "truncate")
      throw UsageError("--long-requests must be reject or truncate (got '" + long_policy + "')");
    if (kernels != "auto" && kernels != "kvlab" && kernels != "native" && !flashinfer_kernels() &&
        kernels != "emulated")
      throw UsageError("--kernels must be auto, kvlab, flashinfer, flashinfer-paged or emulated (got '" + kernels +
                       "')");
    device = parse_device_spec(device_text);  // InvalidArgument naming the value: exit 2
    if (!inject_faults.empty() && !execute && !verify_kv)
      throw UsageError("--inject-faults needs KV storage: add --execute or --verify-kv");
    if (inject_faults == "teardown" && device.kind != Device::emulated)
      throw UsageError("--inject-faults teardown needs --device emulated (the driver double refuses the frees)");
    if (!inject_faults.empty() && inject_faults != "teardown") (void)fault_plan();  // validate now
    if (preemption != "recompute" && preemption != "swap")
      throw UsageError("--preemption must be recompute or swap (got '" + preemption + "')");
    if (prefill_steps != "mixed" && prefill_steps != "separate")
      throw UsageError("--prefill-steps must be mixed or separate (got '" + prefill_steps + "')");
    if (prefill_steps == "separate" && chunked)
      throw UsageError("--prefill-steps separate runs whole prompts: it cannot be combined with --chunked-prefill");
    if (schedule != "fcfs" && schedule != "lpm")
      throw UsageError("--schedule must be fcfs or lpm (got '" + schedule + "')");
    if (!(lpm_max_wait >= 0) || !std::isfinite(lpm_max_wait))
      throw UsageError("--lpm-max-wait must be a number of seconds >= 0");
    try {
      if (vm.count("goodput")) goodput = parse_goodput(goodput_text);
      percentiles = parse_percentiles(percentiles_text);
    } catch (const InvalidArgument& e) {
      throw UsageError(user_message(e));
    }
  }

  /// Options that would be silently ignored in this combination are errors instead.
  void check_applicable(const po::variables_map& vm) const {
    const auto given = [&](const char* name) { return vm.count(name) != 0 && !vm[name].defaulted(); };
    if (schedule != "lpm" && given("lpm-max-wait")) throw UsageError("--lpm-max-wait applies only with --schedule lpm");
    if (!execute)
      for (const char* option : {"kernels", "execute-layers"})
        if (given(option)) throw UsageError(fmt::format("--{} applies only with --execute", option));
    check_device();
    if (!trace.empty())
      for (const char* option :
           {"requests", "prompt-len", "output-len", "lengths-from", "prefix-groups", "shared-prefix", "turns"})
        if (given(option))
          throw UsageError(fmt::format("--{} describes a synthetic workload; it does not apply with --trace", option));
  }

  /// --device combinations that would mean nothing.
  void check_device() const {
    if (execute && flashinfer_kernels() && !flashinfer_built())
      throw UsageError("--kernels " + kernels +
                       ": this binary was built without FlashInfer (scripts/fetch_flashinfer.sh, "
                       "then rebuild with nvcc)");
    if (execute && flashinfer_kernels() && device.kind != Device::cuda)
      throw UsageError("--kernels " + kernels + " runs FlashInfer's CUDA kernels on a GPU: it needs --device cuda");
    if (device.kind == Device::host) return;
    if (!execute && !verify_kv)
      throw UsageError("--device " + device_text +
                       " needs KV storage: add --execute or --verify-kv (memory mode keeps "
                       "no KV bytes, on any device)");
    if (execute && kernels == "emulated")
      throw UsageError(
          "--kernels emulated runs the CUDA kernels on host memory: it applies only with --device host "
          "(--device emulated runs them on the emulated device)");
  }

  /// --inject-faults nth:N | random:P[:SEED] as an armed injector.
  std::unique_ptr<FaultInjector> fault_plan() const {
    auto f = std::make_unique<FaultInjector>();
    const auto parts = split_args_colon(inject_faults);
    try {
      if (parts.size() == 2 && parts[0] == "nth") {
        const long long n = std::stoll(parts[1]);
        if (n < 1) throw std::invalid_argument("n");
        f->fail_nth(static_cast<std::uint64_t>(n));
        return f;
      }
      if ((parts.size() == 2 || parts.size() == 3) && parts[0] == "random") {
        const double p = std::stod(parts[1]);
        if (!(p >= 0 && p <= 1)) throw std::invalid_argument("p");
        f->fail_randomly(p, parts.size() == 3 ? std::stoull(parts[2]) : 0);
        return f;
      }
    } catch (const std::logic_error&) {
    }
    throw UsageError("--inject-faults '" + inject_faults +
                     "': expected nth:N (N >= 1) or random:P[:SEED] (0 <= P <= 1)");
  }
  static std::vector<std::string> split_args_colon(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ':');) out.push_back(item);
    return out;
  }

  fs::path trace_directory() const { return trace_dir.empty() ? default_trace_dir() : fs::path(trace_dir); }

  /// The workload and a one-line description of it.
  std::pair<std::vector<Request>, std::string> workload() const {
    if (!trace.empty()) {
      TraceOptions t;
      t.format = parse_trace_format(trace_format);
      t.max_requests = limit;
      t.time_scale = time_scale;
      t.seed = seed;
      const fs::path file = resolve_trace(trace, trace_directory());
      Trace tr = read_trace(file, t);
      if (tr.info.has_timestamps && rate_given)  // it would be ignored: say so instead
        throw UsageError("--rate: " + file.filename().string() +
                         " carries its own arrival times; --time-scale changes its load (0.5 = twice the rate)");
      if (!tr.info.has_timestamps && rate > 0) {  // length-only trace: arrivals from a Poisson process
        t.poisson_rate = rate;
        tr = read_trace(file, t);
      }
      return {std::move(tr.requests), tr.info.describe()};
    }
    SyntheticWorkload w;
    w.num_requests = limit > 0 ? std::min(limit, requests) : requests;
    w.rate = rate / time_scale;
    w.burstiness = burstiness;
    w.prompt = LengthDistribution::parse(prompt_len, "--prompt-len");
    w.output = LengthDistribution::parse(output_len, "--output-len");
    w.prefix_groups = prefix_groups;
    w.shared_prefix_tokens = shared_prefix;
    w.turns = turns;
    w.seed = seed;
    std::string lengths = "prompt " + w.prompt.describe() + ", output " + w.output.describe();
    if (!lengths_from.empty()) {
      const Trace tr = read_trace(resolve_trace(lengths_from, trace_directory()));
      for (const Request& r : tr.requests) w.resample.emplace_back(r.prompt_tokens, r.output_tokens);
      lengths = "lengths resampled from " + lengths_from;
    }
    std::ostringstream d;
    d << "synthetic: " << w.num_requests << " requests, rate " << w.rate << "/s (cv " << burstiness << "), " << lengths
      << ", seed " << seed;
    if (prefix_groups > 0) d << ", " << prefix_groups << " shared prefixes of " << shared_prefix << " tokens";
    if (turns > 1) d << ", " << turns << "-turn conversations";
    return {generate(w), d.str()};
  }

  ReplayConfig replay_config() const {
    ReplayConfig rc;
    rc.max_running = max_running;
    rc.max_batched_tokens = max_batched;
    rc.chunked_prefill = chunked;
    rc.prefill_steps = prefill_steps == "separate" ? PrefillSteps::separate : PrefillSteps::mixed;
    rc.samples_per_request = samples;
    rc.beam_reselect_probability = beam_reselect;
    rc.preemption = preemption == "swap" ? PreemptionMode::swap : PreemptionMode::recompute;
    rc.schedule.policy = parse_schedule_policy(schedule);
    rc.schedule.max_wait_s = lpm_max_wait;
    rc.goodput = goodput;
    rc.percentiles = percentiles;
    rc.long_requests = long_policy == "truncate" ? LongRequestPolicy::truncate : LongRequestPolicy::reject;
    rc.device = resolve_device_model(device_model);
    rc.execute = execute;
    rc.execute_layers = execute_layers;
    rc.verify_kv = verify_kv;
    if (kernels == "emulated") {  // the CUDA kernels under the SIMT emulator: the CLI's backends are on the host
      rc.attention = [](const AttentionParams& p, const KvView& kv) {
        emulated_attention(p, kv, /*num_partitions=*/2);
      };
    } else if (kernels == "kvlab" || kernels == "native") {  // the default (auto) is the replayer's own
      rc.attention = [device = device.kind](const AttentionParams& p, const KvView& kv) {
        attention(device, p, kv, GpuKernel::kvlab);
      };
    } else if (flashinfer_kernels()) {
      rc.attention = [k = gpu_kernel()](const AttentionParams& p, const KvView& kv) {
        attention(Device::cuda, p, kv, k);
      };
    }
    rc.seed = seed;
    return rc;
  }

  BackendOptions backend_options(MemoryResource* memory, DeviceContext* ctx = nullptr) const {
    BackendOptions bo;
    bo.device = ctx;
    bo.model = model_preset(model_name);
    bo.capacity_bytes = static_cast<std::size_t>(capacity_gib * static_cast<double>(1ull << 30));
    bo.max_seq_len = max_seq_len;
    bo.memory = memory;
    return bo;
  }

  /// The run's device: host memory, a GPU, or the emulated device sized for the KV capacity plus
  /// headroom for per-batch arrays and kernel arguments.
  std::unique_ptr<DeviceContext> open_device() const {
    const std::size_t capacity = static_cast<std::size_t>(capacity_gib * static_cast<double>(1ull << 30));
    return std::make_unique<DeviceContext>(device, capacity + (std::size_t{1} << 30));
  }

  /// The provenance of this run's outputs: the options, the device as it describes itself and the
  /// attention kernels execute mode runs.
  Provenance provenance(const DeviceContext& d) const {
    Provenance p = current_provenance(options);
    p.device = d.describe();
    if (execute) p.kernels = device.kind == Device::host ? "kvlab host attention" : to_string(gpu_kernel());
    return p;
  }

  /// The GPU attention --kernels resolves to (auto: FlashInfer's on a GPU where built).
  bool flashinfer_kernels() const { return kernels == "flashinfer" || kernels == "flashinfer-paged"; }
  GpuKernel gpu_kernel() const {
    if (kernels == "flashinfer") return GpuKernel::flashinfer;
    if (kernels == "flashinfer-paged") return GpuKernel::flashinfer_paged;
    if (kernels == "auto") return resolve(GpuKernel::automatic, device.kind);
    return GpuKernel::kvlab;
  }

  /// What execute mode's clock measures, for the header line (and summary.json's "clock": every
  /// result names the kernels that produced it).
  std::string clock_description(const DeviceModel& model) const {
    if (!execute) return "modelled on " + model.name;
    if (device.kind == Device::cuda) switch (gpu_kernel()) {
        case GpuKernel::flashinfer:
          return "measured (FlashInfer attention kernels: ragged over contiguous views where they fit, paged "
                 "otherwise; "
                 "CUDA events)";
        case GpuKernel::flashinfer_paged:
          return "measured (FlashInfer's paged attention kernel for every view, CUDA events)";
        default:
          return "measured (kvlab CUDA attention kernels, CUDA events)";
      }
    if (device.kind == Device::emulated) return "measured (CUDA attention kernels under the SIMT emulator)";
    return kernels == "emulated" ? "measured (CUDA attention kernels under the SIMT emulator, host memory)"
                                 : "measured (host attention kernels)";
  }
};

/// compare.csv, the chart, and last the completion marker naming every file of the run.
void finish_output_dir(const fs::path& dir, const std::string& invocation, const std::string& description,
                       const std::vector<ReplaySummary>& rows, bool chart, const Provenance& provenance) {
  throw_if_interrupted();
  write_file_atomically(dir / "run.json", run_json(invocation, provenance));
  write_compare_csv(dir / "compare.csv", description, rows);
  std::cout << "files written under " << dir.string() << "/\n";
  // The chart is of this compare.csv or there is none: an older run's never stands beside new data.
  if (!chart) fs::remove(dir / "compare.png");
  std::vector<std::string> files = {"run.json", "compare.csv"};
  for (const ReplaySummary& s : rows)
    for (const char* f : {"steps.csv", "requests.csv", "summary.json"}) files.push_back(s.backend + "/" + f);
  if (chart) {
    std::string error;
    switch (plot_compare(dir, &error)) {
      case PlotOutcome::drawn:
        std::cout << "chart: " << (dir / "compare.png").string() << "\n";
        files.push_back("compare.png");
        break;
      case PlotOutcome::no_python:
        fs::remove(dir / "compare.png");
        std::cout << "no chart: python3 with matplotlib not found (scripts/setup.sh installs it)\n";
        break;
      case PlotOutcome::no_script:
        fs::remove(dir / "compare.png");
        std::cout << "no chart: scripts/plot.py not found beside kvlab or in its source tree (set KVLAB_PLOT_SCRIPT)\n";
        break;
      case PlotOutcome::failed:  // the run is not complete: no marker, exit 1 (a signal says so instead)
        throw_if_interrupted();
        throw Error("drawing " + (dir / "compare.png").string() + " failed (scripts/plot.py compare): " + error);
    }
  }
  throw_if_interrupted();
  write_completion_marker(dir, invocation, files);
}

/// Replays the workload through one backend on the run's device, with the faults armed (copies,
/// and on the emulated device driver calls too); prints the fault and integrity line. Afterwards the
/// emulated device must hold nothing and have seen no contract violation.
ReplayResult replay_one(const Common& c, const std::string& name, DeviceContext& device,
                        const std::vector<Request>& workload, const ReplayConfig& rc) {
  const bool storage = c.execute || c.verify_kv;
  auto backend = make_backend(name, c.backend_options(storage ? &device.memory() : nullptr, &device));
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
    std::cout << r.summary.backend << ": " << (faults ? std::to_string(faults->injected()) + " faults injected, " : "")
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
    std::cerr << "kvlab: " << r.summary.device_fault << "\n";
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

int run_backends(const Common& c, const std::vector<std::string>& names, const std::string& invocation, bool chart) {
  if (names.empty()) throw UsageError("no backend named");
  const ModelGeometry model = model_preset(c.model_name);
  // Execute mode needs real KV bytes: the device's memory (host memory by default), one backend at
  // a time. The device is opened first: without the GPU asked for, nothing else runs.
  const std::unique_ptr<DeviceContext> device = c.open_device();
  const BackendOptions probe = c.backend_options(nullptr, device.get());
  std::vector<std::pair<std::string, std::string>> canonical;  // (canonical name, as given)
  for (const auto& n : names) {  // fail on a bad name, or a preemption it cannot do, before any long run
    const auto b = make_backend(n, probe);
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
  }
  auto [workload, description] = c.workload();
  ReplayConfig rc = c.replay_config();
  rc.at_step_boundary = throw_if_interrupted;         // SIGINT/SIGTERM stop the replay between steps
  rc.keep_steps = !c.out_dir.empty();                 // memory mode keeps only what it writes (steps.csv)
  check_kept_memory(workload, rc, c.max_memory_gib);  // before --out is touched
  std::optional<OutputLock> lock;                     // one run per --out at a time (experiments/run_control.hpp)
  if (!c.out_dir.empty()) {
    prepare_output_dir(c.out_dir, "--out");  // fail now, not after the replays
    lock.emplace(c.out_dir, invocation);
    remove_completion_marker(c.out_dir);  // an interrupted re-run must not look complete
  }
  if (c.device.kind != Device::host) rc.device_memory = &device->memory();  // the kernels' q, out, offsets
  std::cout << "workload: " << description << "\n"
            << "model: " << model.name << " (" << model.kv_bytes_per_token() << " KV bytes/token), capacity "
            << c.capacity_gib << " GiB, clock " << c.clock_description(rc.device) << "\n";
  if (c.device.kind != Device::host) std::cout << "device: " << device->describe() << "\n";
  std::cout << "\n";
  std::vector<ReplaySummary> rows;
  bool corrupted = false;
  std::vector<std::string> faults;
  for (const auto& name : names) {
    const ReplayResult r = replay_one(c, name, *device, workload, rc);
    warn_about_rejections(std::cerr, r);
    if (c.verify_kv && r.summary.kv_mismatches > 0) corrupted = true;
    if (!r.summary.device_fault.empty()) faults.push_back(r.summary.device_fault);
    rows.push_back(r.summary);
    if (!c.out_dir.empty())
      write_replay_files(c.out_dir,
                         RunInfo{invocation, model.name, description, r.summary.clock, rc.device.name, c.device.name(),
                                 c.provenance(*device)},
                         r);
  }
  print_summary_table(std::cout, rows);
  if (corrupted) {
    std::cerr << "kvlab: KV integrity check failed: some KV did not read back as written\n";
    return 1;
  }
  if (!c.out_dir.empty()) finish_output_dir(c.out_dir, invocation, description, rows, chart, c.provenance(*device));
  if (!faults.empty()) {
    std::cerr << "kvlab: " << faults.size() << " of " << names.size()
              << " backend(s) left the device unclean (recorded as device_fault in their summary.json); first: "
              << faults.front() << "\n";
    return 1;
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

/// `args` with the options a run.json (`--config FILE`) recorded, for each option of `opts` the
/// command line does not give: so `kvlab replay --config DIR/run.json` reruns that run with every
/// value it had, defaults included (a changed default cannot change the rerun), and any option
/// given beside --config wins. Without --config, `args` unchanged.
std::vector<std::string> with_config(const po::options_description& opts, const std::vector<std::string>& args,
                                     const std::string& command) {
  po::variables_map given;
  po::store(po::command_line_parser(args).options(opts).positional(kNoPositional).run(), given);
  if (given.count("config") == 0 || given.count("help")) return args;
  const std::string file = given["config"].as<std::string>();
  std::vector<std::pair<std::string, std::string>> recorded;
  try {
    recorded = recorded_options(file);
  } catch (const InvalidArgument& e) {
    throw UsageError("--config " + user_message(e));
  }
  std::vector<std::string> out = args;
  for (const auto& [name, value] : recorded) {
    if (name == "config" || name == "help" || (given.count(name) && !given[name].defaulted())) continue;
    // A compare's file for one replay: its --backends give way to the --backend named beside it.
    if (command == "replay" && name == "backends") {
      if (given.count("backend") && !given["backend"].defaulted()) continue;
      throw UsageError(
          fmt::format("--config {}: it records a compare of --backends {}; name the one to replay "
                      "with --backend",
                      file, value));
    }
    const po::option_description* o = opts.find_nothrow(name, /*approx=*/false);
    if (o == nullptr)
      throw UsageError(
          fmt::format("--config {}: it records --{}, which kvlab {} does not take (a run of another "
                      "command: rerun it with that command)",
                      file, name, command));
    // A recorded value equal to today's default is left to the default (an option given counts as
    // given: some are refused without others); one that differs is passed, so a changed default
    // does not change the rerun.
    if (boost::any d; o->semantic()->apply_default(d) && option_text(d) == value) continue;
    if (o->semantic()->max_tokens() == 0) {  // a switch: present, or "true" for a bool_switch
      if (value.empty() || value == "true") out.push_back("--" + name);
    } else {
      out.push_back("--" + name);
      out.push_back(value);
    }
  }
  return out;
}

int cmd_replay(const std::vector<std::string>& given_args, const std::string& invocation) {
  Common c;
  std::string backend;
  po::options_description opts("kvlab replay options");
  const std::string families = backend_usage();
  opts.add_options()("help,h", "show this help")("backend", po::value(&backend)->default_value("paged-16"),
                                                 families.c_str());
  c.add(opts);
  const std::vector<std::string> args = with_config(opts, given_args, "replay");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(opts).positional(kNoPositional).run(), vm);
  if (vm.count("help")) {
    std::cout << "Usage: kvlab replay [OPTIONS]\n\n"
                 "Replays a workload under continuous batching through one KV-cache backend and prints where the\n"
                 "KV capacity went (token states, reserved, internal and external fragmentation, free), batch\n"
                 "sizes, throughput and latency.\n\n"
              << opts << kReplayExamples;
    return 0;
  }
  po::notify(vm);
  c.check(vm);
  return run_backends(c, {backend}, invocation, false);
}

int cmd_compare(const std::vector<std::string>& given_args, const std::string& invocation) {
  Common c;
  std::string backends;
  po::options_description opts("kvlab compare options");
  opts.add_options()("help,h", "show this help")(
      "backends", po::value(&backends)->default_value(default_compare_backends()),
      "comma-separated backends, replayed side by side on the same workload");
  c.add(opts);
  const std::vector<std::string> args = with_config(opts, given_args, "compare");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(opts).positional(kNoPositional).run(), vm);
  if (vm.count("help")) {
    std::cout << "Usage: kvlab compare [OPTIONS]\n\n"
                 "Replays one workload through several backends (by default the three contiguous reservation\n"
                 "policies, paged at several block sizes and vmm at several page sizes), prints a side-by-side\n"
                 "table and, with --out, writes compare.csv and a PNG chart of the memory breakdown and\n"
                 "throughput.\n\n"
              << opts
              << "\nExamples:\n"
                 "  kvlab compare --trace AzureLLMInferenceTrace_conv.csv --model llama-3-8b --capacity-gib 8 \\\n"
                 "      --time-scale 0.5 --out results/compare-azure-conv   # the main job (scripts/run.sh)\n"
                 "  kvlab compare --backends contiguous-max,paged-16 --requests 500 --rate 4\n"
                 "  kvlab compare --model llama-3-8b --capacity-gib 8 --samples 4 --out /tmp/sampling\n";
    return 0;
  }
  po::notify(vm);
  c.check(vm);
  return run_backends(c, split_list(backends), invocation, true);
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
                   "experiments/sweep.hpp and docs/experiments.md.\n\n"
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
std::vector<const Figure*> device_figures(const std::string& name, const DeviceSpec& device) {
  std::vector<const Figure*> todo;
  for (const Figure& f : figures())
    if ((name == "all" || f.name == name) && (f.on_device || device.kind == Device::host)) todo.push_back(&f);
  if (todo.empty()) {
    const Figure& f = find_figure(name);  // unknown names fail here
    std::string measured;
    for (const Figure& g : figures())
      if (g.on_device) measured += (measured.empty() ? "" : ", ") + g.name;
    throw UsageError(
        fmt::format("figure {} is modelled on the host (its clock is a device model): --device {} "
                    "applies to the measured figures ({})",
                    f.name, device.name(), measured));
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
  std::string name, out, trace_dir, device_text = "host", formats = "png";
  bool full = false;
  po::options_description opts("kvlab figure options");
  opts.add_options()("help,h", "show this help")("name", po::value(&name), "the figure (also positional), or all")(
      "full", po::bool_switch(&full), "paper scale (default: smoke scale, seconds)")(
      "device", po::value(&device_text)->default_value("host"),
      "host, cuda[:N] or emulated: where the measured figures (kernel-overhead, page-size, overlap) run")(
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
    std::cout << "Usage: kvlab figure NAME|all [--full] [--out DIR]\n\nFigures:\n";
    for (const Figure& f : figures()) std::printf("  %-18s %s\n", f.name.c_str(), f.title.c_str());
    std::cout
        << "\n"
        << opts
        << "\nExamples:\n"
           "  kvlab figure memory-breakdown            # smoke scale into results/memory-breakdown/\n"
           "  kvlab figure block-size --full           # paper scale\n"
           "  kvlab figure all --out /tmp/figs\n"
           "  kvlab figure request-rate --format png,pdf   # a PDF beside the PNG for a paper\n"
           "  kvlab figure kernel-overhead --device cuda    # on GPU 0, into results/gpu/cuda-device-0-<GPU name>/\n";
    return vm.count("help") ? 0 : 2;
  }
  po::notify(vm);
  check_plot_formats(formats);
  const DeviceSpec device = parse_device_spec(device_text);
  const std::vector<const Figure*> todo = device_figures(name, device);
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
  // (experiments/run_control.hpp), exactly as replay and compare --out.
  std::vector<std::unique_ptr<OutputLock>> locks;
  for (const Figure* f : todo) locks.push_back(std::make_unique<OutputLock>(fs::path(out) / f->name, invocation));
  for (const Figure* f : todo) remove_completion_marker(fs::path(out) / f->name);
  int faults = 0;
  for (const Figure* f : todo) {
    FigureContext ctx;
    ctx.full = full;
    ctx.out = fs::path(out) / f->name;
    ctx.trace_dir = trace_dir.empty() ? default_trace_dir() : fs::path(trace_dir);
    ctx.command = name == "all" ? "kvlab figure " + f->name + (full ? " --full" : "") +
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
           "  kvlab calibrate --device host --out experiments/devices/host.txt --name host\n"
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
    if (command == "replay") return cmd_replay(args, command_line(argc, argv));
    if (command == "compare") return cmd_compare(args, command_line(argc, argv));
    if (command == "sweep") return cmd_sweep(args, command_line(argc, argv));
    if (command == "collect") return cmd_collect(args);
    if (command == "calibrate") return cmd_calibrate(args);
    if (command == "figure") return cmd_figure(args, command_line(argc, argv));
    throw UsageError("unknown command '" + command + "' (try 'kvlab help')");
  } catch (const Interrupted& e) {  // SIGINT/SIGTERM/SIGHUP: stopped between steps, nothing half-written
    std::cerr << "kvlab " << one_line(command) << ": interrupted\n";
    return 128 + e.signal();
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
  const int status = run_command(argc, argv);
  // What went to stdout counts as output too: lost (a full disk, a closed pipe) is a failure.
  if (!stdout_ok() && status == 0) {
    const std::string reason = std::strerror(errno);
    print_error(argc >= 2 ? argv[1] : "", "failed", "cannot write to stdout: " + reason);
    return 1;
  }
  return status;
}
