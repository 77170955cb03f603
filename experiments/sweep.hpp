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
// replay's files; a point whose compare.csv exists is done, so a rerun resumes.
#include <filesystem>
#include <string>
#include <vector>

namespace kvlab {

struct SweepAxis {
  std::string key;
  std::vector<std::string> values;
  int line = 0;
};

struct SweepPoint {
  std::string name;                          ///< point-0001, ...
  std::vector<std::pair<std::string, std::string>> params;  ///< axis key -> value
  std::vector<std::string> args;             ///< arguments after `kvlab replay`
};

/// Parses a sweep file; errors name FILE:LINE and the problem (InvalidArgument).
[[nodiscard]] std::vector<SweepAxis> read_sweep_file(const std::filesystem::path& file);
/// Every combination, in row-major order of the axes.
[[nodiscard]] std::vector<SweepPoint> expand_sweep(const std::vector<SweepAxis>& axes);
/// Splits a raw argument string on whitespace, honouring single and double quotes.
[[nodiscard]] std::vector<std::string> split_args(const std::string& s, const std::string& where);

/// Runs the points not yet done with `jobs` concurrent `kvlab replay` processes of `exe`; returns
/// the number of points that failed (their stderr is kept in point-NNNN/stderr.txt).
int run_sweep(const std::vector<SweepPoint>& points, const std::filesystem::path& out, int jobs,
              const std::filesystem::path& exe, bool progress);
/// Writes OUT/sweep.sbatch: a Slurm array job with one task per point running the same commands.
void write_slurm_script(const std::vector<SweepPoint>& points, const std::filesystem::path& out,
                        const std::filesystem::path& exe);
/// Merges OUT/point-*/compare.csv (with each point's parameters) into one CSV; returns the rows.
int collect_sweep(const std::filesystem::path& out, const std::filesystem::path& csv);

/// The shell form of one point's command.
[[nodiscard]] std::string point_command(const SweepPoint& p, const std::filesystem::path& out,
                                        const std::filesystem::path& exe);

}  // namespace kvlab
