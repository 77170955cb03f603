// A failure injected at each driver call, at each position in a scripted workload, leaves the vmm
// backend consistent: the failing operation reports OutOfMemory or the driver's error, changes no
// sequence, leaves no partial mapping (the driver's mappings equal the backend's books), and the
// backend stays usable and gives everything back at teardown. Once over the POSIX driver (its
// fault hook) and once over the CUDA driver on the contract-checking double (fail_nth_call).
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>

#include "alloc/core/error.hpp"
#include "tests/vmm/vmm_test_support.hpp"
#if KVLAB_HAS_CUDA_HEADERS
#include "alloc/cuda/emulated/cuda_driver_double.hpp"
#include "vmm/cuda_vm_driver.hpp"
#endif

namespace kvlab {
namespace {

using testing::kKiB;

struct Variant {
  const char* name;
  bool eager_and_deferred;
};
constexpr Variant kVariants[] = {{"plain", false}, {"eager+deferred", true}};

/// Runs the script; every operation may fail. Returns how many failed. `mappings` reads the
/// driver's live mapping count.
int run_script(VmmBackend& b, const std::function<std::size_t()>& mappings) {
  const std::int64_t P = static_cast<std::int64_t>(b.page_bytes() / b.token_bytes_per_tensor());  // tokens per page
  std::map<SeqId, std::int64_t> tag;  // live sequences and the data tag their tokens carry
  int failures = 0;
  const auto books_agree = [&](const std::string& what) {
    EXPECT_EQ(static_cast<std::int64_t>(mappings()), b.stats().mapped_pages) << what;
    testing::expect_consistent(b);
  };
  // A mutation that must be all or nothing for `target` (whose length and pages are compared).
  const auto attempt = [&](const std::string& what, SeqId target, const std::function<void()>& op) {
    const bool existed = b.contains(target);
    const std::int64_t len = existed ? b.length(target) : -1, pages = existed ? b.mapped_pages(target) : -1;
    try {
      op();
      books_agree(what);
      return true;
    } catch (const OutOfMemory&) {
    } catch (const Error&) {
    }
    ++failures;
    EXPECT_EQ(b.contains(target), existed) << what;
    if (existed) {
      EXPECT_EQ(b.length(target), len) << what;
      EXPECT_EQ(b.mapped_pages(target), pages) << what << ": partial mapping left behind";
    }
    books_agree(what + " (failed)");
    return false;
  };
  const auto admit = [&](SeqId id, std::int64_t n, std::int64_t final_tokens) {
    if (attempt("admit " + std::to_string(id), id, [&] { b.admit(id, {n, final_tokens}, n); })) {
      testing::write_tokens(b, id, id, 0, n);
      tag[id] = id;
    }
  };
  const auto grow = [&](SeqId id, std::int64_t n) {
    if (!b.contains(id)) return;
    const std::int64_t from = b.length(id);
    if (attempt("grow " + std::to_string(id), id, [&] { b.grow(id, n); }))
      testing::write_tokens(b, id, tag[id], from, from + n);
  };
  const auto fork = [&](SeqId parent, SeqId child) {
    if (!b.contains(parent)) return;
    if (attempt("fork " + std::to_string(parent), child, [&] { b.fork(parent, child); })) tag[child] = tag[parent];
  };
  const auto release = [&](SeqId id) {
    if (!b.contains(id)) return;
    try {
      b.release(id);
    } catch (const Error&) {
      ++failures;  // the sequence is gone all the same; pages not unmapped stay cached
    }
    EXPECT_FALSE(b.contains(id));
    tag.erase(id);
    books_agree("release " + std::to_string(id));
  };
  const auto check_data = [&] {
    for (const auto& [id, t] : tag)
      EXPECT_EQ(testing::count_mismatches(b, id, t, b.length(id)), 0) << "sequence " << id;
  };

  admit(1, P + 3, 6 * P);
  grow(1, P);
  admit(2, P / 2, 3 * P);
  fork(1, 3);
  grow(2, 2 * P);
  release(3);
  admit(4, 6 * P, 6 * P);  // memory pressure with eager+deferred: reclaims
  grow(1, 3 * P);
  check_data();
  release(2);
  grow(4, P);
  check_data();
  release(1);
  release(4);
  return failures;
}

/// After the faults are gone the backend still works.
void expect_usable(VmmBackend& b) {
  const std::int64_t P = static_cast<std::int64_t>(b.page_bytes() / b.token_bytes_per_tensor());
  ASSERT_EQ(b.num_sequences(), 0u);
  b.admit(10, {2 * P, 4 * P}, 2 * P);
  testing::write_tokens(b, 10, 10, 0, 2 * P);
  b.grow(10, P + 1);
  testing::write_tokens(b, 10, 10, 2 * P, 3 * P + 1);
  EXPECT_EQ(testing::count_mismatches(b, 10, 10, 3 * P + 1), 0);
  b.release(10);
  EXPECT_EQ(b.breakdown().allocated(), 0u);
}

VmmConfig script_config(std::size_t page, std::shared_ptr<VmDriver> driver, bool eager_and_deferred, VmmLayout layout) {
  VmmConfig c = testing::tiny_vmm(page, 0, std::move(driver), layout, 0, 4);
  const std::int64_t tensors = layout == VmmLayout::per_layer ? 4 : 2;
  const std::int64_t P = static_cast<std::int64_t>(page) / (layout == VmmLayout::per_layer ? 128 : 256);
  c.capacity_bytes = static_cast<std::size_t>(16 * tensors) * page;  // 16 rows
  c.max_seq_len = 8 * P;
  if (eager_and_deferred) {
    c.eager_tokens = P;
    c.deferred_reclamation = true;
  }
  return c;
}

// --- POSIX ---------------------------------------------------------------------------------------

struct PosixFault {
  VmCall call;
  VmFault fault;
};

class PosixFaults : public ::testing::TestWithParam<PosixFault> {};

TEST_P(PosixFaults, EveryPositionLeavesAConsistentUsableBackend) {
  // Plain copies, not structured bindings: clang 14 cannot capture those in the lambda below.
  const VmCall call = GetParam().call;
  const VmFault fault = GetParam().fault;
  for (const Variant& v : kVariants) {
    int fired_total = 0;
    for (int n = 1;; ++n) {
      SCOPED_TRACE(std::string(v.name) + ": fault at call " + std::to_string(n) + " of " + to_string(call));
      const VmmConfig cfg = script_config(4 * kKiB, nullptr, v.eager_and_deferred, VmmLayout::per_layer);
      auto driver = std::make_shared<PosixVmDriver>(cfg.capacity_bytes);
      bool fired = false;
      int count = 0;
      {
        VmmConfig c = cfg;
        c.driver = driver;
        VmmBackend b(c);
        driver->set_fault_hook([&](VmCall got) {
          if (got != call || ++count != n) return VmFault::none;
          fired = true;
          return fault;
        });
        const int failures = run_script(b, [&] { return driver->usage().mappings; });
        driver->set_fault_hook({});
        // Out of memory while mapping eager (speculative) pages is no failure: they are skipped.
        if (fired && (fault != VmFault::out_of_memory || !v.eager_and_deferred)) {
          EXPECT_GE(failures, 1) << "an injected fault must be reported";
        }
        expect_usable(b);
      }
      EXPECT_TRUE(driver->usage().empty()) << driver->usage().mappings << " mappings left";
      EXPECT_EQ(testing::maps_lines_containing("memfd:kvlab-vmm"), 0);
      if (!fired) break;
      ++fired_total;
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_GT(fired_total, 0) << v.name << ": the script never calls " << to_string(call);
  }
}

INSTANTIATE_TEST_SUITE_P(
    EachCall, PosixFaults,
    ::testing::Values(PosixFault{VmCall::map, VmFault::out_of_memory}, PosixFault{VmCall::map, VmFault::error},
                      PosixFault{VmCall::set_access, VmFault::error}, PosixFault{VmCall::unmap, VmFault::error},
                      PosixFault{VmCall::synchronize, VmFault::error}),
    [](const auto& info) {
      return std::string(to_string(info.param.call)) + (info.param.fault == VmFault::out_of_memory ? "_oom" : "_error");
    });

TEST(PosixFaultsAtSetUp, ReserveOrCreateFailureLeavesNothing) {
  for (const VmCall call : {VmCall::reserve, VmCall::create}) {
    for (int n = 1; n <= 64; ++n) {
      const VmmConfig cfg = script_config(4 * kKiB, nullptr, false, VmmLayout::per_layer);
      auto driver = std::make_shared<PosixVmDriver>(cfg.capacity_bytes);
      int count = 0;
      bool fired = false;
      driver->set_fault_hook([&](VmCall got) {
        if (got != call || ++count != n) return VmFault::none;
        fired = true;
        return VmFault::error;
      });
      VmmConfig c = cfg;
      c.driver = driver;
      if (static_cast<std::size_t>(n) <= (call == VmCall::reserve ? 1 : c.capacity_bytes / c.page_bytes)) {
        EXPECT_THROW(VmmBackend{c}, Error) << to_string(call) << " " << n;
        EXPECT_TRUE(fired);
      }
      EXPECT_TRUE(driver->usage().empty()) << to_string(call) << " " << n;
      if (!fired) break;
    }
  }
}

TEST(PosixFaultsAtTeardown, TheDestructorNeverThrowsAndTheDriverSeesTheLeak) {
  for (const VmCall call : {VmCall::synchronize, VmCall::unmap, VmCall::release, VmCall::free_reservation}) {
    const VmmConfig cfg = script_config(4 * kKiB, nullptr, false, VmmLayout::per_layer);
    auto driver = std::make_shared<PosixVmDriver>(cfg.capacity_bytes);
    {
      VmmConfig c = cfg;
      c.driver = driver;
      VmmBackend b(c);
      b.admit(1, {100, 100}, 100);
      driver->set_fault_hook([&](VmCall got) { return got == call ? VmFault::error : VmFault::none; });
    }  // must not throw
    driver->set_fault_hook({});
    const PosixVmUsage u = driver->usage();
    if (call == VmCall::synchronize) {
      EXPECT_TRUE(u.empty()) << "a failed synchronize still unmaps";
    }
    if (call == VmCall::unmap) {
      EXPECT_TRUE(u.mappings > 0 && u.reservations == 1);
    }
    if (call == VmCall::release) {
      EXPECT_TRUE(u.handles > 0 && u.mappings == 0);
    }
    if (call == VmCall::free_reservation) {
      EXPECT_TRUE(u.reservations == 1 && u.handles == 0 && u.mappings == 0);
    }
  }
}

// --- CUDA over the driver double ------------------------------------------------------------------

#if KVLAB_HAS_CUDA_HEADERS

constexpr std::size_t kGranularity = 64 * kKiB;

CudaDriverDoubleConfig small_double() {
  CudaDriverDoubleConfig c;
  c.granularity = kGranularity;
  c.capacity = std::size_t{64} << 20;
  c.poison_byte = 0x7f;  // KV the backend never wrote reads as garbage, not zeros
  return c;
}

struct CudaFault {
  CuEntry entry;
  CUresult result;
};

class CudaFaults : public ::testing::TestWithParam<CudaFault> {};

TEST_P(CudaFaults, EveryPositionLeavesAConsistentUsableBackend) {
  const auto [entry, result] = GetParam();
  for (const Variant& v : kVariants) {
    int fired_total = 0;
    for (int n = 1;; ++n) {
      SCOPED_TRACE(std::string(v.name) + ": fault at call " + std::to_string(n) + " of " + cu_entry_name(entry));
      CudaDriverDouble dbl(small_double());
      std::uint64_t fired = 0;
      {
        VmmConfig c = script_config(kGranularity, nullptr, v.eager_and_deferred, VmmLayout::megacache);
        c.driver = std::make_shared<CudaVmDriver>(dbl.api(), CudaVmOptions{0, true});
        VmmBackend b(c);
        dbl.fail_nth_call(entry, static_cast<std::uint64_t>(n), result);
        const int failures = run_script(b, [&] { return dbl.usage().mappings; });
        fired = dbl.injected_faults();
        dbl.clear_faults();
        if (fired > 0 && (result != CUDA_ERROR_OUT_OF_MEMORY || !v.eager_and_deferred)) {
          EXPECT_GE(failures, 1) << "an injected fault must be reported";
        }
        expect_usable(b);
      }
      EXPECT_TRUE(dbl.usage().empty()) << dbl.leak_report();
      EXPECT_TRUE(dbl.violations().empty()) << dbl.violations().front();
      if (fired == 0) break;
      ++fired_total;
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_GT(fired_total, 0) << v.name << ": the script never calls " << cu_entry_name(entry);
  }
}

INSTANTIATE_TEST_SUITE_P(EachEntry, CudaFaults,
                         ::testing::Values(CudaFault{CuEntry::cuMemMap, CUDA_ERROR_OUT_OF_MEMORY},
                                           CudaFault{CuEntry::cuMemMap, CUDA_ERROR_UNKNOWN},
                                           CudaFault{CuEntry::cuMemSetAccess, CUDA_ERROR_UNKNOWN},
                                           CudaFault{CuEntry::cuMemUnmap, CUDA_ERROR_UNKNOWN},
                                           CudaFault{CuEntry::cuCtxSetCurrent, CUDA_ERROR_UNKNOWN},
                                           CudaFault{CuEntry::cuCtxSynchronize, CUDA_ERROR_UNKNOWN}),
                         [](const auto& info) {
                           return std::string(cu_entry_name(info.param.entry)) +
                                  (info.param.result == CUDA_ERROR_OUT_OF_MEMORY ? "_oom" : "_error");
                         });

TEST(CudaFaultsAtSetUp, EveryConstructionCallCanFailWithoutALeak) {
  for (const CuEntry entry :
       {CuEntry::cuInit, CuEntry::cuDeviceGet, CuEntry::cuDevicePrimaryCtxRetain,
        CuEntry::cuMemGetAllocationGranularity, CuEntry::cuMemAddressReserve, CuEntry::cuMemCreate}) {
    for (const CUresult result : {CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_UNKNOWN}) {
      for (std::uint64_t n = 1;; ++n) {
        CudaDriverDouble dbl(small_double());
        dbl.fail_nth_call(entry, n, result);
        try {
          VmmConfig c = script_config(kGranularity, nullptr, false, VmmLayout::megacache);
          c.driver = std::make_shared<CudaVmDriver>(dbl.api(), CudaVmOptions{0, true});
          VmmBackend b(c);
        } catch (const OutOfMemory&) {
          EXPECT_EQ(result, CUDA_ERROR_OUT_OF_MEMORY) << cu_entry_name(entry);
        } catch (const Error&) {
        }
        const std::uint64_t fired = dbl.injected_faults();
        EXPECT_TRUE(dbl.usage().empty()) << cu_entry_name(entry) << " call " << n << ": " << dbl.leak_report();
        EXPECT_TRUE(dbl.violations().empty()) << dbl.violations().front();
        if (fired == 0) break;
      }
    }
  }
}

TEST(CudaFaultsAtTeardown, ReleaseOrFreeFailuresAreLeaksTheDoubleReports) {
  for (const CuEntry entry : {CuEntry::cuMemRelease, CuEntry::cuMemAddressFree, CuEntry::cuMemUnmap}) {
    CudaDriverDouble dbl(small_double());
    {
      VmmConfig c = script_config(kGranularity, nullptr, false, VmmLayout::megacache);
      c.driver = std::make_shared<CudaVmDriver>(dbl.api(), CudaVmOptions{0, true});
      VmmBackend b(c);
      b.admit(1, {600, 600}, 600);
      dbl.fail_nth_call(entry, 1);
    }  // must not throw
    EXPECT_EQ(dbl.injected_faults(), 1u) << cu_entry_name(entry);
    EXPECT_FALSE(dbl.usage().empty()) << cu_entry_name(entry);
    EXPECT_FALSE(dbl.leak_report().empty());
    EXPECT_TRUE(dbl.violations().empty()) << dbl.violations().front();
  }
}

#endif  // KVLAB_HAS_CUDA_HEADERS

}  // namespace
}  // namespace kvlab
