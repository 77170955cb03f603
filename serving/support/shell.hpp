#pragma once
// Shell words and the plot launcher: the one place kvlab builds a command line for a shell, so the
// commands it records (summary.json, data.csv, sweep points) and the ones it runs quote alike.
#include <string>
#include <vector>

namespace kvlab {

/// A POSIX shell word that stands for exactly `s`: left bare when it holds only characters no
/// shell treats specially (so recorded commands stay readable), else single-quoted.
[[nodiscard]] std::string shell_quote(const std::string& s);

/// The words joined by spaces, each quoted as needed.
[[nodiscard]] std::string shell_join(const std::vector<std::string>& words);

/// The same for a command recorded on ONE line (a "# command" line, summary.json): a word holding
/// a control character (a newline, an escape sequence) is written in the $'...' form with \n,
/// \t, \xHH escapes, which bash, zsh and ksh read back as the same word.
[[nodiscard]] std::string shell_join_one_line(const std::vector<std::string>& words);

/// What became of a scripts/plot.py run.
enum class PlotOutcome {
  drawn,      ///< the script ran and succeeded
  no_python,  ///< no python3 with matplotlib was found; nothing ran
  no_script,  ///< scripts/plot.py was not found (plot_script_path); nothing ran
  failed,     ///< the script ran and failed
};

/// Where the plot script is: $KVLAB_PLOT_SCRIPT when set (empty if that is no file); else the
/// first of plot.py beside the executable or one folder up (a GPU bundle), scripts/plot.py beside it, the source tree's
/// scripts/plot.py reached from build/<preset>/[bench/], and the tree the binary was built from.
/// Empty when none exists.
[[nodiscard]] std::string plot_script_path();

/// Runs `python3 scripts/plot.py ARGS...` with the first python3 that has matplotlib ("python3" on
/// the PATH, then /usr/bin/python3). `quiet` discards the script's standard output. The arguments
/// go to the program as they are (no shell in between), whatever characters they hold. The
/// script's stderr never reaches the terminal: when it fails, `error` (if given) gets the last
/// line it printed (a traceback's names the error).
PlotOutcome run_plot_script(const std::vector<std::string>& args, bool quiet, std::string* error = nullptr);

}  // namespace kvlab
