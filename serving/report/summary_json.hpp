#pragma once
// summary.json: one replay's summary as a JSON object, built and escaped by nlohmann-json and laid
// out a few related keys per line (the layout scripts/plot.py readers and people diff).
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "serving/report/report.hpp"

namespace kvlab {

/// The text of summary.json. Keys keep their historical order; every double is rounded to 9
/// significant digits (what the file has always carried) and printed in its shortest form.
[[nodiscard]] std::string summary_json(const RunInfo& info, const ReplaySummary& s);

/// The text of run.json, written beside a figure's or a run's CSV files: the command that
/// reproduces them and its provenance (version, revision, date, host, every resolved option).
[[nodiscard]] std::string run_json(const std::string& command, const Provenance& p);

/// The options a run.json or summary.json recorded (its provenance's `options`, by name, in the
/// file's order). Throws InvalidArgument naming the file when it cannot be read or holds none.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> recorded_options(const std::filesystem::path& file);

/// Writes summary_json(info, s) to `file`.
void write_summary_json(const std::filesystem::path& file, const RunInfo& info, const ReplaySummary& s);

}  // namespace kvlab
