#include "experiments/figures/figure_kit.hpp"

#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "alloc/error.hpp"
#include "experiments/run_control.hpp"
#include "experiments/atomic_file.hpp"
#include "experiments/progress.hpp"
#include "experiments/report.hpp"
#include "experiments/shell.hpp"
#include "experiments/trace_reader.hpp"

namespace kvlab::fig {

namespace fs = std::filesystem;

void Table::write_csv(const fs::path& file, const std::string& command) const {
  std::ostringstream f;
  f << "# " << command << "\n";
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
    << "- machine: " << machine() << "\n"
    << "- device and clock: " << text.clock << "\n"
    << "- setup: " << text.setup << "\n\n"
    << table.markdown() << "\n"
    << text.notes << "\n\n"
    << "Files: `data.csv` (the numbers above, first line the command), `" << text.name << ".png` (the plot, drawn by "
    << "`scripts/plot.py figure " << text.name << " DIR`).\n";
  write_file_atomically(ctx.out / "README.md", f.view());
}

void plot(const FigureContext& ctx, const std::string& name) {
  switch (run_plot_script({"figure", name, ctx.out.string()}, /*quiet=*/false)) {
    case PlotOutcome::drawn: return;
    case PlotOutcome::failed:
      KVLAB_THROW(Error, fmt::format("plotting {} failed: scripts/plot.py figure {} {}", name, name,
                                     shell_quote(ctx.out.string())));
    case PlotOutcome::no_python:
      std::cerr << fmt::format("kvlab figure: no python3 with matplotlib; {}.png not drawn (scripts/setup.sh installs it)\n",
                               name);
  }
}

void publish(const FigureContext& ctx, const ReadmeText& text, const Table& table) {
  table.write_csv(ctx.out / "data.csv", ctx.command);
  write_readme(ctx, text, table);
  plot(ctx, text.name);
}

std::vector<Request> sharegpt(const FigureContext& ctx, double rate, std::int64_t n, std::int64_t max_sequence_tokens,
                              std::uint64_t seed) {
  TraceOptions t;
  t.max_sequence_tokens = max_sequence_tokens;
  t.poisson_rate = rate;
  t.max_requests = n;
  t.seed = seed;
  return read_trace(resolve_trace("sharegpt_8k_filtered_stats_llama2_tokenizer.csv", ctx.trace_dir), t).requests;
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

ReplayResult run(const FigureContext& ctx, const std::string& backend, const BackendOptions& o,
                 const std::vector<Request>& w, const ReplayConfig& c) {
  auto b = make_backend(backend, o);
  Progress progress("  " + backend, ctx.progress);
  ReplayConfig stoppable = c;
  stoppable.at_step_boundary = throw_if_interrupted;  // SIGINT/SIGTERM stop a figure between steps
  return replay(*b, w, stoppable, [&](auto d, auto t) { progress.update(d, t); });
}

BackendOptions opt13b_12gb() {
  BackendOptions o;
  o.model = model_preset("opt-13b");
  o.capacity_bytes = 12'000'000'000;
  return o;
}

ReplayConfig a100_40gb() {
  ReplayConfig c;
  c.device = device_model_preset("a100-40gb");
  return c;
}

}  // namespace kvlab::fig
