#pragma once
// vAttention's overlap: a thread that maps, while the current step computes, the pages the next
// step will need (docs/vmm.md, "Overlap").
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace kvlab {

/// Map `slot` up to `rows` rows, unless the slot changed owner (its generation moved on) first.
struct PrefetchJob {
  int slot = -1;
  std::uint64_t generation = 0;
  std::int64_t rows = 0;
};

// Design note
//
// Rationale. Mapping a page costs microseconds of driver time; vAttention hides it by mapping the
// next step's pages on a background thread while the GPU computes the current step. The thread
// must never make the foreground wait longer than one page mapping, and must never touch a slot
// that was released and handed to another sequence in the meantime.
//
// Approach. The mapper owns a thread and a FIFO of PrefetchJobs, and shares its owner's mutex:
// the queue is guarded by it, and each step (one page mapped) runs with it held and releases it
// between pages, so the foreground gets in between any two pages. The owner's step function
// returns false when the job is finished, stale (generation changed) or out of memory; an
// exception a step throws (a driver error) ends the job and is kept, and the next wait()
// rethrows it once. wait() returns when the queue is empty and no job runs. The destructor stops
// the thread between two steps and joins it.
//
// Limitations. One thread, jobs in order; a job's pages are mapped one at a time. The owner must
// keep everything its step function touches alive until the mapper is destroyed (declare the
// mapper after that state, so it is destroyed first).
class BackgroundMapper {
 public:
  /// Maps one page of the job, called with the owner's mutex held. False: the job is done.
  using Step = std::function<bool(const PrefetchJob&)>;

  BackgroundMapper(std::mutex& owner_mutex, Step step);
  ~BackgroundMapper();
  BackgroundMapper(const BackgroundMapper&) = delete;
  BackgroundMapper& operator=(const BackgroundMapper&) = delete;

  /// Queues a job. `held` proves the caller holds the owner's mutex; call notify() after
  /// releasing it.
  void push(const std::lock_guard<std::mutex>& held, PrefetchJob job);
  /// Wakes the thread for the jobs pushed.
  void notify() { work_cv_.notify_one(); }
  /// Blocks until every queued job is done; rethrows (once) an error a step threw. True when it
  /// had to block (a job was queued or running when it was called, even if the mapper finished
  /// while the caller waited for the mutex it holds page by page), false when everything was done
  /// already.
  bool wait();

 private:
  void loop();
  void run(const PrefetchJob& job);

  std::mutex& mutex_;  // the owner's: guards the queue and the flags below too
  Step step_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<PrefetchJob> jobs_;
  bool busy_ = false, stop_ = false;
  // Jobs queued or running, readable without the mutex: wait() reads it before taking the mutex,
  // which std::mutex does not hand over fairly, so a caller can wait out a whole job for it and
  // find the mapper idle once it has it (OverlapOrder.ABeginStepWaitForTheMapperIsTheStepsCriticalMapping
  // caught that under ASan).
  std::atomic<bool> active_{false};
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace kvlab
