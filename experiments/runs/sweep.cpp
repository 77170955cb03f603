#include "experiments/runs/sweep.hpp"

#include "serving/support/input_file.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "alloc/core/error.hpp"
#include "serving/support/atomic_file.hpp"
#include "serving/support/csv.hpp"
#include "serving/support/progress.hpp"
#include "serving/report/report.hpp"
#include "experiments/runs/run_control.hpp"
#include "serving/support/shell.hpp"
#include "serving/support/text.hpp"

namespace kvlab {

namespace fs = std::filesystem;

std::vector<std::string> split_args(const std::string& s, const std::string& where) {
  std::vector<std::string> out;
  std::string cur;
  bool have = false;
  char quote = 0;
  for (char c : s) {
    if (quote) {
      if (c == quote)
        quote = 0;
      else
        cur += c;
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
  check_small_input_file(file, "a sweep file", std::uintmax_t{1} << 20);  // 1 MiB: a grid of a few axes
  std::ifstream in(file);
  if (!in) KVLAB_THROW(InvalidArgument, file.string() + ": cannot read the sweep file");
  return parse_sweep(in, file.string());
}

std::vector<SweepAxis> parse_sweep(std::istream& in, const std::string& source) {
  std::vector<SweepAxis> axes;
  std::set<std::string> seen;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string where = source + ":" + std::to_string(n);
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
  if (axes.empty()) KVLAB_THROW(InvalidArgument, source + ": no axes in the sweep file");
  return axes;
}

std::vector<SweepPoint> expand_sweep(const std::vector<SweepAxis>& axes) {
  // The grid is the product of the axes: checked before any point exists (ten axes of ten values
  // would be ten billion points).
  std::size_t total = 1;
  std::string shape;
  for (const SweepAxis& a : axes) {
    shape += (shape.empty() ? "" : " x ") + std::to_string(a.values.size());
    total =
        a.values.empty() || total > kMaxSweepPoints / a.values.size() ? kMaxSweepPoints + 1 : total * a.values.size();
  }
  if (total > kMaxSweepPoints)
    KVLAB_THROW(InvalidArgument,
                fmt::format("the sweep's grid ({} values) has more than {} points", shape, kMaxSweepPoints));
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

namespace {

/// The points still to run: not complete for their command (experiments/runs/run_control.hpp). Throws
/// when a point's directory is locked by a replay still running (a child of an earlier sweep).
std::vector<const SweepPoint*> points_to_run(const std::vector<SweepPoint>& points, const fs::path& out,
                                             const fs::path& exe) {
  std::vector<const SweepPoint*> todo;
  for (const SweepPoint& p : points) {
    const fs::path dir = out / p.name;
    fs::create_directories(dir);
    if (const auto holder = lock_holder(dir))
      KVLAB_THROW(Error, dir.string() + " is still being run by an earlier sweep's replay (" + *holder +
                             "); wait for it to finish or kill it");
    const std::string command = point_command(p, out, exe);
    std::string saved;
    if (std::ifstream in(dir / "command.txt"); in) std::getline(in, saved);
    // Done only if its results exist and are complete *for this command*: an edited sweep file
    // reruns the points whose command changed instead of keeping stale results under the new
    // command, and a point without its completion marker (killed, out of disk) is redone.
    if (saved == command && is_complete(dir)) continue;
    remove_completion_marker(dir);
    fs::remove(dir / "compare.csv");
    write_file_atomically(dir / "command.txt", command + "\n");
    todo.push_back(&p);
  }
  return todo;
}

/// A running point: its process group, and its stderr as read so far from the pipe it writes to.
/// The sweep keeps the text and writes stderr.txt itself when the point ends, so a point that
/// failed on a full disk still has its message told (on the sweep's stderr) when stderr.txt cannot
/// hold it.
struct RunningPoint {
  const SweepPoint* point = nullptr;
  int stderr_fd = -1;  ///< the read end, non-blocking
  std::string stderr_text;
};

/// Most of a point's stderr the sweep keeps (a point runs with --no-progress: its stderr is a few
/// warning or error lines); past it, the rest is counted, not kept.
constexpr std::size_t kMaxPointStderr = std::size_t{1} << 20;

/// Reads what the point wrote to stderr since the last call (all of it once the point ended).
void drain_stderr(RunningPoint& r) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(r.stderr_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // EAGAIN (nothing yet), EOF, or an error: nothing more to read now
    const std::size_t room = kMaxPointStderr - std::min(kMaxPointStderr, r.stderr_text.size());
    r.stderr_text.append(buf, std::min(room, static_cast<std::size_t>(n)));
  }
}

/// Forks `kvlab replay` for one point, in a process group of its own that dies with the parent;
/// its stdout goes to stdout.txt, its stderr into a pipe the sweep reads.
std::pair<pid_t, RunningPoint> spawn_point(const SweepPoint& p, const fs::path& out, const fs::path& exe) {
  std::vector<std::string> argv = {exe.string(), "replay"};
  argv.insert(argv.end(), p.args.begin(), p.args.end());
  for (const char* a : {"--no-progress", "--out"}) argv.emplace_back(a);
  argv.push_back((out / p.name).string());
  const std::string stdout_file = (out / p.name / "stdout.txt").string();
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) KVLAB_THROW(Error, "pipe failed for " + p.name + ": " + std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    KVLAB_THROW(Error, "fork failed for " + p.name);
  }
  if (pid == 0) {
    ::setpgid(0, 0);                      // the terminal's Ctrl-C reaches the parent, which stops us
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);   // a parent killed outright (SIGKILL) still stops us
    if (::getppid() != parent) _exit(1);  // it died before prctl
    const int o = open(stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o >= 0) dup2(o, 1);
    dup2(pipe_fds[1], 2);  // dup2 clears O_CLOEXEC on the copy
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  ::setpgid(pid, pid);  // also here, so a kill right after fork reaches the group
  ::close(pipe_fds[1]);
  ::fcntl(pipe_fds[0], F_SETFL, ::fcntl(pipe_fds[0], F_GETFL) | O_NONBLOCK);
  return {pid, RunningPoint{&p, pipe_fds[0], {}}};
}

/// The last non-empty line of `text`.
std::string last_line(const std::string& text) {
  const std::size_t end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const std::size_t newline = text.rfind('\n', end);
  const std::size_t start = newline == std::string::npos ? 0 : newline + 1;
  return text.substr(start, end + 1 - start);
}

/// A point ended: the rest of its stderr read, stderr.txt written, and a failed point told on the
/// sweep's stderr with its last line, and with stderr.txt's own failure when it could not be written
/// (a full disk: the message would be lost otherwise).
void finish_point(RunningPoint& r, const fs::path& out, bool failed, int status, Progress& bar) {
  drain_stderr(r);
  ::close(r.stderr_fd);
  std::string write_error;
  try {
    write_file_atomically(out / r.point->name / "stderr.txt", r.stderr_text);
  } catch (const std::exception& e) {
    write_error = e.what();
  }
  if (!failed && write_error.empty()) return;
  std::string how = WIFEXITED(status)     ? fmt::format("exit status {}", WEXITSTATUS(status))
                    : WIFSIGNALED(status) ? fmt::format("signal {}", WTERMSIG(status))
                                          : "stopped";
  std::string line = fmt::format("kvlab sweep: {} {} ({})", r.point->name, failed ? "failed" : "finished", how);
  if (const std::string last = last_line(r.stderr_text); !last.empty()) line += ": " + last;
  if (!write_error.empty()) line += fmt::format(" [its stderr.txt could not be written: {}]", write_error);
  bar.note(line);
}

/// SIGTERM to every running point (each stops at its next step boundary), then waits for them all.
void stop_children(std::map<pid_t, RunningPoint>& running) {
  for (const auto& [pid, r] : running) ::kill(-pid, SIGTERM);
  for (auto& [pid, r] : running) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ::close(r.stderr_fd);
  }
}

/// Waits for a point to end: its pid (status set), -1 when none runs, 0 when a signal arrived.
/// Polls (every 20 ms) rather than blocking in wait(), so a signal that lands just before the
/// wait cannot leave the sweep waiting for a long point.
pid_t wait_for_point(int& status, std::map<pid_t, RunningPoint>& running) {
  for (;;) {
    for (auto& [pid, r] : running) drain_stderr(r);  // a full pipe would stall the point
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid != 0 || interrupt_signal() != 0) return pid;
    ::usleep(20000);
  }
}

}  // namespace

