// kvlab: the command line. `kvlab help` lists the commands; each has --help with examples.
// Bad arguments print one line on stderr and exit with status 2.
#include <boost/program_options.hpp>

#include <cmath>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "alloc/contiguous_backend.hpp"
#include "alloc/cuda_runtime.hpp"
#include "alloc/error.hpp"
#include "alloc/model_geometry.hpp"
#include "experiments/backend_factory.hpp"
#include "experiments/cost_model.hpp"
#include "experiments/progress.hpp"
#include "experiments/replayer.hpp"
#include "experiments/report.hpp"
#include "experiments/workload.hpp"

namespace po = boost::program_options;
using namespace kvlab;

namespace {

/// An error in what the user typed: reported as one line, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string command_line(int argc, char** argv) {
  std::string s = "kvlab";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const bool quote = a.find_first_of(" \t'\"$") != std::string::npos || a.empty();
    s += " " + (quote ? "'" + a + "'" : a);
  }
  return s;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

const char* kUsage =
    "kvlab - a testbed for GPU memory management of LLM KV caches\n"
    "\n"
    "Usage: kvlab COMMAND [OPTIONS]\n"
    "\n"
    "Commands:\n"
    "  replay    replay a workload through one or more KV-cache backends; print the memory breakdown\n"
    "  devices   show the devices this binary can use (host always; CUDA when a driver and GPU exist)\n"
    "  models    list the model presets and their KV bytes per token\n"
    "  version   print the version\n"
    "\n"
    "Run 'kvlab COMMAND --help' for a command's options and examples.\n";

