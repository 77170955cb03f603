// One workload replayed through named backends, the way `kvlab replay` and `kvlab compare` run it:
// the device opened, every backend made once before any long run, the workload built, the output
// directory locked and written (per backend, then compare.csv, the chart and the completion
// marker). The command line and the Python package (python/) both run this, so a run from either
// prints, writes and returns the same thing.
#pragma once

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "experiments/cli/run_options.hpp"
#include "serving/report/report.hpp"
#include "serving/replay/replayer.hpp"

namespace kvlab::cli {

/// Creates an output directory and checks that files can be made in it, before any work starts:
/// one line naming the directory when it cannot (exit 1).
void prepare_output_dir(const std::filesystem::path& dir, const std::string& option);

/// Where a run speaks and what it calls: the CLI's are stdout, stderr and its signal flag; Python's
/// capture the text and check Python's signals.
struct RunHooks {
  std::ostream* out = nullptr;  ///< the header, the table, what was written (nullptr: std::cout)
  std::ostream* err = nullptr;  ///< warnings and failures (nullptr: std::cerr)
  /// Called before every step; may throw to stop the run there. Empty: throw_if_interrupted.
  std::function<void()> at_step_boundary;
  /// Called with each backend's result as it finishes, with what its summary.json records.
  std::function<void(const ReplayResult&, const RunInfo&)> on_result;
  /// Keep every step's record even without --out (Python returns them; the CLI keeps only what it
  /// writes).
  bool keep_steps = false;
  /// Scheduling policies given as code (Python callables): they replace --schedule's order and the
  /// latest-arrival preemption (serving/replay/schedule_policy.hpp). Empty: the options decide.
  AdmissionOrder admission_order;
  PreemptionChoice preemption_victim;
};

/// Replays the workload of `c` through each of `names`; prints the header and the table; with --out
/// writes the files and, when `chart`, draws compare.png. Returns the exit status: 0, or 1 when the
/// KV integrity check failed or a backend left the device unclean (said on `err`).
int run_backends(const RunOptions& c, const std::vector<std::string>& names, const std::string& invocation, bool chart,
                 const RunHooks& hooks = {});

}  // namespace kvlab::cli
