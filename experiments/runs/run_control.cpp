#include "experiments/runs/run_control.hpp"

#include <csignal>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "alloc/core/error.hpp"
#include "serving/support/atomic_file.hpp"

namespace kvlab {

namespace fs = std::filesystem;

namespace {

/// The holder's line in a lock file ("pid N: COMMAND"), or a stand-in when it has not written it yet.
std::string read_holder(int fd) {
  char buf[4096];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  if (const auto nl = s.find('\n'); nl != std::string::npos) s.erase(nl);
  return s.empty() ? "another kvlab process" : s;
}

/// Opens and locks DIR/.kvlab.lock; -1 with `holder` set when another process holds it. The file
/// may be unlinked by its previous holder between our open and our flock: then we hold a lock on
/// a file nobody else will open, so we check that the path still names our file and retry if not.
int try_lock(const fs::path& file, std::string& holder) {
  for (;;) {
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw Error("cannot create the lock file " + file.string() + ": " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK) holder = read_holder(fd);
      ::close(fd);
      if (err == EWOULDBLOCK) return -1;
      throw Error("cannot lock " + file.string() + ": " + std::strerror(err));
    }
    struct stat held {
    }, named{};
    if (::fstat(fd, &held) == 0 && ::stat(file.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev)
      return fd;
    ::close(fd);  // unlinked under us: lock the new file
  }
}

}  // namespace

namespace {
/// Removes the temporaries (NAME.tmp.PID, serving/support/atomic_file.cpp) that a kvlab process killed
/// outright left in `dir` and the folders directly in it, when that PID runs no more: nothing ever
/// names them, and they can be large (a 10 MB steps.csv.tmp after a closed terminal).
void remove_dead_temporaries(const fs::path& dir) {
  std::error_code ec;
  const auto sweep = [&](const fs::path& d) {
    for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const auto at = name.rfind(".tmp.");
      if (at == std::string::npos || !it->is_regular_file(ec)) continue;
      const std::string digits = name.substr(at + 5);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
      const pid_t pid = static_cast<pid_t>(std::stol(digits));
      if (::kill(pid, 0) != 0 && errno == ESRCH) fs::remove(it->path(), ec);
    }
  };
  sweep(dir);
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec) && !it->is_symlink(ec)) sweep(it->path());
}
}  // namespace

OutputLock::OutputLock(const fs::path& dir, const std::string& command) : file_(dir / kLockFile) {
  std::string holder;
  fd_ = try_lock(file_, holder);
  if (fd_ < 0)
    throw Error(dir.string() + " is in use by another kvlab run (" + holder +
                "); wait for it to finish or choose another --out");
  remove_dead_temporaries(dir);  // ours alone now: no live kvlab writes here but through this lock
  std::string line = "pid " + std::to_string(::getpid()) + ": " + command;
  for (char& c : line)
    if (c == '\n') c = ' ';
  line += "\n";
  // Not through write_file_atomically: the lock file is not a result (and not counted by the
  // injected-full-disk hook); a failure to record the holder only makes the message vaguer.
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, line.data(), line.size(), 0);
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  ::unlink(file_.c_str());  // while still locked: a waiting opener retries on the new file
  ::close(fd_);
}

std::optional<std::string> lock_holder(const fs::path& dir) {
  const fs::path file = dir / kLockFile;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> holder;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) holder = read_holder(fd);
  } else {
    ::flock(fd, LOCK_UN);
  }
  ::close(fd);
  return holder;
}

// ---- completion marker -------------------------------------------------------------------------------

void remove_completion_marker(const fs::path& dir) {
  std::error_code ec;
  fs::remove(dir / kMarkerFile, ec);
  if (ec) throw Error("cannot remove " + (dir / kMarkerFile).string() + ": " + ec.message());
}

void write_completion_marker(const fs::path& dir, const std::string& command, const std::vector<std::string>& files) {
  nlohmann::ordered_json j;
  j["complete"] = true;
  j["command"] = command;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const std::string& f : files) {
    std::error_code ec;
    const auto bytes = fs::file_size(dir / f, ec);
    if (ec) throw Error("cannot record " + (dir / f).string() + " in the completion marker: " + ec.message());
    list.push_back({{"path", f}, {"bytes", bytes}});
  }
  j["files"] = list;
  write_file_atomically(dir / kMarkerFile, j.dump(2) + "\n");
}

std::string completion_problem(const fs::path& dir) {
  std::ifstream in(dir / kMarkerFile);
  if (!in) return "no completion marker (" + std::string(kMarkerFile) + ")";
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("complete", false) != true || !j.contains("files") || !j["files"].is_array())
    return std::string(kMarkerFile) + " is not a valid completion marker";
  for (const auto& f : j["files"]) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_unsigned())
      return std::string(kMarkerFile) + " is not a valid completion marker";
    const std::string path = f["path"].get<std::string>();
    std::error_code ec;
    const auto bytes = fs::file_size(dir / path, ec);
    if (ec) return path + " is missing (named by " + kMarkerFile + ")";
    if (bytes != f["bytes"].get<std::uintmax_t>())
      return path + " has " + std::to_string(bytes) + " bytes, " + kMarkerFile + " says " +
             std::to_string(f["bytes"].get<std::uintmax_t>());
  }
  return "";
}

// ---- interrupts -----------------------------------------------------------------------------------------

namespace {
volatile std::sig_atomic_t g_signal = 0;
/// The first signal asks for a clean stop at the next step boundary; a second one stops at once
/// (the default action), so a run that never reaches a boundary can still be stopped with Ctrl-C.
extern "C" void on_interrupt(int sig) {
  if (g_signal != 0) {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_signal = sig;
}
}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a parent blocked in wait() wakes up with EINTR
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);  // a closed terminal: stop as cleanly as Ctrl-C (exit 129)
}

int interrupt_signal() noexcept { return g_signal; }

void throw_if_interrupted() {
  if (const int s = g_signal; s != 0) throw Interrupted(s);
}

}  // namespace kvlab
