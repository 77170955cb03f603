#include "experiments/shell.hpp"

#include <cstdlib>
#include <string_view>

namespace kvlab {

std::string shell_quote(const std::string& s) {
  constexpr std::string_view safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+";
  if (!s.empty() && s.find_first_not_of(safe) == std::string::npos) return s;
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + shell_quote(w);
  return out;
}

PlotOutcome run_plot_script(const std::vector<std::string>& args, bool quiet) {
  std::vector<std::string> words = {"", std::string(KVLAB_SOURCE_DIR) + "scripts/plot.py"};
  words.insert(words.end(), args.begin(), args.end());
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(python) + " -c 'import matplotlib' >/dev/null 2>&1";
    if (std::system(probe.c_str()) != 0) continue;
    words.front() = python;
    const std::string cmd = shell_join(words) + (quiet ? " >/dev/null" : "");
    return std::system(cmd.c_str()) == 0 ? PlotOutcome::drawn : PlotOutcome::failed;
  }
  return PlotOutcome::no_python;
}

}  // namespace kvlab
