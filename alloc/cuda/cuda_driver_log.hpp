#pragma once
// A CUDA driver table that writes one line per call — the entry, its arguments, what it wrote
// through its output pointers and the CUresult — and forwards to another table: the real driver
// or the double. `KVLAB_DRIVER_LOG=FILE` turns it on for every kvlab binary (cuda_driver() and
// `--device emulated` both return the logged table), so a GPU run that fails leaves the exact call
// sequence that made it fail.
#if !KVLAB_HAS_CUDA_HEADERS
#error "alloc/cuda/cuda_driver_log.hpp needs the CUDA toolkit headers; guard the include with KVLAB_HAS_CUDA_HEADERS"
#endif

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "alloc/cuda/cuda_driver.hpp"

namespace kvlab {

// Design note
//
// Rationale. The first GPU run failed inside the driver (every deallocation refused, synchronize
// answering CONTEXT_IS_DESTROYED) and left only kvlab's one-line error: not enough to tell a
// context-lifetime bug from a wrong argument. A log of every call, its arguments and its result
// makes the next run decisive by itself.
//
// Approach. The table holds plain function pointers, so each logged entry is a template
// instantiation that finds the active log through a process-wide pointer, calls the inner entry,
// then formats the arguments (integers in decimal, those of 2^32 or more and pointers in hex; for
// an output pointer to a number or handle, also the value written, "->value") and appends the line
// under a mutex, flushed at once: a crash right after a call still leaves that call in the file.
// Lines read `SECONDS THREAD name(arg, ...) = CUDA_RESULT (code)`; a header line starting with '#'
// names the process and each entry's ABI version.
//
// Limitations. One log at a time per process (a second throws InvalidArgument). Logging costs a
// format and a write per call: for diagnosis, not for timing runs. Structures passed by pointer
// (allocation properties, access descriptors) are logged by their few fields kvlab sets.
class CudaDriverLog {
 public:
  /// Opens `path` for appending and wraps `inner`; throws Error naming the path when it cannot be
  /// opened, InvalidArgument when another log is active.
  CudaDriverLog(const CudaDriverApi& inner, const std::string& path);
  ~CudaDriverLog();
  CudaDriverLog(const CudaDriverLog&) = delete;
  CudaDriverLog& operator=(const CudaDriverLog&) = delete;

  /// The logged table; valid while this object lives.
  [[nodiscard]] const CudaDriverApi& api() const noexcept;
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// Appends one free-form line ("# ..."), e.g. what kvlab is about to do.
  void note(const std::string& text);

  /// Writes a call line (used by the logged entries).
  void write_line(const std::string& line);
  [[nodiscard]] const CudaDriverApi& inner() const noexcept { return inner_; }

 private:
  const CudaDriverApi& inner_;
  std::string path_;
  std::FILE* file_ = nullptr;
  std::mutex mutex_;
};

/// `api` itself, or — when the environment variable KVLAB_DRIVER_LOG names a file — a logged table
/// over it that lives until the process exits (one per process: the first table asked for is the
/// one logged; a later, different table is returned unlogged). Throws Error when the file cannot be
/// opened.
[[nodiscard]] const CudaDriverApi& logged_if_requested(const CudaDriverApi& api);

}  // namespace kvlab
