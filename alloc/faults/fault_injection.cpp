#include "alloc/faults/fault_injection.hpp"

#include <atomic>

#include "alloc/core/error.hpp"

namespace kvlab {

void FaultInjector::fail_nth(std::uint64_t n) {
  std::lock_guard lock(mutex_);
  nth_ = n;
  armed_at_ = checks_;
  probability_ = 0;
}

void FaultInjector::fail_randomly(double p, std::uint64_t seed) {
  KVLAB_EXPECTS(p >= 0 && p <= 1, "fault probability must be in [0, 1]");
  std::lock_guard lock(mutex_);
  probability_ = p;
  rng_.seed(seed);
  nth_ = 0;
}

void FaultInjector::disarm() {
  std::lock_guard lock(mutex_);
  nth_ = 0;
  probability_ = 0;
}

namespace {
thread_local int t_paused = 0;  // ScopedFaultPause depth on this thread
}  // namespace

ScopedFaultPause::ScopedFaultPause() noexcept { ++t_paused; }
ScopedFaultPause::~ScopedFaultPause() { --t_paused; }

bool FaultInjector::should_fail(const char* site) {
  if (t_paused > 0) return false;  // an observer's calls (integrity checks) are not the system under test
  std::lock_guard lock(mutex_);
  ++checks_;
  bool fail = false;
  if (nth_ != 0 && checks_ - armed_at_ == nth_) {
    fail = true;
    nth_ = 0;
  } else if (probability_ > 0) {
    fail = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < probability_;
  }
  if (fail) {
    ++injected_;
    last_site_ = site;
  }
  return fail;
}

std::uint64_t FaultInjector::checks() const {
  std::lock_guard lock(mutex_);
  return checks_;
}
std::uint64_t FaultInjector::injected() const {
  std::lock_guard lock(mutex_);
  return injected_;
}
std::string FaultInjector::last_site() const {
  std::lock_guard lock(mutex_);
  return last_site_;
}

namespace {
std::atomic<FaultInjector*> g_copy_faults{nullptr};
}

void set_copy_fault_injector(FaultInjector* injector) noexcept { g_copy_faults.store(injector); }
FaultInjector* copy_fault_injector() noexcept { return g_copy_faults.load(); }

void throw_if_copy_fault(const char* site) {
  if (FaultInjector* f = copy_fault_injector(); f != nullptr && f->should_fail(site))
    KVLAB_THROW(Error, std::string("injected device copy failure (") + site + ")");
}

void* FaultInjectingAdaptor::do_allocate(std::size_t bytes, std::size_t alignment) {
  if (faults_.should_fail("allocate"))
    KVLAB_THROW(OutOfMemory, "injected allocation failure (" + std::to_string(bytes) + " bytes)");
  return upstream_.allocate(bytes, alignment);
}

}  // namespace kvlab
