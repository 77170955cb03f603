#include "experiments/sweep.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "alloc/error.hpp"
#include "experiments/atomic_file.hpp"
#include "experiments/progress.hpp"
#include "experiments/shell.hpp"

namespace kvlab {

namespace fs = std::filesystem;

namespace {
std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}
}  // namespace

std::vector<std::string> split_args(const std::string& s, const std::string& where) {
  std::vector<std::string> out;
  std::string cur;
  bool have = false;
  char quote = 0;
  for (char c : s) {
    if (quote) {
      if (c == quote) quote = 0;
      else cur += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      have = true;
    } else if (c == ' ' || c == '\t') {
      if (have) out.push_back(cur);
      cur.clear();
      have = false;
    } else {
      cur += c;
      have = true;
    }
  }
  if (quote) KVLAB_THROW(InvalidArgument, where + ": unterminated quote");
  if (have) out.push_back(cur);
  return out;
}

std::vector<SweepAxis> read_sweep_file(const fs::path& file) {
  std::error_code ec;
  if (fs::is_directory(file, ec)) KVLAB_THROW(InvalidArgument, file.string() + ": is a directory, not a sweep file");
  std::ifstream in(file);
  if (!in) KVLAB_THROW(InvalidArgument, file.string() + ": cannot read the sweep file");
  std::vector<SweepAxis> axes;
  std::set<std::string> seen;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string where = file.string() + ":" + std::to_string(n);
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    line = trim(line);
    if (line.empty()) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) KVLAB_THROW(InvalidArgument, where + ": expected 'KEY = VALUE | VALUE ...'");
    SweepAxis a;
    a.key = trim(line.substr(0, eq));
    a.line = n;
    if (a.key.empty() || a.key.find_first_of(" \t") != std::string::npos || a.key.starts_with("-"))
      KVLAB_THROW(InvalidArgument, where + ": bad key '" + a.key + "' (a replay option name without dashes)");
    if (a.key == "out" || a.key == "help")
      KVLAB_THROW(InvalidArgument, where + ": key '" + a.key + "' cannot be swept");
    if (!seen.insert(a.key).second) KVLAB_THROW(InvalidArgument, where + ": key '" + a.key + "' given twice");
    std::stringstream vs(line.substr(eq + 1));
    for (std::string v; std::getline(vs, v, '|');) {
      v = trim(v);
      if (v.empty()) KVLAB_THROW(InvalidArgument, where + ": empty value for '" + a.key + "'");
      (void)split_args(v, where);  // quotes must balance
      a.values.push_back(v);
    }
    if (a.values.empty()) KVLAB_THROW(InvalidArgument, where + ": no value for '" + a.key + "'");
    if (a.key == "fixed" && a.values.size() != 1)
      KVLAB_THROW(InvalidArgument, where + ": 'fixed' takes one value (use | only for axes)");
    axes.push_back(std::move(a));
  }
  if (axes.empty()) KVLAB_THROW(InvalidArgument, file.string() + ": no axes in the sweep file");
  return axes;
}

