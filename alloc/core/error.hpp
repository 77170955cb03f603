#pragma once
// kvlab's error vocabulary, in the style of RAPIDS RMM: every failure carries the file:line that
// raised it; running out of memory is its own type because callers (the replayer above all) treat
// it as an expected value to count, never as a reason to abort.
#include <stdexcept>
#include <string>

namespace kvlab {

/// Any kvlab failure. what() reads "kvlab error at FILE:LINE: message". what() is a C string, so
/// a NUL the message quotes (a trace field, a file name) is kept as the text "\x00": the rest of
/// the message, which names the problem, is never cut off.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what);
  explicit Error(const char* what) : std::runtime_error(what) {}
};

/// A request for memory (bytes, blocks, pages, a reservation) that capacity cannot satisfy.
/// Whoever throws it must leave its state exactly as it was before the call.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

/// A caller broke a documented precondition (bad argument, unknown name, misuse of the API).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// A limit of the operating system, not of the KV capacity, stopped the backend (the kernel's
/// vm.max_map_count for host vmm mappings). Deliberately not a kvlab::Error: no caller treats it
/// as out of memory or as one failed request; the run stops with the message.
class SystemLimit : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A CUDA runtime or driver call failed; the message names the call and the error (e.g. cudaErrorInvalidValue).
class CudaError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[nodiscard]] std::string located(const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace kvlab

#define KVLAB_STRINGIFY_DETAIL(x) #x
#define KVLAB_STRINGIFY(x) KVLAB_STRINGIFY_DETAIL(x)

/// Throw `ExceptionType` with a message that carries this file:line.
#define KVLAB_THROW(ExceptionType, msg) throw ExceptionType(::kvlab::detail::located(__FILE__, __LINE__, (msg)))

/// Precondition check: throws kvlab::InvalidArgument naming the failed condition.
#define KVLAB_EXPECTS(cond, msg)                                                           \
  do {                                                                                     \
    if (!(cond)) KVLAB_THROW(::kvlab::InvalidArgument, std::string(msg) + " [" #cond "]"); \
  } while (0)

/// Internal invariant check: throws kvlab::Error; a failure here is a kvlab bug.
#define KVLAB_ASSERT(cond)                                                           \
  do {                                                                               \
    if (!(cond)) KVLAB_THROW(::kvlab::Error, "internal invariant violated: " #cond); \
  } while (0)
