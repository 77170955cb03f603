#pragma once
// Fault injection: make the n-th, or a random (seeded) fraction of, allocations, driver calls or
// device copies fail, so tests and `kvlab replay --inject-faults` can show that a failure anywhere
// loses nothing: every request ends completed, rejected or failed with a reason, and no memory,
// mapping or reservation leaks.
//
// It ships (kvlab replay --inject-faults), so it is part of kvlab_alloc rather than the test-only
// library (tests/support), in a folder of its own that says what it is for.
//
// A FaultInjector is a counter of "checks" at fault sites. Sites ask should_fail(); the injector
// answers from its plan. Thread-safe (the vmm background mapper asks too).
#include <cstdint>
#include <mutex>
#include <random>
#include <string>

#include "alloc/memory/memory_resource.hpp"

namespace kvlab {

class FaultInjector {
 public:
  /// The n-th check from now (1-based) fails; the others pass.
  void fail_nth(std::uint64_t n);
  /// Each check fails with probability p, drawn from std::mt19937_64(seed).
  void fail_randomly(double p, std::uint64_t seed);
  /// No more failures.
  void disarm();

  /// Called by a fault site; true means "fail now". `site` is kept for the last failure's report.
  [[nodiscard]] bool should_fail(const char* site);

  [[nodiscard]] std::uint64_t checks() const;
  [[nodiscard]] std::uint64_t injected() const;
  [[nodiscard]] std::string last_site() const;

 private:
  mutable std::mutex mutex_;
  std::uint64_t checks_ = 0, injected_ = 0, nth_ = 0, armed_at_ = 0;
  double probability_ = 0;
  std::mt19937_64 rng_;
  std::string last_site_;
};

/// While one lives, every injector answers "pass" (and counts nothing) on this thread: for observers
/// such as the KV integrity checker, whose own copies and staging are not what a fault test tests.
/// Other threads (the vmm background mapper) still see faults.
class ScopedFaultPause {
 public:
  ScopedFaultPause() noexcept;
  ~ScopedFaultPause();
  ScopedFaultPause(const ScopedFaultPause&) = delete;
  ScopedFaultPause& operator=(const ScopedFaultPause&) = delete;
};

/// Device copies (alloc/transfer/copy.hpp) consult this injector while it is installed (nullptr: none).
/// An injected copy failure throws kvlab::Error before any byte moves.
void set_copy_fault_injector(FaultInjector* injector) noexcept;
[[nodiscard]] FaultInjector* copy_fault_injector() noexcept;
/// Throws kvlab::Error naming `site` when the installed copy injector says this copy fails.
void throw_if_copy_fault(const char* site);

/// Installs an injector for device copies for the lifetime of the guard.
class ScopedCopyFaults {
 public:
  explicit ScopedCopyFaults(FaultInjector& f) noexcept : previous_(copy_fault_injector()) {
    set_copy_fault_injector(&f);
  }
  ~ScopedCopyFaults() { set_copy_fault_injector(previous_); }
  ScopedCopyFaults(const ScopedCopyFaults&) = delete;
  ScopedCopyFaults& operator=(const ScopedCopyFaults&) = delete;

 private:
  FaultInjector* previous_;
};

/// A memory resource adaptor whose allocations fail (OutOfMemory, nothing allocated) when the
/// injector says so.
class FaultInjectingAdaptor final : public MemoryResource {
 public:
  FaultInjectingAdaptor(MemoryResource& upstream, FaultInjector& faults) : upstream_(upstream), faults_(faults) {}

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept override {
    upstream_.deallocate(p, bytes, alignment);
  }
  [[nodiscard]] Device do_device() const noexcept override { return upstream_.device(); }
  [[nodiscard]] std::string do_name() const override { return "faulty(" + upstream_.name() + ")"; }

  MemoryResource& upstream_;
  FaultInjector& faults_;
};

}  // namespace kvlab