std::vector<SweepPoint> expand_sweep(const std::vector<SweepAxis>& axes) {
  std::vector<SweepPoint> points(1);
  for (const SweepAxis& a : axes) {
    std::vector<SweepPoint> next;
    for (const SweepPoint& p : points)
      for (const std::string& v : a.values) {
        SweepPoint q = p;
        if (a.key != "fixed") q.params.emplace_back(a.key, v);
        const std::string where = "sweep axis '" + a.key + "'";
        if (a.key == "workload" || a.key == "fixed") {
          for (auto& arg : split_args(v, where)) q.args.push_back(arg);
        } else {
          q.args.push_back("--" + a.key);
          q.args.push_back(v);
        }
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  for (std::size_t i = 0; i < points.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "point-%04zu", i + 1);
    points[i].name = name;
  }
  return points;
}

std::string point_command(const SweepPoint& p, const fs::path& out, const fs::path& exe) {
  std::string cmd = shell_quote(exe.string()) + " replay";
  for (const auto& a : p.args) cmd += " " + shell_quote(a);
  cmd += " --no-progress --out " + shell_quote((out / p.name).string());
  return cmd;
}

int run_sweep(const std::vector<SweepPoint>& points, const fs::path& out, int jobs, const fs::path& exe,
              bool progress) {
  KVLAB_EXPECTS(jobs >= 1, "-j must be at least 1");
  fs::create_directories(out);
  std::vector<const SweepPoint*> todo;
  for (const SweepPoint& p : points) {
    fs::create_directories(out / p.name);
    const std::string command = point_command(p, out, exe);
    std::string saved;
    if (std::ifstream in(out / p.name / "command.txt"); in) std::getline(in, saved);
    // Done only if its results exist *for this command*: an edited sweep file reruns the points
    // whose command changed instead of keeping stale results under the new command.
    const bool done = saved == command && fs::exists(out / p.name / "compare.csv");
    if (!done) {
      fs::remove(out / p.name / "compare.csv");
      write_file_atomically(out / p.name / "command.txt", command + "\n");
      todo.push_back(&p);
    }
  }
  Progress bar("sweep", progress);
  std::map<pid_t, const SweepPoint*> running;
  std::size_t next = 0;
  int failed = 0, finished = 0;
  while (next < todo.size() || !running.empty()) {
    while (next < todo.size() && static_cast<int>(running.size()) < jobs) {
      const SweepPoint& p = *todo[next++];
      std::vector<std::string> argv = {exe.string(), "replay"};
      argv.insert(argv.end(), p.args.begin(), p.args.end());
      for (const char* a : {"--no-progress", "--out"}) argv.emplace_back(a);
      argv.push_back((out / p.name).string());
      const std::string stdout_file = (out / p.name / "stdout.txt").string();
      const std::string stderr_file = (out / p.name / "stderr.txt").string();
      const pid_t pid = fork();
      if (pid < 0) KVLAB_THROW(Error, "fork failed for " + p.name);
      if (pid == 0) {
        const int o = open(stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int e = open(stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o >= 0) dup2(o, 1);
        if (e >= 0) dup2(e, 2);
        std::vector<char*> cargv;
        for (auto& a : argv) cargv.push_back(a.data());
        cargv.push_back(nullptr);
        execv(cargv[0], cargv.data());
        _exit(127);
      }
      running.emplace(pid, &p);
    }
    int status = 0;
    const pid_t pid = wait(&status);
    if (pid < 0) break;
    const auto it = running.find(pid);
    if (it == running.end()) continue;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
    running.erase(it);
    bar.update(++finished, static_cast<std::int64_t>(todo.size()));
  }
  return failed;
}

void write_slurm_script(const std::vector<SweepPoint>& points, const fs::path& out, const fs::path& exe) {
  // The path goes into #SBATCH lines, which sbatch reads as words on one line: a newline there
  // would start a line of its own (a command), a space would split the option.
  const std::string path = out.string();
  const bool plain = std::none_of(path.begin(), path.end(), [](char c) {
    return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '"' || c == '\'';
  });
  KVLAB_EXPECTS(plain, "--slurm needs an --out path without spaces, quotes or control characters (it goes into #SBATCH lines)");
  fs::create_directories(out);
  std::ostringstream f;
  f << "#!/bin/bash\n"
    << "#SBATCH --job-name=kvlab-sweep\n"
    << "#SBATCH --array=1-" << points.size() << "\n"
    << "#SBATCH --output=" << (out / "slurm-%A_%a.out").string() << "\n"
    << "# One kvlab replay per array task; `kvlab collect " << out.string() << "` merges the results.\n"
    << "set -euo pipefail\n"
    << "case \"$SLURM_ARRAY_TASK_ID\" in\n";
  for (std::size_t i = 0; i < points.size(); ++i) {
    f << "  " << i + 1 << ") ";
    f << "mkdir -p " << shell_quote((out / points[i].name).string()) << " && " << point_command(points[i], out, exe)
      << " ;;\n";
  }
  f << "  *) echo \"no such point: $SLURM_ARRAY_TASK_ID\" >&2; exit 1 ;;\nesac\n";
  write_file_atomically(out / "sweep.sbatch", f.view());
}

int collect_sweep(const fs::path& out, const fs::path& csv) {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(out))
    if (e.is_directory() && e.path().filename().string().starts_with("point-")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  std::ostringstream f;
  int rows = 0;
  bool header = false;
  for (const fs::path& d : dirs) {
    std::ifstream in(d / "compare.csv");
    if (!in) continue;  // not run (yet), or failed: see its stderr.txt
    std::string command, head, line;
    std::getline(in, command);
    std::getline(in, head);
    if (!header) {
      f << "point,command," << head << "\n";
      header = true;
    }
    std::string cmd = command.size() > 2 ? command.substr(2) : "";
    std::string escaped;
    for (char c : cmd) escaped += c == '"' ? std::string("\"\"") : std::string(1, c);
    while (std::getline(in, line)) {
      f << d.filename().string() << ",\"" << escaped << "\"," << line << "\n";
      ++rows;
    }
  }
  write_file_atomically(csv, f.view());
  return rows;
}

}  // namespace kvlab
