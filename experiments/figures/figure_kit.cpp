#include "experiments/figures/figure_kit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <iostream>
#include <sstream>
#include <thread>

#include "alloc/core/error.hpp"
#include "experiments/runs/run_control.hpp"
#include "serving/support/atomic_file.hpp"
#include "serving/support/progress.hpp"
#include "serving/report/report.hpp"
#include "serving/support/shell.hpp"
#include "serving/report/summary_json.hpp"
#include "serving/traces/trace_reader.hpp"

namespace kvlab::fig {

namespace fs = std::filesystem;

void Table::write_csv(const fs::path& file) const {
  std::ostringstream f;
  for (std::size_t i = 0; i < columns.size(); ++i) f << (i ? "," : "") << columns[i];
  f << "\n";
  for (const auto& r : rows) {
    for (std::size_t i = 0; i < r.size(); ++i) f << (i ? "," : "") << csv_field(r[i]);
    f << "\n";
  }
  write_file_atomically(file, f.view());
}

std::string Table::markdown() const {
  std::ostringstream s;
  s << "|";
  for (const auto& c : columns) s << " " << c << " |";
  s << "\n|";
  for (std::size_t i = 0; i < columns.size(); ++i) s << "---|";
  s << "\n";
  for (const auto& r : rows) {
    s << "|";
    for (const auto& v : r) s << " " << v << " |";
    s << "\n";
  }
  return s.str();
}

std::string fixed(double v, int digits) { return fmt::format("{:.{}f}", v, digits); }
std::string pct(double fraction) { return fixed(100.0 * fraction, 1); }

double relative_error(double ours, double paper) {
  return paper == 0 ? std::numeric_limits<double>::quiet_NaN() : (ours - paper) / paper;
}

std::string relative_error_pct(double ours, double paper) {
  const double e = relative_error(ours, paper);
  return std::isfinite(e) ? fmt::format("{:+.1f}", 100.0 * e) : "n/a";
}

std::string Facts::quote(const std::string& quantity, double value, int digits, const std::string& source) {
  std::string printed = fixed(value, digits);
  const std::vector<std::string> row{quantity, printed, "", "", source};
  if (std::find(facts_.rows.begin(), facts_.rows.end(), row) == facts_.rows.end()) facts_.add(row);  // quoted twice
  return printed;
}

std::string Facts::claim(const std::string& quantity, double value, double paper, int digits,
                         const std::string& source) {
  std::string printed = fixed(value, digits);
  facts_.add({quantity, printed, fixed(paper, digits), relative_error_pct(value, paper), source});
  return printed;
}

std::string with_sign(const std::string& printed) { return printed.starts_with('-') ? printed : "+" + printed; }

Table Facts::claims() const {
  Table t({"claim", "paper", "ours", "relative_error_pct", "source"});
  for (const auto& r : facts_.rows)
    if (!r[2].empty()) t.add({r[0], r[2], r[1], r[3], r[4]});
  return t;
}

namespace {
std::string machine() {
  std::ifstream cpu("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpu, line))
    if (line.starts_with("model name")) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  return fmt::format("{}, {} hardware threads", model, std::thread::hardware_concurrency());
}

}  // namespace

void write_readme(const FigureContext& ctx, const ReadmeText& text, const Table& table) {
  std::ostringstream f;
  f << "# " << text.name << " — " << text.title << "\n\n"
    << "- command: `" << ctx.command << "`\n"
    << "- scale: " << (ctx.full ? "paper (--full)" : "smoke (default; --full for paper scale)") << "\n"
    << "- machine: " << machine() << "\n";
  if (ctx.device != nullptr) f << "- device: " << ctx.device->describe() << "\n";
  f << "- device and clock: " << text.clock << "\n";
  if (!text.clock_sources.empty()) f << "- clock sources: " << text.clock_sources << "\n";
  f << "- setup: " << text.setup << "\n\n" << table.markdown() << "\n" << text.notes << "\n\n";
  if (const Table claims = text.facts.claims(); !claims.rows.empty())
    f << "Claims against the paper, ours from the data above (facts.csv):\n\n" << claims.markdown() << "\n";
  f << "Files: `data.csv` (the table above), "
    << (text.facts.empty() ? "" : "`facts.csv` (every other number quoted above, with its source), ")
    << "`run.json` (the command and provenance), `" << text.name << ".png` (the plot, drawn by "
    << "`scripts/plot.py figure " << text.name << " DIR`).\n";
  write_file_atomically(ctx.out / "README.md", f.view());
}

void plot(const FigureContext& ctx, const std::string& name) {
  std::string error;
  switch (run_plot_script({"figure", name, ctx.out.string(), "--format", ctx.formats}, /*quiet=*/false, &error)) {
    case PlotOutcome::drawn:
      return;
    case PlotOutcome::failed: {
      std::error_code ec;
      for (const char* ext : {".png", ".pdf", ".svg"})  // what a failed script left is no plot
        std::filesystem::remove(ctx.out / (name + ext), ec);
      throw_if_interrupted();  // Ctrl-C while plotting: interrupted, not failed
      KVLAB_THROW(Error, fmt::format("plotting {} failed: scripts/plot.py figure {} {}: {}", name, name,
                                     shell_quote(ctx.out.string()), error));
    }
    case PlotOutcome::no_python:
      std::cerr << fmt::format(
          "kvlab figure: no python3 with matplotlib; {}.png not drawn (scripts/setup.sh installs it)\n", name);
      return;
    case PlotOutcome::no_script:
      std::cerr << fmt::format(
          "kvlab figure: warning: scripts/plot.py not found beside kvlab or in its source tree "
          "(set KVLAB_PLOT_SCRIPT); {}.png not drawn, the data stand\n",
          name);
  }
}

void publish(const FigureContext& ctx, const ReadmeText& text, const Table& table) {
  table.write_csv(ctx.out / "data.csv");
  std::error_code ec;
  if (text.facts.empty())
    fs::remove(ctx.out / "facts.csv", ec);  // an earlier run's facts are not this run's
  else
    text.facts.table().write_csv(ctx.out / "facts.csv");
  write_file_atomically(ctx.out / "run.json", run_json(ctx.command, ctx.provenance));
  write_readme(ctx, text, table);
  plot(ctx, text.name);
}

namespace {
std::vector<Request> read_sharegpt(const FigureContext& ctx, TraceOptions t) {
  return read_trace(resolve_trace("sharegpt_8k_filtered_stats_llama2_tokenizer.csv", ctx.trace_dir), t).requests;
}
}  // namespace

std::vector<Request> sharegpt(const FigureContext& ctx, double rate, std::int64_t n, std::int64_t max_sequence_tokens,
                              std::uint64_t seed) {
  TraceOptions t;
  t.max_sequence_tokens = max_sequence_tokens;
  t.poisson_rate = rate;
  t.max_requests = n;
  t.seed = seed;
  return read_sharegpt(ctx, t);
}

std::vector<Request> sharegpt_vllm_filtered(const FigureContext& ctx, double rate, std::int64_t n) {
  TraceOptions t;
  t.max_sequence_tokens = opt13b_12gb().model.max_context;
  t.max_prompt_tokens = 1024;
  t.poisson_rate = rate;
  t.max_requests = n;
  return read_sharegpt(ctx, t);
}

std::vector<Request> alpaca_like(double rate, std::int64_t n, std::uint64_t seed) {
  SyntheticWorkload w;
  w.num_requests = n;
  w.rate = rate;
  w.prompt = LengthDistribution::parse("lognormal:2.78:0.6:512", "prompt");
  w.output = LengthDistribution::parse("lognormal:3.8:0.7:1024", "output");
  w.seed = seed;
  return generate(w);
}

std::vector<Request> lognormal_requests(const LognormalLengths& l, double rate, std::int64_t n, std::uint64_t seed) {
  const auto lognormal = [&](double mean, double sigma) {
    LengthDistribution d;
    d.kind = LengthDistribution::Kind::lognormal;
    d.a = std::log(mean) - sigma * sigma / 2;  // mu: the unclipped mean is exp(mu + sigma^2 / 2) = mean
    d.b = sigma;
    d.max = static_cast<double>(l.max_sequence_tokens);
    return d;
  };
  // Lengths first (everything at t = 0), oversampled until n fit; arrivals drawn afterwards.
  SyntheticWorkload lengths;
  lengths.prompt = lognormal(l.mean_prompt, l.prompt_sigma);
  lengths.output = lognormal(l.mean_output, l.output_sigma);
  lengths.seed = seed;
  std::vector<Request> kept;
  for (std::int64_t draw = n + n / 4 + 16; static_cast<std::int64_t>(kept.size()) < n; draw *= 2) {
    lengths.num_requests = draw;
    kept.clear();
    for (const Request& r : generate(lengths))
      if (r.prompt_tokens + r.output_tokens <= l.max_sequence_tokens && static_cast<std::int64_t>(kept.size()) < n)
        kept.push_back(r);
  }
  SyntheticWorkload arrivals;
  arrivals.num_requests = n;
  arrivals.rate = rate;
  arrivals.prompt = arrivals.output = LengthDistribution::parse("fixed:1", "length");
  arrivals.seed = seed + 1;
  const std::vector<Request> times = generate(arrivals);
  for (std::size_t i = 0; i < kept.size(); ++i) {
    kept[i].id = static_cast<std::int64_t>(i);
    kept[i].arrival_s = times[i].arrival_s;
  }
  return kept;
}

std::vector<Request> sharegpt_vllm_lengths(double rate, std::int64_t n, std::uint64_t seed) {
  return lognormal_requests({kVllmShareGptMeanPrompt, kVllmShareGptMeanOutput, opt13b_12gb().model.max_context}, rate,
                            n, seed);
}

std::pair<double, double> mean_lengths(const std::vector<Request>& w) {
  double p = 0, o = 0;
  for (const Request& r : w) {
    p += static_cast<double>(r.prompt_tokens);
    o += static_cast<double>(r.output_tokens);
  }
  const double n = w.empty() ? 1.0 : static_cast<double>(w.size());
  return {p / n, o / n};
}

ReplayResult run(const FigureContext& ctx, const std::string& backend, const BackendOptions& o,
                 const std::vector<Request>& w, const ReplayConfig& c, StepRecords steps) {
  auto b = make_backend(backend, o);
  Progress progress("  " + backend, ctx.progress);
  ReplayConfig stoppable = c;
  stoppable.keep_steps = steps == StepRecords::keep;
  stoppable.at_step_boundary = throw_if_interrupted;  // SIGINT/SIGTERM stop a figure between steps
  return replay(*b, w, stoppable, [&](auto d, auto t) { progress.update(d, t); });
}

BackendOptions opt13b_12gb() {
  BackendOptions o;
  o.model = model_preset("opt-13b");
  o.capacity_bytes = 12'000'000'000;
  return o;
}

ReplayConfig a100_40gb() { return vllm_v0_on("a100-40gb", 1); }

ReplayConfig vllm_v0_on(const std::string& preset, int gpus) {
  ReplayConfig c;
  c.device = device_model_preset(preset);
  c.device.tensor_parallel = gpus;
  if (gpus > 1) c.device.sources["tensor_parallel"] = "the vLLM paper's setting for this model (Table 1)";
  // The scheduler of the system the vLLM paper measured (vLLM v0, 2023): a step runs either the
  // waiting prompts it can admit or the running decodes, never both; at most 256 sequences
  // (max_num_seqs) and 2560 tokens (max_num_batched_tokens) per step, its defaults then.
  c.prefill_steps = PrefillSteps::separate;
  c.max_running = 256;
  c.max_batched_tokens = 2560;
  // And its CPU time per step, which the GPU waits for: vLLM v0's Python engine (schedule, prepare
  // inputs, sampler, process outputs) costs milliseconds a step, not kvlab's microseconds. Vidur
  // measured that engine on an A100 (Llama-2-7B, TP1, batch 8..64); the least-squares line
  // through the sum of its four mean times is 2.02 ms + 0.171 ms per sequence (within 0.45 ms of
  // every point). Taken as published, not fitted to any figure here.
  constexpr const char* kVidurCpu =
      "Vidur's measured vLLM-engine CPU overhead on an A100 (microsoft/vidur data/profiling/a100/cpu_overheads.csv, "
      "MIT; Llama-2-7B, TP1, batch 8-64: schedule + prepare inputs + sampler + process outputs, means): "
      "least-squares line 2.02 ms + 0.171 ms per sequence; the engine the vLLM paper ran (v0, 2023)";
  c.device.step_overhead_s = 2.02e-3;
  c.device.sequence_overhead_s = 0.171e-3;
  c.device.sources["step_overhead_s"] = kVidurCpu;
  c.device.sources["sequence_overhead_s"] = kVidurCpu;
  return c;
}

std::string modelled_a100() {
  const DeviceModel d = a100_40gb().device;
  return fmt::format(
      "modelled: per-operation clock on the `{}` device model ({:.4g} TB/s, {:.4g} TFLOP/s; "
      "docs/clock.md); no GPU was used",
      d.name, d.memory_bandwidth / 1e12, d.peak_flops / 1e12);
}

std::string clock_sources(const DeviceModel& d) {
  // Every number and every source comes from the device model itself (its file names a source for
  // each constant), so a README can never cite a source the clock did not use.
  return fmt::format(
      "device model `{}` ({}; memory_bandwidth {:.4g} TB/s, peak_flops {:.4g} TFLOP/s, host_bandwidth "
      "{:.4g} GB/s; formulas in docs/clock.md); sources: {}",
      d.name, d.origin.empty() ? "built in code" : d.origin, d.memory_bandwidth / 1e12, d.peak_flops / 1e12,
      d.host_bandwidth / 1e9, describe_sources(d));
}

std::vector<double> geometric_rates(double from, double to, int n) {
  std::vector<double> r;
  for (int i = 0; i < n; ++i) r.push_back(from * std::pow(to / from, static_cast<double>(i) / (n - 1)));
  return r;
}

double crossing_rate(const std::vector<double>& rates, const std::vector<double>& latency, double threshold) {
  if (latency.empty() || latency.front() > threshold) return std::numeric_limits<double>::quiet_NaN();
  for (std::size_t i = 1; i < rates.size() && i < latency.size(); ++i)
    if (latency[i] > threshold) {
      const double f = (threshold - latency[i - 1]) / (latency[i] - latency[i - 1]);
      return std::round((rates[i - 1] + f * (rates[i] - rates[i - 1])) * 1000) / 1000;
    }
  return std::numeric_limits<double>::infinity();
}

}  // namespace kvlab::fig
