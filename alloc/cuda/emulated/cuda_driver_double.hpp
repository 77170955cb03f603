#pragma once
// A double of the CUDA driver API over host memory: a CudaDriverApi table whose functions enforce
// the documented virtual-memory contract and return the documented CUresult codes.
//
// It ships (part of kvlab_alloc, in a folder of its own that says what it is for): the tests use it
// in place of a GPU, and `kvlab replay --device emulated` runs the CUDA code path on it
// (docs/devices.md), so the same contract is checked end to end without a GPU.
#if !KVLAB_HAS_CUDA_HEADERS
#error \
    "alloc/cuda/emulated/cuda_driver_double.hpp needs the CUDA toolkit headers; guard the include with KVLAB_HAS_CUDA_HEADERS"
#endif

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "alloc/cuda/cuda_driver.hpp"

namespace kvlab {

class FaultInjector;  // alloc/faults/fault_injection.hpp

namespace detail {
class CudaDriverDoubleState;
}  // namespace detail

/// One enumerator per CudaDriverApi entry, in table order (fault injection and call counting).
enum class CuEntry : std::uint8_t {
#define KVLAB_CU_ENTRY_ENUMERATOR(name, abi) name,
  KVLAB_CUDA_DRIVER_ENTRIES(KVLAB_CU_ENTRY_ENUMERATOR)
#undef KVLAB_CU_ENTRY_ENUMERATOR
};
inline constexpr std::size_t kCuEntryCount = 0
#define KVLAB_CU_ENTRY_COUNT(name, abi) +1
    KVLAB_CUDA_DRIVER_ENTRIES(KVLAB_CU_ENTRY_COUNT)
#undef KVLAB_CU_ENTRY_COUNT
    ;

/// "cuMemMap" for CuEntry::cuMemMap (the documented, unversioned name).
[[nodiscard]] const char* cu_entry_name(CuEntry entry) noexcept;

struct CudaDriverDoubleConfig {
  /// Minimum and recommended granularity (cuMemGetAllocationGranularity). A power of two and a
  /// multiple of the host page size; 2 MiB is what current NVIDIA GPUs report.
  std::size_t granularity = std::size_t{2} << 20;
  /// Device memory cuMemCreate may hand out in all (cuMemGetInfo's total, cuDeviceTotalMem).
  std::size_t capacity = std::size_t{8} << 30;
  std::string device_name = "kvlab CUDA driver double";
  int driver_version = CUDA_VERSION;
  int compute_capability_major = 9;
  int compute_capability_minor = 0;
  int multiprocessor_count = 132;
  /// Like the real driver, every call but cuInit/cuDriverGetVersion/cuGetError* returns
  /// CUDA_ERROR_NOT_INITIALIZED until cuInit(0) succeeded.
  bool require_init = true;
  /// cuMemMap documents that `offset` "currently must be zero"; set to accept granularity-aligned
  /// offsets (what later drivers accept) instead.
  bool allow_map_offset = false;
  /// Fill every new allocation with this byte: real device memory starts with arbitrary contents,
  /// so a non-zero poison catches code that reads KV it never wrote. < 0: leave it zeroed.
  int poison_byte = -1;
};

/// What is alive in the double; all zero once everything was given back.
struct CudaDriverDoubleUsage {
  std::size_t reservations = 0;  ///< cuMemAddressReserve without cuMemAddressFree
  std::size_t reserved_bytes = 0;
  std::size_t handles = 0;         ///< cuMemCreate without cuMemRelease
  std::size_t allocations = 0;     ///< physical allocations not yet freed (handle or mapping alive)
  std::size_t physical_bytes = 0;  ///< their bytes, counted against capacity
  std::size_t mappings = 0;        ///< cuMemMap without cuMemUnmap
  std::size_t mapped_bytes = 0;
  int primary_context_refs = 0;  ///< cuDevicePrimaryCtxRetain without Release
  [[nodiscard]] bool empty() const noexcept {
    return reservations == 0 && handles == 0 && allocations == 0 && physical_bytes == 0 && mappings == 0 &&
           primary_context_refs == 0;
  }
  bool operator==(const CudaDriverDoubleUsage&) const = default;
};

// Design note
//
// Rationale. The vAttention-style backend drives cuMemAddressReserve/cuMemCreate/cuMemMap/
// cuMemSetAccess/cuMemUnmap, and the rules those calls impose (granularity, mapping only inside a
// reservation and never over mapped bytes, unmapping whole mappings, access before use, release
// while mapped) are exactly what a real GPU punishes with an error code or an illegal-address fault
// far from the bug. Development machines have no GPU, so the double enforces the documented
// contract on the host, returns the documented CUresult for each violation, records a readable
// violation, and lets tests inject failures and check for leaks.
//
// Approach. Addresses are real host addresses, so host kernels and tests can read and write
// "device" memory through the CUdeviceptr values the double hands out:
//  * cuMemAddressReserve maps PROT_NONE anonymous memory (MAP_NORESERVE), aligned to the
//    granularity; cuMemAddressFree unmaps it.
//  * Physical memory is one memfd ("device memory"); each cuMemCreate takes an extent of it
//    (first fit, the file grows when nothing fits) and is counted against `capacity`.
//  * cuMemMap maps the handle's extent with mmap(MAP_FIXED | MAP_SHARED) over the reservation, so
//    data written through one mapping is in the handle: it survives unmap and remap at another
//    address, and two mappings of one handle alias. A new mapping is PROT_NONE; cuMemSetAccess
//    mprotects it (READ or READWRITE), so touching memory without access faults as on a GPU.
//    cuMemUnmap puts PROT_NONE anonymous memory back, which turns the range into a reservation.
//  * When the last mapping and the handle are gone the extent is hole-punched (RAM returned,
//    contents gone) and its bytes stop counting against capacity.
//  * check_access(ptr, bytes, write) is the soft version of a GPU fault for code that wants to
//    verify before touching: it records a violation and returns false when a byte is unmapped or
//    lacks the access.
//  * As on the driver, cuMemGetInfo and cuCtxSynchronize need a current context (retain the
//    primary context, cuCtxSetCurrent, per thread); the VMM calls do not.
//  * Every call validates everything before it changes anything, so a failing call (violation,
//    OOM or injected fault) leaves no partial state.
//  * The table holds plain function pointers, so the functions find the active double through a
//    process-wide pointer set by the constructor and cleared by the destructor; one mutex guards it
//    and all state, so a background mapper thread may call the table concurrently with others.
//
// Limitations. One device (ordinal 0) with a single primary context; no streams, no multicast, no
// IPC/export, device allocations only (host and host-NUMA locations are refused). The
// cuMemAddressReserve address hint is only passed to mmap as a hint. Stricter than the docs where
// kvlab never needs the latitude: reservation sizes must be granularity multiples (docs: host page
// multiples), and freeing a reservation that still holds mappings fails with
// CUDA_ERROR_INVALID_VALUE (undocumented). Releasing an unknown handle is undefined behaviour for
// the driver; the double returns CUDA_ERROR_INVALID_VALUE. cuGetErrorString gives kvlab's short
// descriptions. Each mapping costs a kernel VMA (vm.max_map_count, 65530 by default), and all calls
// serialise on one mutex: the double measures correctness, never speed.
class CudaDriverDouble {
 public:
  /// Installs this double as the active one; throws InvalidArgument if another is alive or the
  /// config is invalid, CudaError if the host cannot provide memfd memory.
  explicit CudaDriverDouble(CudaDriverDoubleConfig config = {});
  /// Uninstalls and gives the host memory back (leaked handles and mappings included: check
  /// usage() or leak_report() before, the destructor does not complain).
  ~CudaDriverDouble();
  CudaDriverDouble(const CudaDriverDouble&) = delete;
  CudaDriverDouble& operator=(const CudaDriverDouble&) = delete;

