#include "kernels/thread_pool.hpp"

namespace kvlab {

ThreadPool::ThreadPool(unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_indices() {
  for (;;) {
    const std::int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_) return;
    try {
      (*fn_)(i);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop() {
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_indices();
    {
      std::lock_guard lock(mutex_);
      if (--busy_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& fn) {
  if (n <= 0) return;
  std::lock_guard job(job_mutex_);
  if (workers_.empty() || n == 1) {
    for (std::int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    n_ = n;
    next_.store(0, std::memory_order_relaxed);
    busy_ = static_cast<unsigned>(workers_.size());
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_indices();
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return busy_ == 0; });
    error = error_;
    error_ = nullptr;
    fn_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

ThreadPool& default_thread_pool() {
  static ThreadPool pool;
  return pool;
}

}  // namespace kvlab