int run_sweep(const std::vector<SweepPoint>& points, const fs::path& out, int jobs, const fs::path& exe,
              bool progress) {
  KVLAB_EXPECTS(jobs >= 1, "-j must be at least 1");
  fs::create_directories(out);
  const std::vector<const SweepPoint*> todo = points_to_run(points, out, exe);
  Progress bar("sweep", progress);
  std::map<pid_t, RunningPoint> running;
  std::size_t next = 0;
  int failed = 0, finished = 0;
  while (next < todo.size() || !running.empty()) {
    while (interrupt_signal() == 0 && next < todo.size() && static_cast<int>(running.size()) < jobs) {
      const SweepPoint& p = *todo[next++];
      running.emplace(spawn_point(p, out, exe));
    }
    int status = 0;
    const pid_t pid = interrupt_signal() != 0 ? 0 : wait_for_point(status, running);
    if (interrupt_signal() != 0) {  // SIGINT/SIGTERM: stop the points, leave them unmarked, resume later
      if (const auto it = running.find(pid); pid > 0 && it != running.end()) {
        ::close(it->second.stderr_fd);
        running.erase(it);
      }
      stop_children(running);
      throw_if_interrupted();
    }
    if (pid <= 0) break;  // no child left to wait for (cannot happen while `running` is not empty)
    const auto it = running.find(pid);
    if (it == running.end()) continue;
    const bool point_failed =
        !WIFEXITED(status) || WEXITSTATUS(status) != 0 || !is_complete(out / it->second.point->name);
    failed += point_failed;
    finish_point(it->second, out, point_failed, status, bar);
    running.erase(it);
    bar.update(++finished, static_cast<std::int64_t>(todo.size()));
  }
  return failed;
}

