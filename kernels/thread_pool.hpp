#pragma once
// A small fork-join pool for the host kernels: parallel_for over an index range, the calling thread
// taking part. Workers sleep between jobs. Own code rather than OpenMP so that ThreadSanitizer sees
// every synchronisation (libgomp is not instrumented).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvlab {

class ThreadPool {
 public:
  /// threads == 0 uses std::thread::hardware_concurrency(). The pool has threads-1 workers.
  explicit ThreadPool(unsigned threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  [[nodiscard]] unsigned size() const noexcept { return static_cast<unsigned>(workers_.size()) + 1; }

  /// Calls fn(i) once for every i in [0, n), spread over the pool; returns when all calls are done.
  /// The first exception thrown by fn is rethrown here (the remaining indices still run).
  /// Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& fn);

 private:
  void worker_loop();
  void run_indices();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  const std::function<void(std::int64_t)>* fn_ = nullptr;
  std::int64_t n_ = 0;
  std::atomic<std::int64_t> next_{0};
  unsigned busy_ = 0;  // workers still inside the current job
  std::exception_ptr error_;
  std::mutex job_mutex_;  // one parallel_for at a time
};

/// The process-wide pool used by the host kernels by default.
[[nodiscard]] ThreadPool& default_thread_pool();

}  // namespace kvlab
