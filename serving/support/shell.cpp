#include "serving/support/shell.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>

#include <cstdlib>
#include <filesystem>
#include <fstream>
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

namespace {
bool has_control(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

/// bash's ANSI-C quoting: $'...' with every control character, quote and backslash escaped.
std::string ansi_c_quote(const std::string& s) {
  std::string out = "$'";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\\' || c == '\'')
      out += std::string("\\") + c;
    else if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out + "'";
}

/// Runs argv (no shell), stdout to /dev/null when `quiet`, stderr too when `silent`, else to the
/// file `stderr_to` when one is named; the exit status or -1.
int spawn_and_wait(const std::vector<std::string>& argv, bool quiet, bool silent, const std::string& stderr_to = {}) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  if (silent) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  } else if (!stderr_to.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_to.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  }
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// The last non-empty line of `file` (a Python traceback's last line names the error), or "".
std::string last_line(const std::string& file) {
  std::ifstream in(file);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}
}  // namespace

std::string shell_join_one_line(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words)
    out += (out.empty() ? "" : " ") + (has_control(w) ? ansi_c_quote(w) : shell_quote(w));
  return out;
}

std::string plot_script_path() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("KVLAB_PLOT_SCRIPT"); env != nullptr && *env != '\0')
    return fs::is_regular_file(env) ? std::string(env) : std::string();
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path dir = exe.parent_path();
    // Beside the binary or its folder (a GPU bundle: DIR/bin/kvlab, DIR/plot.py), in a scripts/
    // beside it, and from build/<preset>/ or
    // build/<preset>/bench/ back to the source tree it was built from, wherever that tree now is.
    for (const fs::path& p :
         {dir / "plot.py", dir / ".." / "plot.py", dir / "scripts" / "plot.py",
          dir / ".." / ".." / "scripts" / "plot.py", dir / ".." / ".." / ".." / "scripts" / "plot.py"})
      candidates.push_back(p);
  }
  candidates.push_back(fs::path(KVLAB_SOURCE_DIR) / "scripts" / "plot.py");  // the build machine's tree
  for (const fs::path& p : candidates)
    if (fs::is_regular_file(p, ec)) return p.lexically_normal().string();
  return {};
}

PlotOutcome run_plot_script(const std::vector<std::string>& args, bool quiet, std::string* error) {
  const std::string script = plot_script_path();
  if (script.empty()) return PlotOutcome::no_script;
  std::vector<std::string> argv = {"", script};
  argv.insert(argv.end(), args.begin(), args.end());
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    if (spawn_and_wait({python, "-c", "import matplotlib"}, true, true) != 0) continue;
    argv.front() = python;
    // The script's stderr goes to a file, never to the terminal: a failure (a full disk, Ctrl-C)
    // is one line from kvlab, not a Python traceback.
    std::string log = (std::filesystem::temp_directory_path() / "kvlab-plot-XXXXXX").string();
    const int fd = ::mkstemp(log.data());
    if (fd >= 0) ::close(fd);
    const int rc = spawn_and_wait(argv, quiet, false, fd >= 0 ? log : std::string());
    if (rc != 0 && error != nullptr) {
      const std::string last = fd >= 0 ? last_line(log) : std::string();
      *error = last.empty() ? (rc < 0 ? "it was killed by a signal" : "exit status " + std::to_string(rc)) : last;
    }
    if (fd >= 0) ::unlink(log.c_str());
    return rc == 0 ? PlotOutcome::drawn : PlotOutcome::failed;
  }
  return PlotOutcome::no_python;
}

}  // namespace kvlab