namespace {
/// One word sbatch reads whole: no spaces, quotes or control characters (nor backslashes, for values).
bool plain_word(const std::string& s, bool backslash_ok = false) {
  return std::none_of(s.begin(), s.end(), [&](char c) {
    return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '"' || c == '\'' || (c == '\\' && !backslash_ok);
  });
}

/// A point is complete when its recorded command is this one and its completion marker is valid.
bool point_complete(const SweepPoint& p, const fs::path& out, const fs::path& exe) {
  std::string saved;
  if (std::ifstream in(out / p.name / "command.txt"); in) std::getline(in, saved);
  return saved == point_command(p, out, exe) && is_complete(out / p.name);
}
}  // namespace

void validate_slurm_out(const fs::path& out) {
  const std::string path = out.string();
  // The path goes into #SBATCH lines, which sbatch reads as words on one line (a newline would
  // start a line of its own, a space would split the option), and into --output, where Slurm
  // expands '%' patterns and '\\' escapes; '#' starts a comment in the script's commands; a
  // leading '-' reads as an option to mkdir and kvlab.
  if (!plain_word(path) || path.find_first_of("%#\\") != std::string::npos)
    KVLAB_THROW(InvalidArgument, "--out '" + path +
                                     "': --slurm needs a path without spaces, quotes, control characters, '%', '#' or "
                                     "'\\' (it goes into #SBATCH lines)");
  if (path.starts_with("-"))
    KVLAB_THROW(InvalidArgument,
                "--out '" + path + "': --slurm needs a path that does not start with '-' (write ./" + path + ")");
}

void validate_slurm_options(const SlurmOptions& o) {
  for (const auto& [name, value] :
       {std::pair{"--time", &o.time}, std::pair{"--mem", &o.mem}, std::pair{"--gres", &o.gres},
        std::pair{"--partition", &o.partition}, std::pair{"--account", &o.account}})
    if (!value->empty() && !plain_word(*value))
      KVLAB_THROW(InvalidArgument, std::string(name) + " '" + *value +
                                       "': a Slurm value must be one word without spaces, quotes, backslashes or "
                                       "control characters (it goes into an #SBATCH line)");
}