int cmd_devices() {
  std::cout << "host: " << std::thread::hardware_concurrency() << " hardware threads\n";
  const CudaStatus& c = cuda_status();
  std::cout << "cuda: " << (c.available ? "available - " : "unavailable - ") << c.message << "\n";
  if (c.compiled) std::cout << "      runtime " << c.runtime_version << " (static), driver " << c.driver_version << "\n";
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

int cmd_replay(const std::vector<std::string>& args, const std::string& invocation) {
  std::string backends, model_name, device_model, prompt_len, output_len, out_dir, long_policy;
  double capacity_gib = 0, rate = 0;
  std::int64_t requests = 0, max_seq_len = 0, max_prefill = 0;
  int max_running = 0;
  std::uint64_t seed = 0;
  po::options_description opts("kvlab replay options");
  opts.add_options()("help,h", "show this help")(
      "backend", po::value(&backends)->default_value("contiguous-max,contiguous-pow2,contiguous-oracle"),
      "comma-separated backends, replayed side by side on the same workload")(
      "model", po::value(&model_name)->default_value("opt-13b"), "model preset (see 'kvlab models')")(
      "capacity-gib", po::value(&capacity_gib)->default_value(12.0), "KV cache capacity in GiB")(
      "max-seq-len", po::value(&max_seq_len)->default_value(0), "longest sequence in tokens (0: the model's context)")(
      "requests", po::value(&requests)->default_value(200), "synthetic requests")(
      "rate", po::value(&rate)->default_value(2.0), "Poisson arrivals per second (0: all at once)")(
      "prompt-len", po::value(&prompt_len)->default_value("uniform:16:1024"),
      "prompt lengths: fixed:N, uniform:LO:HI or lognormal:MU:SIGMA[:MAX]")(
      "output-len", po::value(&output_len)->default_value("uniform:16:512"), "output lengths, same forms")(
      "seed", po::value(&seed)->default_value(0), "random seed of the workload")(
      "max-running", po::value(&max_running)->default_value(256), "most sequences in a batch")(
      "max-prefill-tokens", po::value(&max_prefill)->default_value(8192), "prompt tokens admitted per step")(
      "long-requests", po::value(&long_policy)->default_value("reject"),
      "requests longer than max-seq-len: reject or truncate")(
      "device-model", po::value(&device_model)->default_value("a100-80gb"),
      "roofline device of the modelled clock: a100-40gb, a100-80gb, h100-sxm, h200")(
      "out", po::value(&out_dir), "write summary.json, steps.csv and requests.csv per backend under this folder")(
      "no-progress", "no progress line on stderr");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(opts).run(), vm);
  if (vm.count("help")) {
    std::cout << "Usage: kvlab replay [OPTIONS]\n\n"
                 "Replays a seeded synthetic workload under continuous batching through each backend and prints\n"
                 "where the KV capacity went (token states, reserved, internal and external fragmentation, free).\n\n"
              << opts
              << "\nExamples:\n"
                 "  kvlab replay                                   # OPT-13B, 12 GiB, Orca max/pow2/oracle\n"
                 "  kvlab replay --backend contiguous-oracle --model llama-3-8b --capacity-gib 4\n"
                 "  kvlab replay --requests 1000 --rate 5 --prompt-len lognormal:6:1:2048 --out results/replay\n";
    return 0;
  }
  po::notify(vm);
  if (requests < 0) throw UsageError("--requests must not be negative (got " + std::to_string(requests) + ")");
  if (!(capacity_gib > 0) || !std::isfinite(capacity_gib))
    throw UsageError("--capacity-gib must be a positive number");
  if (max_running < 1) throw UsageError("--max-running must be at least 1");
  if (max_prefill < 1) throw UsageError("--max-prefill-tokens must be at least 1");
  if (max_seq_len < 0) throw UsageError("--max-seq-len must not be negative");
  if (long_policy != "reject" && long_policy != "truncate")
    throw UsageError("--long-requests must be reject or truncate (got '" + long_policy + "')");

  SyntheticWorkload w;
  w.num_requests = requests;
  w.rate = rate;
  w.prompt = LengthDistribution::parse(prompt_len, "--prompt-len");
  w.output = LengthDistribution::parse(output_len, "--output-len");
  w.seed = seed;
  const std::vector<Request> workload = generate(w);

  BackendOptions bo;
  bo.model = model_preset(model_name);
  bo.capacity_bytes = static_cast<std::size_t>(capacity_gib * (1ull << 30));
  bo.max_seq_len = max_seq_len;
  ReplayConfig rc;
  rc.max_running = max_running;
  rc.max_batched_tokens = max_prefill;
  rc.long_requests = long_policy == "truncate" ? LongRequestPolicy::truncate : LongRequestPolicy::reject;
  rc.device = device_model_preset(device_model);

  const std::vector<std::string> names = split_list(backends);
  if (names.empty()) throw UsageError("--backend names no backend");
  std::vector<std::unique_ptr<KvBackend>> made;
  for (const auto& n : names) made.push_back(make_backend(n, bo));  // fail before any long run

  std::cout << "workload: " << requests << " synthetic requests, rate " << rate << "/s, prompt "
            << w.prompt.describe() << ", output " << w.output.describe() << ", seed " << seed << "\n"
            << "model: " << bo.model.name << " (" << bo.model.kv_bytes_per_token() << " KV bytes/token), capacity "
            << capacity_gib << " GiB, clock modelled on " << rc.device.name << "\n\n";
  std::vector<ReplaySummary> rows;
  for (auto& backend : made) {
    Progress progress("replay " + backend->name(), vm.count("no-progress") == 0);
    const ReplayResult r = replay(*backend, workload, rc, [&](auto d, auto t) { progress.update(d, t); });
    rows.push_back(r.summary);
    if (!out_dir.empty()) {
      RunInfo info{invocation, bo.model.name,
                   "synthetic n=" + std::to_string(requests) + " rate=" + std::to_string(rate) + " prompt=" +
                       w.prompt.describe() + " output=" + w.output.describe() + " seed=" + std::to_string(seed),
                   "modelled", rc.device.name};
      write_replay_files(out_dir, info, r);
    }
  }
  print_summary_table(std::cout, rows);
  if (!out_dir.empty()) std::cout << "files written under " << out_dir << "/\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  const std::string command = argc >= 2 ? argv[1] : "";
  try {
    if (command.empty() || command == "help" || command == "--help" || command == "-h") {
      std::cout << kUsage;
      return command.empty() ? 2 : 0;
    }
    if (command == "version" || command == "--version") {
      std::cout << "kvlab " << KVLAB_VERSION << (KVLAB_HAS_CUDA ? " (CUDA)" : " (host only)") << "\n";
      return 0;
    }
    if (command == "devices") return cmd_devices();
    if (command == "models") return cmd_models();
    if (command == "replay") return cmd_replay(args, command_line(argc, argv));
    throw UsageError("unknown command '" + command + "' (try 'kvlab help')");
  } catch (const po::error& e) {
    std::cerr << "kvlab " << command << ": error: " << e.what() << "\n";
    return 2;
  } catch (const UsageError& e) {
    std::cerr << "kvlab " << command << ": error: " << e.what() << "\n";
    return 2;
  } catch (const InvalidArgument& e) {
    std::cerr << "kvlab " << command << ": error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "kvlab " << command << ": failed: " << e.what() << "\n";
    return 1;
  }
}
