#include "vmm/background_mapper.hpp"

namespace kvlab {

BackgroundMapper::BackgroundMapper(std::mutex& owner_mutex, Step step)
    : mutex_(owner_mutex), step_(std::move(step)), thread_([this] { loop(); }) {}

BackgroundMapper::~BackgroundMapper() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void BackgroundMapper::push(const std::lock_guard<std::mutex>&, PrefetchJob job) {
  jobs_.push_back(job);
  active_.store(true, std::memory_order_release);
}

bool BackgroundMapper::wait() {
  const bool was_active = active_.load(std::memory_order_acquire);
  std::unique_lock lock(mutex_);
  const auto idle = [&] { return jobs_.empty() && !busy_; };
  const bool blocked = was_active || !idle();
  idle_cv_.wait(lock, idle);
  if (error_) {
    const std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
  return blocked;
}

void BackgroundMapper::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) break;
    const PrefetchJob job = jobs_.front();
    jobs_.pop_front();
    busy_ = true;
    lock.unlock();
    run(job);  // takes the mutex page by page, so the foreground can get in between
    lock.lock();
    busy_ = false;
    if (jobs_.empty()) {
      active_.store(false, std::memory_order_release);
      idle_cv_.notify_all();
    }
  }
  busy_ = false;
  idle_cv_.notify_all();
}

void BackgroundMapper::run(const PrefetchJob& job) {
  for (;;) {
    std::lock_guard lock(mutex_);
    if (stop_) return;
    try {
      if (!step_(job)) return;
    } catch (...) {
      if (!error_) error_ = std::current_exception();
      return;
    }
  }
}

}  // namespace kvlab
