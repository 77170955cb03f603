#include "experiments/cli/run_options.hpp"

#include <fmt/format.h>

#include <cmath>
#include <sstream>

#include "alloc/core/error.hpp"
#include "alloc/core/model_geometry.hpp"
#include "serving/replay/backend_factory.hpp"
#include "experiments/cli/messages.hpp"
#include "serving/replay/schedule_policy.hpp"
#include "serving/report/summary_json.hpp"
#include "serving/traces/trace_reader.hpp"
#include "kernels/simt/emulated_attention.hpp"

namespace kvlab::cli {

namespace fs = std::filesystem;

std::vector<std::string> split_on(const std::string& s, char separator, bool keep_empty) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, separator);)
    if (keep_empty || !item.empty()) out.push_back(item);
  return out;
}

std::vector<std::string> split_list(const std::string& s) { return split_on(s, ',', false); }

void check_output_dir_name(const std::string& dir, const std::string& option) {
  if (dir.empty()) throw UsageError(option + " names no directory");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) throw UsageError(option + " " + dir + ": is not a directory");
}

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

std::string backend_usage() {
  std::string s;
  for (const BackendFamily& f : backend_families()) s += (s.empty() ? "" : "; ") + f.usage;
  return s + " (docs/backend-interface.md)";
}

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

void RunOptions::add(po::options_description& o) {
  o.add(workload_options()).add(scheduling_options()).add(output_options());
}

