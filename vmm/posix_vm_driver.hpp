#pragma once
// The virtual-memory driver over host memory: POSIX mmap and one memfd.
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "vmm/vm_driver.hpp"

namespace kvlab {

/// What is alive in a PosixVmDriver; all zero once everything was given back.
struct PosixVmUsage {
  std::size_t reservations = 0;
  std::size_t reserved_bytes = 0;
  std::size_t handles = 0;         ///< create() without release()
  std::size_t physical_bytes = 0;  ///< their bytes
  std::size_t mappings = 0;        ///< map() without unmap()
  std::size_t mapped_bytes = 0;
  [[nodiscard]] bool empty() const noexcept { return reservations == 0 && handles == 0 && mappings == 0; }
  bool operator==(const PosixVmUsage&) const = default;
};

// Design note
//
// Rationale. The vAttention idea (reserve a virtually contiguous KV tensor, back it with physical
// pages only as sequences grow) is a property of the MMU, not of the GPU: the same four steps exist
// in POSIX. A host implementation lets every development machine run the vmm backend with real
// mappings (real faults on a bad address, real page-table costs to benchmark), not a simulation.
//
// Approach. As in PyTorch's ExpandableSegment and TensorRT-LLM's CudaVmmArena, address space is
// reserved once and physical memory is a pool of fixed-size handles:
//  * reserve: mmap(PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE), over-reserved and
//    trimmed to the alignment. It costs address space only, never RAM or commit charge.
//  * physical memory: ONE memfd, ftruncate'd to the KV capacity at construction (no RAM until
//    touched). A handle is an extent (offset range) of it, taken first-fit; release hole-punches
//    the extent so its RAM goes back to the system.
//  * map: mmap(MAP_FIXED | MAP_SHARED) of the extent over the reservation, PROT_NONE until
//    set_access mprotects it read-write. Because the bytes live in the file, not in the address
//    range, they survive unmap and a later map elsewhere (as a CUDA handle does).
//  * unmap: mmap(PROT_NONE, MAP_FIXED | MAP_ANONYMOUS) over the range: the mapping is replaced
//    by reservation in one atomic step, so no other thread's mmap can land in the hole.
//  * A failed MAP_FIXED may already have dropped the old pages, so the failure path puts the
//    reservation back before it reports; ENOMEM (VMA limit, page tables) is "out of memory", a
//    value (false), anything else throws. Every call validates its arguments against the driver's
//    own bookkeeping (inside a reservation, not over a mapping, exact unmap ranges) and throws
//    InvalidArgument on misuse before touching anything.
//  * synchronize is a no-op: host kernels are synchronous, so nothing can still read a page.
//  * A fault hook (tests) runs first in every call and can make it fail as out of memory or as an
//    error with nothing changed.
//
// Limitations. The page size is any multiple of the host page size (4 KiB). A memfd is shared
// memory, whose transparent huge pages follow /sys/kernel/mm/transparent_hugepage/shmem_enabled
// (often "never"); where it is "advise", mappings of whole, aligned 2 MiB pages are advised
// (alloc/memory/huge_pages.hpp), and the run header says which mode the host has. Each mapping is a kernel
// VMA until neighbours merge: vm.max_map_count (65530 by default) bounds the number of separate
// mappings, so 4 KiB pages over gigabytes can fail with ENOMEM (reported as out of memory). One
// mutex serialises the bookkeeping and the syscalls; mmap/munmap take the process's mmap lock
// anyway. Pages of a memfd are shared memory (counted as Shmem, swappable only to swap).
class PosixVmDriver final : public VmDriver {
 public:
  using FaultHook = std::function<VmFault(VmCall)>;

  /// One memfd of `physical_bytes` (rounded up to the granularity). Throws Error when the host
  /// cannot create it. `max_map_count`: the process's limit on memory mappings that map() reports
  /// as SystemLimit when near it; 0 (the default) is the kernel's vm.max_map_count, a positive value
  /// stands in for it (a test seam: the kvlab binary passes KVLAB_MAX_MAP_COUNT).
  explicit PosixVmDriver(std::size_t physical_bytes, std::int64_t max_map_count = 0);
  /// /proc/sys/vm/max_map_count (read once), or 0 where it cannot be read.
  [[nodiscard]] static std::int64_t kernel_max_map_count();
  /// Closes the memfd. Reservations and mappings still alive are unmapped (check usage() first:
  /// the destructor does not complain).
  ~PosixVmDriver() override;

  [[nodiscard]] std::string name() const override { return "posix"; }
  [[nodiscard]] Device device() const noexcept override { return Device::host; }
  [[nodiscard]] std::size_t granularity() const noexcept override { return granularity_; }

  [[nodiscard]] void* reserve(std::size_t bytes, std::size_t alignment) override;
  void free_reservation(void* base, std::size_t bytes) override;
  [[nodiscard]] std::optional<PhysHandle> create(std::size_t bytes) override;
  void release(PhysHandle handle) override;
  [[nodiscard]] bool map(void* va, std::size_t bytes, PhysHandle handle) override;
  void set_access(void* va, std::size_t bytes) override;
  void unmap(void* va, std::size_t bytes) override;
  void synchronize() override;

  /// Installs (or, with an empty function, removes) the fault hook. The hook may be called from
  /// any thread that calls the driver.
  void set_fault_hook(FaultHook hook);
  [[nodiscard]] PosixVmUsage usage() const;
  [[nodiscard]] std::size_t physical_capacity() const noexcept { return capacity_; }
  /// Calls of each kind so far, failed ones included.
  [[nodiscard]] std::uint64_t call_count(VmCall call) const;

 private:
  struct Extent {
    std::size_t offset;
    std::size_t size;
  };
  VmFault enter(VmCall call);  // counts the call and consults the hook
  [[nodiscard]] bool inside_one_reservation(std::uintptr_t va, std::size_t bytes) const;
  [[nodiscard]] bool overlaps_mapping(std::uintptr_t va, std::size_t bytes) const;
  [[nodiscard]] bool fully_mapped(std::uintptr_t va, std::size_t bytes) const;
  void check_aligned(const char* who, std::uintptr_t va, std::size_t bytes) const;
  static void restore_reservation(void* va, std::size_t bytes) noexcept;

  std::size_t granularity_;
  std::int64_t max_map_count_;
  std::size_t capacity_;
  int fd_ = -1;
  bool advise_huge_pages_;  // shmem THP is "advise": mappings of whole 2 MiB pages are advised

  mutable std::mutex mutex_;
  FaultHook hook_;
  std::uint64_t calls_[kVmCallCount] = {};
  std::map<std::uintptr_t, std::size_t> reservations_;  // base -> bytes
  std::map<std::uintptr_t, std::size_t> mappings_;      // va -> bytes
  std::map<std::size_t, std::size_t> free_extents_;     // offset -> size, coalesced
  std::map<PhysHandle, Extent> handles_;
  PhysHandle next_handle_ = 1;
  std::size_t physical_bytes_ = 0;
  std::size_t mapped_bytes_ = 0;
  std::size_t reserved_bytes_ = 0;
};

}  // namespace kvlab
