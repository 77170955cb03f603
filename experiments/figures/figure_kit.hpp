#pragma once
// What every figure shares: its table (data.csv and the README's Markdown), the README, the plot,
// the paper workloads and setups, and one replay by backend name. Internal to experiments/figures/.
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "serving/replay/backend_factory.hpp"
#include "experiments/figures/figures.hpp"
#include "serving/replay/replayer.hpp"
#include "serving/traces/workload.hpp"

namespace kvlab::fig {

/// A small table of strings: written as data.csv and as a Markdown table in the README.
struct Table {
  explicit Table(std::vector<std::string> column_names) : columns(std::move(column_names)) {}

  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;

  void add(std::vector<std::string> row) { rows.push_back(std::move(row)); }
  /// Plain CSV, one header row (the command and provenance are in run.json beside it).
  void write_csv(const std::filesystem::path& file) const;
  [[nodiscard]] std::string markdown() const;
};

/// `v` with `digits` digits after the point ("12.35").
[[nodiscard]] std::string fixed(double v, int digits = 2);
/// A fraction as a percentage with one decimal ("12.3").
[[nodiscard]] std::string pct(double fraction);
/// (ours - paper) / paper: the relative error of our number against the paper's. NaN when the
/// paper's number is 0 (no relative error exists).
[[nodiscard]] double relative_error(double ours, double paper);
/// relative_error as a signed percentage with one decimal ("+4.0", "-12.3"); "n/a" when undefined.
[[nodiscard]] std::string relative_error_pct(double ours, double paper);

/// The numbers a README quotes outside its table, each with where it comes from, written as
/// facts.csv beside data.csv: so that every number a README states is in one of its data files
/// (scripts/check_readme_numbers.py fails otherwise). A figure formats each such number through
/// quote() or claim() rather than typing it into the prose.
class Facts {
 public:
  /// Records `value` (named `quantity`, from `source`: "this run", a paper's section, the setup)
  /// and returns it as the README prints it, with `digits` decimals.
  std::string quote(const std::string& quantity, double value, int digits, const std::string& source);
  /// Records our `value` against the paper's (`paper` from `source`), with the relative error;
  /// returns ours as printed. Claims also appear as a table of their own in the README.
  std::string claim(const std::string& quantity, double value, double paper, int digits, const std::string& source);

  [[nodiscard]] bool empty() const { return facts_.rows.empty(); }
  /// facts.csv: quantity,value,paper_value,relative_error_pct,source.
  [[nodiscard]] const Table& table() const { return facts_; }
  /// The claims alone, for the README: quantity, paper, ours, relative error, source.
  [[nodiscard]] Table claims() const;