  /// The active double, nullptr when none. Table calls made while none is active return
  /// CUDA_ERROR_NOT_INITIALIZED.
  [[nodiscard]] static CudaDriverDouble* current() noexcept;

  /// The table of double functions; pass it wherever a `const CudaDriverApi&` is expected. It is
  /// resolved from entry_point() by resolve_cuda_driver_table(), as the real driver's table is.
  [[nodiscard]] const CudaDriverApi& api() const noexcept;
  /// The double's function for driver symbol `name` with the ABI of CUDA version `abi` (the newest
  /// ABI at or below it, as cudaGetDriverEntryPointByVersion answers); nullptr and a reason in
  /// `why` when there is none. cuCtxSynchronize has two: the argument-less one of CUDA 2.0 and the
  /// one of CUDA 13.0 that takes the context to synchronize.
  [[nodiscard]] static void* entry_point(const char* name, int abi, std::string& why);
  [[nodiscard]] const CudaDriverDoubleConfig& config() const noexcept;

  // --- Access checks (the soft GPU fault) ---

  /// True when every byte of [ptr, ptr + bytes) is mapped with READ access (READWRITE if `write`).
  /// Otherwise records a violation naming the first bad byte and returns false.
  bool check_access(CUdeviceptr ptr, std::size_t bytes, bool write);
  bool check_access(const void* ptr, std::size_t bytes, bool write) {
    return check_access(static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(ptr)), bytes, write);
  }

  // --- Fault injection: an injected failure changes no state and is not a violation ---

  /// The n-th call of `entry` from now (n = 1: the next one) returns `result`. Several may be armed.
  void fail_nth_call(CuEntry entry, std::uint64_t n, CUresult result = CUDA_ERROR_UNKNOWN);
  /// From now, every call of `entries` (all entries when empty) fails with probability
  /// `probability`, drawn from an RNG seeded with `seed`: the same calls in the same order fail the
  /// same way for the same seed.
  void fail_randomly(double probability, std::uint64_t seed, CUresult result = CUDA_ERROR_UNKNOWN,
                     std::vector<CuEntry> entries = {});
  /// From now, calls of `entries` (all entries when empty) also ask `injector` (alloc/faults; its
  /// site is the entry's name) and fail with `result` when it says so: one plan shared with device
  /// copies (`kvlab replay --device emulated --inject-faults`). nullptr: stop asking. The injector
  /// must outlive its use here.
  void use_fault_injector(FaultInjector* injector, std::vector<CuEntry> entries = {},
                          CUresult result = CUDA_ERROR_UNKNOWN);
  /// Disarms every plan above (fail_nth_call, fail_randomly, use_fault_injector).
  void clear_faults();
  [[nodiscard]] std::uint64_t injected_faults() const;
  /// Calls of `entry` so far, failed ones included.
  [[nodiscard]] std::uint64_t call_count(CuEntry entry) const;

  // --- Accounting ---

  [[nodiscard]] CudaDriverDoubleUsage usage() const;
  /// Empty when nothing leaked; otherwise one line per kind of leak, for test failure messages.
  [[nodiscard]] std::string leak_report() const;
  /// Contract violations so far, one line each ("cuMemMap: CUDA_ERROR_INVALID_VALUE: ...").
  /// Out-of-memory and injected failures are not violations.
  [[nodiscard]] std::vector<std::string> violations() const;
  void clear_violations();

 private:
  CudaDriverDoubleConfig config_;
  std::unique_ptr<detail::CudaDriverDoubleState> state_;  // guarded by the process-wide double mutex
};

}  // namespace kvlab
