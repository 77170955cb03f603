#pragma once
// `kvlab sweep`: a grid of replays (backends x block/page sizes x workloads x models x capacities),
// run as parallel local processes or written out as a Slurm array; `kvlab collect` merges them.
//
// A sweep file has one axis per line, `KEY = VALUE | VALUE | ...`; every combination of one value
// per axis is a point. KEY is a `kvlab replay` option (backend, model, capacity-gib, rate, ...),
// given to replay as `--KEY VALUE`; the special keys `workload` and `fixed` take raw argument
// strings (`fixed` is one value added to every point). '#' starts a comment. Example:
//
//   backend      = contiguous-max | paged-16 | paged-64 | vmm-2m
//   model        = llama-3-8b
//   capacity-gib = 4 | 8
//   workload     = --trace AzureLLMInferenceTrace_conv.csv --limit 2000 | --requests 500 --rate 4
//   fixed        = --time-scale 0.5
//
// Each point gets OUT/point-NNNN/ with command.txt (the exact command that reproduces it) and the
// replay's files; a point whose completion marker (complete.json) is valid for the same command
// is done, so a rerun resumes.
#include <cstddef>
#include <filesystem>
#include <istream>
#include <string>
#include <vector>

namespace kvlab {

struct SweepAxis {
  std::string key;
  std::vector<std::string> values;
  int line = 0;
};

struct SweepPoint {
  std::string name;                                         ///< point-0001, ...
  std::vector<std::pair<std::string, std::string>> params;  ///< axis key -> value
  std::vector<std::string> args;                            ///< arguments after `kvlab replay`
};

/// Parses a sweep file; errors name FILE:LINE and the problem (InvalidArgument).
[[nodiscard]] std::vector<SweepAxis> read_sweep_file(const std::filesystem::path& file);
/// The same from a stream; `source` names it in errors (SOURCE:LINE: ...).
[[nodiscard]] std::vector<SweepAxis> parse_sweep(std::istream& in, const std::string& source);
/// The most points a grid may expand to (expand_sweep throws InvalidArgument past it).
inline constexpr std::size_t kMaxSweepPoints = 100'000;
/// Every combination, in row-major order of the axes.
[[nodiscard]] std::vector<SweepPoint> expand_sweep(const std::vector<SweepAxis>& axes);
/// Splits a raw argument string on whitespace, honouring single and double quotes.
[[nodiscard]] std::vector<std::string> split_args(const std::string& s, const std::string& where);

/// Runs the points not yet done with `jobs` concurrent `kvlab replay` processes of `exe`; returns
/// the number of points that failed (their stderr is kept in point-NNNN/stderr.txt).
int run_sweep(const std::vector<SweepPoint>& points, const std::filesystem::path& out, int jobs,
              const std::filesystem::path& exe, bool progress);
/// #SBATCH resources for --slurm (empty: not written). Each is one word: no spaces, quotes or
/// control characters (validate_slurm_options), since sbatch reads #SBATCH lines as words.
struct SlurmOptions {
  std::string time, mem, gres, partition, account;
};
/// Throws InvalidArgument naming the option whose value would break its #SBATCH line.
void validate_slurm_options(const SlurmOptions& o);
/// Throws InvalidArgument naming `out` when it cannot stand in the #SBATCH lines and commands of a
/// Slurm script: spaces, quotes, control characters, '%', '#', '\\', or a leading '-'.
void validate_slurm_out(const std::filesystem::path& out);
/// Writes OUT/sweep.sbatch: a Slurm array job with one task per point not yet complete (a valid
/// completion marker for the same command) running the same commands; returns the number of
/// tasks (0: every point is complete, nothing written).
std::size_t write_slurm_script(const std::vector<SweepPoint>& points, const std::filesystem::path& out,
                               const std::filesystem::path& exe, const SlurmOptions& options = {});
/// Writes OUT/sweep-grid.json: the axis keys and each point's name and values. `collect` merges
/// only the points it names (a point-NNNN/ of an older, larger grid is stale) and gives each axis
/// a column.
void write_sweep_grid(const std::vector<SweepPoint>& points, const std::filesystem::path& out);
inline constexpr const char* kGridFile = "sweep-grid.json";

struct Collected {
  std::string csv;  ///< the merged CSV (nothing is written by collect_sweep)
  int rows = 0;
  std::vector<std::string> skipped;  ///< "point-0003: why" for each point left out
};
/// Merges the finished points (a valid completion marker, experiments/runs/run_control.hpp) of the
/// current grid: one row per backend per point, with the point, its axis values and command.
[[nodiscard]] Collected collect_sweep(const std::filesystem::path& out);
/// Throws InvalidArgument when `csv` lies inside one of OUT's point directories.
void check_collect_output(const std::filesystem::path& out, const std::filesystem::path& csv);

/// The shell form of one point's command.
[[nodiscard]] std::string point_command(const SweepPoint& p, const std::filesystem::path& out,
                                        const std::filesystem::path& exe);

}  // namespace kvlab