 private:
  Table facts_{{"quantity", "value", "paper_value", "relative_error_pct", "source"}};
};

/// "+12.3" for "12.3": a printed change with its sign ("-4.0" stays).
[[nodiscard]] std::string with_sign(const std::string& printed);

/// What the README says about one figure, besides its table.
struct ReadmeText {
  std::string name;   ///< the figure's name (its directory and PNG)
  std::string title;  ///< which paper figure, and what it shows
  std::string setup;  ///< model, capacity, workload, backends
  std::string clock;  ///< whether times are measured or modelled, and on what
  std::string notes;  ///< how to read the result against the paper
  /// Which sources set each constant of the clock (clock_sources()); empty: no such line (a
  /// measured figure).
  std::string clock_sources = {};
  /// The numbers `notes` quotes that the table does not hold (facts.csv).
  Facts facts = {};
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
/// The first n ShareGPT requests that vLLM's benchmarks (benchmark_serving.py,
/// benchmark_throughput.py) would sample: prompt at most 1024 tokens, prompt + output within OPT's
/// 2048-token context (their minimum of 4 tokens each is not applied: 94 of ~11,000 rows), with
/// Poisson arrivals at `rate` drawn after the filter. The ShareGPT workload of the vLLM figures.
[[nodiscard]] std::vector<Request> sharegpt_vllm_filtered(const FigureContext& ctx, double rate, std::int64_t n);
/// Alpaca-like lengths (short instructions): lognormal prompts with mean ~19 tokens and outputs
/// with mean ~58 tokens, the averages vLLM reports for Alpaca (Fig. 11).
[[nodiscard]] std::vector<Request> alpaca_like(double rate, std::int64_t n, std::uint64_t seed = 0);

/// Lognormal prompt and output lengths given by their means. The sigma convention is the one
/// alpaca_like() has used since it was written (prompts 0.6, outputs 0.7, natural log), fixed
/// before any figure compared its results with a paper; mu = ln(mean) - sigma^2 / 2, so the
/// unclipped distribution has exactly the stated mean. Each length is clamped to
/// [1, max_sequence_tokens] and requests whose prompt + output exceed it are dropped before the
/// arrivals are drawn, as sharegpt() filters, so `rate` is the load offered.
struct LognormalLengths {
  double mean_prompt = 0;
  double mean_output = 0;
  std::int64_t max_sequence_tokens = 2048;
  double prompt_sigma = 0.6;
  double output_sigma = 0.7;
};
/// n requests with `lengths`, Poisson arrivals at `rate` (drawn after the filter).
[[nodiscard]] std::vector<Request> lognormal_requests(const LognormalLengths& lengths, double rate, std::int64_t n,
                                                      std::uint64_t seed = 0);
/// The means vLLM reports for its ShareGPT sample (Fig. 11: 161.31 input, 337.99 output tokens,
/// OPT tokenizer), clipped to OPT's 2048-token context. Not the paper's trace: only its means.
[[nodiscard]] std::vector<Request> sharegpt_vllm_lengths(double rate, std::int64_t n, std::uint64_t seed = 0);
inline constexpr double kVllmShareGptMeanPrompt = 161.31, kVllmShareGptMeanOutput = 337.99;
inline constexpr double kVllmAlpacaMeanPrompt = 19.31, kVllmAlpacaMeanOutput = 58.45;

/// `from` to `to` in `n` >= 2 geometric steps.
[[nodiscard]] std::vector<double> geometric_rates(double from, double to, int n);
/// The rate at which `latency` (by ascending `rates`) first passes `threshold`, interpolated
/// linearly between the last point at or below it and the first above and rounded to 3 decimals
/// (as the figures print it, so what a README derives from it follows from the file); NaN when
/// the first point is above already, +inf when none is.
[[nodiscard]] double crossing_rate(const std::vector<double>& rates, const std::vector<double>& latency,
                                   double threshold);
/// The normalized latency at which a rate counts as sustained: this many times the latency at the
/// lowest rate swept (the unloaded latency); past it, queueing dominates (request-rate, block-size).
inline constexpr double kSaturationLatencyFactor = 4.0;

/// Mean prompt and output tokens of a workload.
[[nodiscard]] std::pair<double, double> mean_lengths(const std::vector<Request>& w);

/// Whether a figure's replay keeps every step's record (ReplayResult::steps). Figures that tabulate
/// only the summary drop them: memory mode keeps nothing it does not write (a long figure kept
/// hundreds of MB of step records it never read).
enum class StepRecords { drop, keep };

/// Replays `w` through a fresh backend of that name, with a progress line; the steps are kept only
/// when asked for (whatever `c.keep_steps` says).
[[nodiscard]] ReplayResult run(const FigureContext& ctx, const std::string& backend, const BackendOptions& o,
                               const std::vector<Request>& w, const ReplayConfig& c,
                               StepRecords steps = StepRecords::drop);

/// OPT-13B with the 12 GB of KV space it leaves on a 40 GB A100 in the vLLM paper.
[[nodiscard]] BackendOptions opt13b_12gb();
/// The declared A100-40GB roofline clock.
[[nodiscard]] ReplayConfig a100_40gb();
/// The clock and scheduler a100_40gb() sets up (vLLM v0's, its CPU time per step) on device model
/// `preset` with the model split over `gpus` of them by tensor parallelism.
[[nodiscard]] ReplayConfig vllm_v0_on(const std::string& preset, int gpus);
/// "modelled: declared A100-40GB roofline (...); no GPU was used", its numbers read from a100_40gb().
[[nodiscard]] std::string modelled_a100();
/// The README's "clock sources" line: for each constant of `device`, its value and the source that
/// set it. The one place that text is written: when the device model carries its own sources,
/// this reads them from there.
[[nodiscard]] std::string clock_sources(const DeviceModel& device);

}  // namespace kvlab::fig
