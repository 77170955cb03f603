// Compiled in every build; the body exists only where the CUDA toolkit headers were found.
#if KVLAB_HAS_CUDA_HEADERS
#include "alloc/cuda/cuda_driver_log.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "alloc/core/error.hpp"

namespace kvlab {

namespace {

std::atomic<CudaDriverLog*> g_log{nullptr};
std::chrono::steady_clock::time_point g_start;

int thread_number() {
  static std::atomic<int> next{0};
  thread_local const int number = next++;
  return number;
}

std::string hex(unsigned long long value) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", value);
  return buf;
}

template <class T>
void put_arg(std::string& s, const T& v, bool ok);

template <class P>
void put_pointee(std::string& s, const P& v, bool ok) {
  if constexpr (std::is_same_v<P, CUmemAllocationProp>) {
    s += "{type=" + std::to_string(v.type) + ", location=" + std::to_string(v.location.type) + ":" +
         std::to_string(v.location.id) + "}";
  } else if constexpr (std::is_same_v<P, CUmemAccessDesc>) {
    s += "{location=" + std::to_string(v.location.type) + ":" + std::to_string(v.location.id) +
         ", flags=" + std::to_string(v.flags) + "}";
  } else if constexpr (std::is_same_v<P, CUmemLocation>) {
    s += "{" + std::to_string(v.type) + ":" + std::to_string(v.id) + "}";
  } else if constexpr (std::is_same_v<P, const char*>) {
    if (ok) s += std::string("->\"") + (v != nullptr ? v : "(null)") + "\"";
  } else if constexpr (std::is_arithmetic_v<P> || std::is_enum_v<P> || std::is_pointer_v<P>) {
    if (ok) {
      s += "->";
      put_arg(s, v, ok);
    }
  }
}

template <class T>
void put_arg(std::string& s, const T& v, bool ok) {
  if constexpr (std::is_enum_v<T>) {
    s += std::to_string(static_cast<long long>(v));
  } else if constexpr (std::is_same_v<T, char*>) {  // cuDeviceGetName's buffer: the name written
    s += hex(reinterpret_cast<std::uintptr_t>(v));
    if (ok && v != nullptr) s += std::string("->\"") + v + "\"";
  } else if constexpr (std::is_pointer_v<T>) {
    s += hex(reinterpret_cast<std::uintptr_t>(v));
    using P = std::remove_cv_t<std::remove_pointer_t<T>>;
    if constexpr (!std::is_void_v<P> && !std::is_function_v<P> && !std::is_class_v<P>) {
      if (v != nullptr) put_pointee<P>(s, *v, ok);
    } else if constexpr (std::is_same_v<P, CUmemAllocationProp> || std::is_same_v<P, CUmemAccessDesc> ||
                         std::is_same_v<P, CUmemLocation>) {
      if (v != nullptr) put_pointee<P>(s, *v, ok);
    }
  } else if constexpr (std::is_integral_v<T>) {
    if constexpr (std::is_unsigned_v<T>) {
      s += static_cast<unsigned long long>(v) >= (1ULL << 32) ? hex(v) : std::to_string(v);  // addresses, handles
    } else {
      s += std::to_string(v);
    }
  }
}

template <class Name, auto Member, class Fn>
struct Logged;

template <class Name, auto Member, class... Args>
struct Logged<Name, Member, CUresult(CUDAAPI*)(Args...)> {
  static CUresult CUDAAPI call(Args... args) {
    CudaDriverLog* log = g_log.load(std::memory_order_acquire);
    if (log == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
    const auto fn = log->inner().*Member;
    if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
    const CUresult r = fn(args...);
    try {
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
      char head[48];
      std::snprintf(head, sizeof head, "%.6f %d ", t, thread_number());
      std::string line = std::string(head) + Name::value + "(";
      [[maybe_unused]] bool first = true;
      ((line += first ? "" : ", ", first = false, put_arg(line, args, r == CUDA_SUCCESS)), ...);
      const char* name = cu_result_name(r);
      line +=
          ") = " + std::string(name != nullptr ? name : "CUresult") + " (" + std::to_string(static_cast<int>(r)) + ")";
      log->write_line(line);
    } catch (...) {  // a log that cannot be written never changes what the driver answered
    }
    return r;
  }
};

#define KVLAB_LOG_NAME(name, abi)               \
  struct LogName_##name {                       \
    static constexpr const char* value = #name; \
  };
KVLAB_CUDA_DRIVER_ENTRIES(KVLAB_LOG_NAME)
#undef KVLAB_LOG_NAME

const CudaDriverApi& logged_table() {
  static const CudaDriverApi table = [] {
    CudaDriverApi api;
#define KVLAB_LOG_ENTRY(name, abi) \
  api.name = &Logged<LogName_##name, &CudaDriverApi::name, decltype(CudaDriverApi::name)>::call;
    KVLAB_CUDA_DRIVER_ENTRIES(KVLAB_LOG_ENTRY)
#undef KVLAB_LOG_ENTRY
    return api;
  }();
  return table;
}

}  // namespace

CudaDriverLog::CudaDriverLog(const CudaDriverApi& inner, const std::string& path) : inner_(inner), path_(path) {
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) KVLAB_THROW(Error, "KVLAB_DRIVER_LOG: cannot open " + path + ": " + std::strerror(errno));
  if (g_log.load() != nullptr) {
    std::fclose(file_);
    KVLAB_THROW(InvalidArgument, "another CUDA driver log is active; only one may exist at a time");
  }
  g_start = std::chrono::steady_clock::now();  // before the table can see this log
  CudaDriverLog* expected = nullptr;
  if (!g_log.compare_exchange_strong(expected, this)) {
    std::fclose(file_);
    KVLAB_THROW(InvalidArgument, "another CUDA driver log is active; only one may exist at a time");
  }
  std::string abis;
#define KVLAB_LOG_ABI(name, abi) abis += std::string(abis.empty() ? "" : " ") + #name + "@" + std::to_string(abi);
  KVLAB_CUDA_DRIVER_ENTRIES(KVLAB_LOG_ABI)
#undef KVLAB_LOG_ABI
  note("kvlab CUDA driver log, pid " + std::to_string(::getpid()) + ", headers CUDA " + std::to_string(CUDA_VERSION) +
       "; columns: seconds thread call = result; entries resolved at ABI " + abis);
}

CudaDriverLog::~CudaDriverLog() {
  g_log.store(nullptr, std::memory_order_release);
  std::fclose(file_);
}

const CudaDriverApi& CudaDriverLog::api() const noexcept { return logged_table(); }

void CudaDriverLog::note(const std::string& text) { write_line("# " + text); }

void CudaDriverLog::write_line(const std::string& line) {
  std::lock_guard lock(mutex_);
  std::fputs(line.c_str(), file_);
  std::fputc('\n', file_);
  std::fflush(file_);
}

const CudaDriverApi& logged_if_requested(const CudaDriverApi& api) {
  const char* path = std::getenv("KVLAB_DRIVER_LOG");
  if (path == nullptr || *path == '\0') return api;
  static std::mutex mutex;
  static CudaDriverLog* log = nullptr;  // lives until the process exits: calls may come until then
  std::lock_guard lock(mutex);
  if (log == nullptr) log = new CudaDriverLog(api, path);  // NOLINT(cppcoreguidelines-owning-memory)
  return &log->inner() == &api ? log->api() : api;
}

}  // namespace kvlab
#endif  // KVLAB_HAS_CUDA_HEADERS