std::size_t write_slurm_script(const std::vector<SweepPoint>& points, const fs::path& out, const fs::path& exe,
                               const SlurmOptions& options) {
  validate_slurm_out(out);
  validate_slurm_options(options);
  fs::create_directories(out);
  std::vector<std::size_t> todo;  // 1-based task ids of the points still to run
  for (std::size_t i = 0; i < points.size(); ++i)
    if (!point_complete(points[i], out, exe)) todo.push_back(i + 1);
  if (todo.empty()) {  // a script left from an earlier call would rerun finished points
    fs::remove(out / "sweep.sbatch");
    return 0;
  }
  std::ostringstream f;
  f << "#!/bin/bash\n#SBATCH --job-name=kvlab-sweep\n#SBATCH --array=";
  for (std::size_t k = 0; k < todo.size(); ++k) f << (k ? "," : "") << todo[k];
  f << "\n#SBATCH --output=" << (out / "slurm-%A_%a.out").string() << "\n";
  for (const auto& [name, value] :
       {std::pair{"time", &options.time}, std::pair{"mem", &options.mem}, std::pair{"gres", &options.gres},
        std::pair{"partition", &options.partition}, std::pair{"account", &options.account}})
    if (!value->empty()) f << "#SBATCH --" << name << "=" << *value << "\n";
  f << "# One kvlab replay per array task (points already complete are left out); `kvlab collect " << out.string()
    << "` merges the results.\n"
    << "set -euo pipefail\n"
    << "case \"$SLURM_ARRAY_TASK_ID\" in\n";
  for (const std::size_t id : todo) {
    const SweepPoint& p = points[id - 1];
    const std::string dir = shell_quote((out / p.name).string());
    f << "  " << id << ") mkdir -p " << dir << " && printf '%s\\n' " << shell_quote(point_command(p, out, exe)) << " > "
      << dir << "/command.txt && " << point_command(p, out, exe) << " ;;\n";
  }
  f << "  *) echo \"no such point: $SLURM_ARRAY_TASK_ID\" >&2; exit 1 ;;\nesac\n";
  write_file_atomically(out / "sweep.sbatch", f.view());
  return todo.size();
}

void write_sweep_grid(const std::vector<SweepPoint>& points, const fs::path& out) {
  nlohmann::ordered_json j;
  j["axes"] = nlohmann::ordered_json::array();
  if (!points.empty())
    for (const auto& [key, value] : points.front().params) j["axes"].push_back(key);
  j["points"] = nlohmann::ordered_json::array();
  for (const SweepPoint& p : points) {
    nlohmann::ordered_json values = nlohmann::ordered_json::array();
    for (const auto& [key, value] : p.params) values.push_back(value);
    j["points"].push_back({{"name", p.name}, {"values", values}});
  }
  write_file_atomically(out / kGridFile, j.dump(1) + "\n");
}

namespace {

/// The grid a sweep recorded (OUT/sweep-grid.json): axis keys, and each point's values.
struct Grid {
  std::vector<std::string> axes;
  std::vector<std::pair<std::string, std::vector<std::string>>> points;
};

std::optional<Grid> read_grid(const fs::path& out) {
  std::ifstream in(out / kGridFile);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  const auto bad = [&] { return InvalidArgument((out / kGridFile).string() + ": not a sweep grid file"); };
  if (!j.is_object() || !j.contains("axes") || !j["axes"].is_array() || !j.contains("points") ||
      !j["points"].is_array())
    throw bad();
  Grid g;
  try {
    g.axes = j["axes"].get<std::vector<std::string>>();
    for (const auto& p : j["points"]) {
      g.points.emplace_back(p.at("name").get<std::string>(), p.at("values").get<std::vector<std::string>>());
      if (g.points.back().second.size() != g.axes.size()) throw bad();
    }
  } catch (const nlohmann::json::exception&) {
    throw bad();
  }
  return g;
}

/// One finished point's compare.csv: its command, columns and rows.
struct PointTable {
  std::string name, command;
  std::vector<std::string> values;  ///< the point's axis values (empty without a grid)
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
};

PointTable read_point_table(const fs::path& dir) {
  PointTable t;
  std::ifstream in(dir / "compare.csv");
  std::string head, line;
  std::getline(in, head);
  if (head.starts_with("# ")) {  // written before run.json existed: the command was compare.csv's first line
    t.command = head.substr(2);
    std::getline(in, head);
  } else {
    std::ifstream run(dir / "run.json");
    const auto j = nlohmann::json::parse(run, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("command") && j["command"].is_string()) t.command = j["command"].get<std::string>();
  }
  // Fields are read unquoted (support/csv.hpp) and quoted again where they need it when merged.
  int n = 1;
  const auto fields = [&](const std::string& text) {
    try {
      return csv_fields(text);
    } catch (const CsvError& e) {
      throw CsvError("compare.csv line " + std::to_string(n) + ": " + e.what());
    }
  };
  t.columns = fields(head);
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty()) t.rows.push_back(fields(line));
  }
  return t;
}

