#pragma once
// Replay output: the side-by-side table on stdout and the files in --out DIR
// (run.json with the command and provenance, compare.csv, and per backend summary.json, steps.csv,
// requests.csv: plain CSV, columns in docs/schema.md).
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "serving/support/provenance.hpp"
#include "serving/replay/replayer.hpp"
#include "serving/support/shell.hpp"

namespace kvlab {

/// One row per backend: the five memory fractions (time-weighted), batch and throughput.
void print_summary_table(std::ostream& os, const std::vector<ReplaySummary>& rows);

struct RunInfo {
  std::string command;  ///< the exact command line that reproduces the run
  std::string model;
  std::string workload;
  std::string clock = "modelled";  ///< "modelled" (memory mode) or "measured" (execute mode)
  std::string device_model;
  std::string device = "host";  ///< where KV lived and kernels ran (--device): host, cuda:N, emulated
  Provenance provenance;        ///< version, revision, date, host, every option's resolved value
};

/// Writes DIR/<backend>/{summary.json,steps.csv,requests.csv}; creates directories as needed.
void write_replay_files(const std::filesystem::path& dir, const RunInfo& info, const ReplayResult& result);

/// A CSV field, quoted (inner quotes doubled) when it holds a comma, quote or newline.
[[nodiscard]] std::string csv_field(const std::string& s);

/// compare.csv's text: one row per backend (the summary and the five fractions), plain CSV.
[[nodiscard]] std::string compare_csv(const std::string& workload, const std::vector<ReplaySummary>& rows);

/// Writes compare_csv(workload, rows) to `file` (the reproducing command is in run.json beside it).
void write_compare_csv(const std::filesystem::path& file, const std::string& workload,
                       const std::vector<ReplaySummary>& rows);

/// Draws DIR/compare.png from DIR/compare.csv with scripts/plot.py, using the first python3 that
/// has matplotlib. Returns the PNG's path, or "" when no such python exists.
/// What became of it (serving/support/shell.hpp); on failure `error` gets the script's last line and
/// no compare.png is left.
[[nodiscard]] PlotOutcome plot_compare(const std::filesystem::path& dir, std::string* error);

}  // namespace kvlab