po::options_description RunOptions::workload_options() {
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
      "burstiness", po::value(&burstiness)->default_value(1.0), "coefficient of variation of gamma gaps (1: Poisson)")(
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

po::options_description RunOptions::scheduling_options() {
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
      "tensor-parallel", po::value(&tensor_parallel)->default_value(0),
      "the model split over N GPUs of the device model by tensor parallelism (the modelled clock: weights and KV "
      "work divided, two NVLink all-reduces per layer; docs/clock.md); --capacity-gib is the KV of all N; 0: the "
      "device model's own (1 in the presets)")(
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

po::options_description RunOptions::output_options() {
  po::options_description out("Output");
  out.add_options()("out", po::value(&out_dir),
                    "write run.json, compare.csv and per backend summary.json, "
                    "steps.csv and requests.csv here (columns: docs/schema.md)")(
      "dump-plans", po::value(&dump_plans)->value_name("N"),
      "show the scheduler's plan of each of the first N steps: what each request prefills or decodes and which "
      "are admitted, preempted, swapped or rejected (printed; with --out, written to BACKEND/plans.txt)")(
      "max-memory-gib", po::value(&max_memory_gib)->default_value(0.0),
      "refuse a run that would keep more than this in memory (per-request and per-step records, every token's "
      "inter-token gap; estimated from the workload before it starts); 0: half of this machine's memory")(
      "tenants", po::value(&tenants)->value_name("FILE"),
      "several tenants sharing the KV capacity, one per line of FILE (docs/elastic.md, \"Tenants\"): each "
      "its own model and workload; per tenant results under OUT/TENANT/BACKEND/ and tenants.csv")(
      "tenant-policy", po::value(&tenant_policy)->default_value("auto"),
      "with --tenants: static (each tenant a fixed share), elastic (one pool, first come; elastic-B backends), "
      "fair-share (the pool, and a tenant below its share that waits for memory holds back the admissions of "
      "those at or above theirs), or auto (elastic for backends that can share memory, static for the others)")(
      "config", po::value<std::string>(),
      "FILE: a run.json or summary.json; rerun with every option it recorded "
      "(defaults included), options given beside it win")("no-progress", "no progress line on stderr");
  return out;
}

void RunOptions::check(const po::variables_map& vm) {
  options = resolved_options(vm);
  rate_given = vm.count("rate") != 0 && !vm["rate"].defaulted();
  progress = vm.count("no-progress") == 0;
  dump_plans_given = vm.count("dump-plans") != 0;
  check_numbers();
  check_names(vm);
  check_applicable(vm);
}

void RunOptions::check_numbers() const {
  if (requests < 0) throw UsageError("--requests must not be negative (got " + std::to_string(requests) + ")");
  // A synthetic workload is held whole (about 1.3 KB a request with its records): 10 M is ~13 GB.
  if (requests > 10'000'000)
    throw UsageError("--requests must be at most 10000000 (got " + std::to_string(requests) + ")");
  if (!(capacity_gib > 0) || !std::isfinite(capacity_gib)) throw UsageError("--capacity-gib must be a positive number");
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
  if (!(beam_reselect >= 0 && beam_reselect <= 1)) throw UsageError("--beam-reselect must be a probability in [0, 1]");
  if (beam_reselect > 0 && samples < 2) throw UsageError("--beam-reselect needs beams: --samples 2 or more");
  if (limit < 0) throw UsageError("--limit must not be negative");
  if (tensor_parallel < 0 || tensor_parallel > 64)
    throw UsageError(
        fmt::format("--tensor-parallel must be 0 (the device model's) or 1..64 GPUs (got {})", tensor_parallel));
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
  // The plans are kept in memory until the backend's replay ends: a million steps is about 100 MB.
  if (dump_plans_given && (dump_plans < 1 || dump_plans > kMaxDumpedPlans))
    throw UsageError(fmt::format("--dump-plans must be between 1 and {} steps (got {})", kMaxDumpedPlans, dump_plans));
}

void RunOptions::check_names(const po::variables_map& vm) {
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
  if (kernels != "auto" && kernels != "kvlab" && kernels != "native" && !flashinfer_kernels() && kernels != "emulated")
    throw UsageError("--kernels must be auto, kvlab, flashinfer, flashinfer-paged or emulated (got '" + kernels + "')");
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

void RunOptions::check_applicable(const po::variables_map& vm) const {
  const auto given = [&](const char* name) { return vm.count(name) != 0 && !vm[name].defaulted(); };
  if (schedule != "lpm" && given("lpm-max-wait")) throw UsageError("--lpm-max-wait applies only with --schedule lpm");
  if (tenants.empty() && given("tenant-policy")) throw UsageError("--tenant-policy applies only with --tenants");
  if (tenant_policy != "auto" && tenant_policy != "static" && tenant_policy != "elastic" &&
      tenant_policy != "fair-share")
    throw UsageError("--tenant-policy must be auto, static, elastic or fair-share (got '" + tenant_policy + "')");
  if (!tenants.empty()) {
    for (const char* option : {"trace", "requests", "rate", "prompt-len", "output-len", "lengths-from", "limit"})
      if (given(option))
        throw UsageError(
            fmt::format("--{} describes one workload; with --tenants each tenant's line gives its own", option));
    if (execute || verify_kv || device.kind != Device::host)
      throw UsageError("--tenants replays in memory mode on the host (no --execute, --verify-kv or --device)");
  }
  if (!execute)
    for (const char* option : {"kernels", "execute-layers"})
      if (given(option)) throw UsageError(fmt::format("--{} applies only with --execute", option));
  if (tensor_parallel > 1) check_tensor_parallel();
  check_device();
  if (!trace.empty())
    for (const char* option :
         {"requests", "prompt-len", "output-len", "lengths-from", "prefix-groups", "shared-prefix", "turns"})
      if (given(option))
        throw UsageError(fmt::format("--{} describes a synthetic workload; it does not apply with --trace", option));
}

void RunOptions::check_tensor_parallel() const {
  const std::string tp = fmt::format("--tensor-parallel {}", tensor_parallel);
  if (execute) throw UsageError(tp + " applies to the modelled clock; --execute measures one device");
  if (!tenants.empty()) throw UsageError(tp + " does not apply with --tenants (the tenants share one GPU)");
  const ModelGeometry m = model_preset(model_name);
  if (m.num_kv_heads % tensor_parallel != 0 || m.num_q_heads % tensor_parallel != 0)
    throw UsageError(fmt::format("{}: {}'s {} query and {} KV heads do not split evenly over {} GPUs", tp, m.name,
                                 m.num_q_heads, m.num_kv_heads, tensor_parallel));
  if (resolve_device_model(device_model).interconnect_bandwidth <= 0)
    throw UsageError(
        fmt::format("{}: device model {} gives no interconnect_bandwidth for the all-reduces", tp, device_model));
}

void RunOptions::check_device() const {
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

std::unique_ptr<FaultInjector> RunOptions::fault_plan() const {
  auto f = std::make_unique<FaultInjector>();
  const auto parts = split_on(inject_faults, ':', true);
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
  throw UsageError("--inject-faults '" + inject_faults + "': expected nth:N (N >= 1) or random:P[:SEED] (0 <= P <= 1)");
}

fs::path RunOptions::trace_directory() const { return trace_dir.empty() ? default_trace_dir() : fs::path(trace_dir); }

std::pair<std::vector<Request>, std::string> RunOptions::workload() const {
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

ReplayConfig RunOptions::replay_config() const {
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
  if (tensor_parallel > 0) {
    rc.device.tensor_parallel = tensor_parallel;
    rc.device.sources["tensor_parallel"] = "--tensor-parallel";
  }
  rc.execute = execute;
  rc.execute_layers = execute_layers;
  rc.verify_kv = verify_kv;
  if (kernels == "emulated") {  // the CUDA kernels under the SIMT emulator: the CLI's backends are on the host
    rc.attention = [](const AttentionParams& p, const KvView& kv) { emulated_attention(p, kv, /*num_partitions=*/2); };
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

BackendOptions RunOptions::backend_options(MemoryResource* memory, DeviceContext* ctx) const {
  BackendOptions bo;
  bo.device = ctx;
  bo.model = model_preset(model_name);
  bo.capacity_bytes = static_cast<std::size_t>(capacity_gib * static_cast<double>(1ull << 30));
  bo.max_seq_len = max_seq_len;
  bo.memory = memory;
  bo.max_map_count = max_map_count;
  return bo;
}

std::unique_ptr<DeviceContext> RunOptions::open_device() const {
  const std::size_t capacity = static_cast<std::size_t>(capacity_gib * static_cast<double>(1ull << 30));
  return std::make_unique<DeviceContext>(device, capacity + (std::size_t{1} << 30));
}

Provenance RunOptions::provenance(const DeviceContext& d) const {
  Provenance p = current_provenance(options);
  p.device = d.describe();
  if (execute) p.kernels = device.kind == Device::host ? "kvlab host attention" : to_string(gpu_kernel());
  return p;
}

bool RunOptions::flashinfer_kernels() const { return kernels == "flashinfer" || kernels == "flashinfer-paged"; }

GpuKernel RunOptions::gpu_kernel() const {
  if (kernels == "flashinfer") return GpuKernel::flashinfer;
  if (kernels == "flashinfer-paged") return GpuKernel::flashinfer_paged;
  if (kernels == "auto") return resolve(GpuKernel::automatic, device.kind);
  return GpuKernel::kvlab;
}

std::string RunOptions::clock_description(const DeviceModel& model) const {
  if (!execute)
    return "modelled on " + model.name +
           (model.tensor_parallel > 1 ? fmt::format(" x{:g} (tensor parallel)", model.tensor_parallel) : "");
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

namespace {

/// replay's or compare's options, bound to `run` and `backends`: the one list both the command line
/// and run_command_options read.
po::options_description run_command_description(std::string_view command, RunCommand& run, std::string& backends) {
  KVLAB_EXPECTS(command == "replay" || command == "compare", "parse_run_command: replay or compare");
  po::options_description opts(fmt::format("kvlab {} options", command));
  const std::string families = backend_usage();
  if (command == "replay")
    opts.add_options()("help,h", "show this help")("backend", po::value(&backends)->default_value("paged-16"),
                                                   families.c_str());
  else
    opts.add_options()("help,h", "show this help")(
        "backends", po::value(&backends)->default_value(default_compare_backends()),
        "comma-separated backends, replayed side by side on the same workload");
  run.options.add(opts);
  return opts;
}

}  // namespace

std::vector<OptionInfo> run_command_options(std::string_view command) {
  RunCommand run;
  std::string backends;
  const po::options_description opts = run_command_description(command, run, backends);
  std::vector<OptionInfo> list;
  for (const auto& o : opts.options()) {
    OptionInfo info{o->long_name(), o->semantic()->max_tokens() > 0, "", o->description()};
    if (boost::any value; o->semantic()->apply_default(value)) info.default_text = option_text(value);
    list.push_back(std::move(info));
  }
  return list;
}

RunCommand parse_run_command(std::string_view command, const std::vector<std::string>& given_args) {
  RunCommand run;
  std::string backends;
  const po::options_description opts = run_command_description(command, run, backends);
  const std::vector<std::string> args = with_config(opts, given_args, std::string(command));
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(opts).positional(kNoPositional).run(), vm);
  if (vm.count("help")) {
    std::ostringstream text;
    text << opts;
    run.help = true;
    run.help_text = text.str();
    return run;
  }
  po::notify(vm);
  run.options.check(vm);
  run.backends = command == "replay" ? std::vector<std::string>{backends} : split_list(backends);
  // An empty replay --backend is an unknown backend '' (the factory says so, listing the known ones).
  if (run.backends.empty()) throw UsageError("--backends: no backend named");
  return run;
}

}  // namespace kvlab::cli