/// The merged CSV: point, one column per axis, command, then the union of the points' columns
/// (by name; empty where a point's compare.csv has no such column, e.g. another backend's counters).
std::string merge_tables(const std::vector<std::string>& axes, const std::vector<PointTable>& tables, int& rows) {
  std::vector<std::string> columns;
  std::map<std::string, std::size_t> index;
  for (const PointTable& t : tables)
    for (const std::string& c : t.columns)
      if (index.emplace(c, columns.size()).second) columns.push_back(c);
  std::ostringstream f;
  f << "point";
  for (const std::string& a : axes) f << ",axis_" << csv_field(a);
  f << ",command";
  for (const std::string& c : columns) f << ',' << csv_field(c);
  f << '\n';
  for (const PointTable& t : tables)
    for (const auto& r : t.rows) {
      std::vector<std::string> out(columns.size());
      for (std::size_t i = 0; i < r.size() && i < t.columns.size(); ++i) out[index.at(t.columns[i])] = r[i];
      f << t.name;
      for (const std::string& v : t.values) f << ',' << csv_field(v);
      f << ',' << csv_field(t.command);
      for (const std::string& v : out) f << ',' << csv_field(v);
      f << '\n';
      ++rows;
    }
  return f.str();
}

}  // namespace

Collected collect_sweep(const fs::path& out) {
  Collected c;
  const std::optional<Grid> grid = read_grid(out);
  std::vector<std::pair<std::string, std::vector<std::string>>> wanted;
  std::set<std::string> in_grid;
  if (grid) {
    wanted = grid->points;
    for (const auto& [name, values] : wanted) in_grid.insert(name);
  }
  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(out))
    if (e.is_directory() && e.path().filename().string().starts_with("point-")) dirs.push_back(e.path().filename());
  std::sort(dirs.begin(), dirs.end());
  for (const std::string& d : dirs) {
    if (!grid)
      wanted.emplace_back(d, std::vector<std::string>{});
    else if (!in_grid.contains(d))
      c.skipped.push_back(d + ": not a point of the current grid (" + kGridFile + ")");
  }
  std::vector<PointTable> tables;
  for (const auto& [name, values] : wanted) {
    if (const std::string why = completion_problem(out / name); !why.empty()) {
      c.skipped.push_back(name + ": " + why);
      continue;
    }
    try {
      tables.push_back(read_point_table(out / name));
    } catch (const CsvError& e) {
      c.skipped.push_back(name + ": " + e.what());
      continue;
    }
    tables.back().name = name;
    tables.back().values = values;
  }
  c.csv = merge_tables(grid ? grid->axes : std::vector<std::string>{}, tables, c.rows);
  return c;
}

void check_collect_output(const fs::path& out, const fs::path& csv) {
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(out, ec);
  const fs::path file = fs::weakly_canonical(fs::absolute(csv, ec), ec);
  const fs::path rel = file.lexically_relative(base);
  if (rel.empty() || *rel.begin() == "..") return;
  if (const std::string first = rel.begin()->string(); first.starts_with("point-") && ++rel.begin() != rel.end())
    KVLAB_THROW(InvalidArgument, "CSV " + csv.string() + " is inside the sweep point " + first +
                                     " (it would replace that point's results); write it elsewhere");
}

}  // namespace kvlab
