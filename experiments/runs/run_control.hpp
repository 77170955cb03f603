#pragma once
// What makes a run's output directory trustworthy (issue 15, "Results you can trust"):
//
//  * OutputLock: one run per --out at a time. An exclusive flock(2) on DIR/.kvlab.lock, taken
//    before any file is written and held until the process ends; a second run into the same
//    directory fails at once naming the directory and the holder (its pid and command). The kernel
//    drops the lock when the holder dies, however it dies, so a crash never leaves a directory
//    locked; the file itself is removed on a normal exit (and stays, unlocked, after a crash).
//  * The completion marker DIR/complete.json, written last (atomically) once every result file is
//    complete. It names the command and every file with its size; a directory is a finished run
//    only if the marker is there and every file it names has that size. A new run into the same
//    directory removes the old marker first, so an interrupted re-run never looks complete.
//    `kvlab sweep` (resume) and `kvlab collect` trust nothing else.
//  * Interrupts: SIGINT/SIGTERM set a flag; long work checks it at step boundaries
//    (throw_if_interrupted) and unwinds; kvlab then exits 128+signal (130, 143) printing one line,
//    "interrupted". Temporary files are never left: every file is written whole (atomic_file.hpp).
//    A second signal before the first is acted on stops the process at once (the signal's default
//    action): a run stuck short of a boundary can still be stopped; what it left is cleaned up by
//    the next run that takes the --out lock.
#include <csignal>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvlab {

// ---- the lock ------------------------------------------------------------------------------------

inline constexpr const char* kLockFile = ".kvlab.lock";

class OutputLock {
 public:
  /// Locks `dir` (which must exist) for `command`. Throws kvlab::Error "DIR is in use by another
  /// kvlab run (pid N: COMMAND); ..." when another process holds it.
  OutputLock(const std::filesystem::path& dir, const std::string& command);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  std::filesystem::path file_;
  int fd_ = -1;
};

/// "pid N: COMMAND" of the process holding `dir`'s lock; nullopt when nobody holds it.
[[nodiscard]] std::optional<std::string> lock_holder(const std::filesystem::path& dir);

// ---- the completion marker -------------------------------------------------------------------------

inline constexpr const char* kMarkerFile = "complete.json";

/// Removes DIR/complete.json (before a run writes anything into DIR).
void remove_completion_marker(const std::filesystem::path& dir);
/// Writes DIR/complete.json naming `command` and `files` (relative to DIR) with their sizes now.
void write_completion_marker(const std::filesystem::path& dir, const std::string& command,
                             const std::vector<std::string>& files);
/// Empty when DIR/complete.json exists, parses and every file it names has its recorded size;
/// otherwise why not ("no completion marker", "compare.csv has 0 bytes, the marker says 512", ...).
[[nodiscard]] std::string completion_problem(const std::filesystem::path& dir);
[[nodiscard]] inline bool is_complete(const std::filesystem::path& dir) { return completion_problem(dir).empty(); }

// ---- interrupts --------------------------------------------------------------------------------------

/// Thrown at a step boundary after SIGINT or SIGTERM; kvlab exits 128 + signal.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int signal) : std::runtime_error("interrupted"), signal_(signal) {}
  [[nodiscard]] int signal() const noexcept { return signal_; }

 private:
  int signal_;
};

/// Installs the SIGINT/SIGTERM handlers (without SA_RESTART: a blocking wait() returns EINTR).
void install_interrupt_handlers();
/// The signal received (SIGINT, SIGTERM), or 0.
[[nodiscard]] int interrupt_signal() noexcept;
/// Throws Interrupted when a signal arrived.
void throw_if_interrupted();

}  // namespace kvlab
