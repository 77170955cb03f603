#pragma once
// What every figure shares: its table (data.csv and the README's Markdown), the README, the plot,
// the paper workloads and setups, and one replay by backend name. Internal to experiments/figures/.
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "experiments/backend_factory.hpp"
#include "experiments/figures.hpp"
#include "experiments/replayer.hpp"
#include "experiments/workload.hpp"

namespace kvlab::fig {

/// A small table of strings: written as data.csv and as a Markdown table in the README.
struct Table {
  explicit Table(std::vector<std::string> column_names) : columns(std::move(column_names)) {}

  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;

  void add(std::vector<std::string> row) { rows.push_back(std::move(row)); }
  /// CSV whose first line is "# COMMAND".
  void write_csv(const std::filesystem::path& file, const std::string& command) const;
  [[nodiscard]] std::string markdown() const;
};

/// `v` with `digits` digits after the point ("12.35").
[[nodiscard]] std::string fixed(double v, int digits = 2);
/// A fraction as a percentage with one decimal ("12.3").
[[nodiscard]] std::string pct(double fraction);

/// What the README says about one figure, besides its table.
struct ReadmeText {
  std::string name;   ///< the figure's name (its directory and PNG)
  std::string title;  ///< which paper figure, and what it shows
  std::string setup;  ///< model, capacity, workload, backends
  std::string clock;  ///< whether times are measured or modelled, and on what
  std::string notes;  ///< how to read the result against the paper
};

/// Writes ctx.out/README.md: the command, scale, machine, clock, setup, the table and the notes.
void write_readme(const FigureContext& ctx, const ReadmeText& text, const Table& table);

/// Draws ctx.out/NAME.png with scripts/plot.py; warns (no throw) when no python3 has matplotlib.
void plot(const FigureContext& ctx, const std::string& name);

/// Writes data.csv and the README, then draws the plot: the end of every figure.
void publish(const FigureContext& ctx, const ReadmeText& text, const Table& table);

/// ShareGPT request lengths (Llama-2 tokenizer, 8k filter) with Poisson arrivals.
/// The first n ShareGPT requests that fit in `max_sequence_tokens` (0: all), with Poisson arrivals
/// at `rate` drawn after the filter, so `rate` is the load the backends are offered.
[[nodiscard]] std::vector<Request> sharegpt(const FigureContext& ctx, double rate, std::int64_t n,
                                            std::int64_t max_sequence_tokens = 0, std::uint64_t seed = 0);
/// Alpaca-like lengths (short instructions): lognormal prompts with mean ~19 tokens and outputs
/// with mean ~58 tokens, the averages vLLM reports for Alpaca (Fig. 11).
[[nodiscard]] std::vector<Request> alpaca_like(double rate, std::int64_t n, std::uint64_t seed = 0);

/// Replays `w` through a fresh backend of that name, with a progress line.
[[nodiscard]] ReplayResult run(const FigureContext& ctx, const std::string& backend, const BackendOptions& o,
                               const std::vector<Request>& w, const ReplayConfig& c);

/// OPT-13B with the 12 GB of KV space it leaves on a 40 GB A100 in the vLLM paper.
[[nodiscard]] BackendOptions opt13b_12gb();
/// The declared A100-40GB roofline clock.
[[nodiscard]] ReplayConfig a100_40gb();
inline constexpr const char* kModelledA100 =
    "modelled: declared A100-40GB roofline (1.555 TB/s, 312 TFLOP/s); no GPU was used";

}  // namespace kvlab::fig
