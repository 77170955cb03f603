#pragma once
// The small virtual-memory interface the vmm backend is written against: reserve address space
// once, create physical handles, map a handle into the reservation, grant access, unmap, release,
// free the reservation. Two implementations: POSIX (vmm/posix_vm_driver.hpp: mmap over one memfd,
// host memory) and CUDA (vmm/cuda_vm_driver.hpp: cuMem* through a CudaDriverApi table).
//
// Conventions shared by both (and by every future one):
//  * Sizes and addresses of create/map/unmap/set_access are multiples of granularity(); the
//    backend's page size is a multiple of it.
//  * Running out of memory is a value where it is expected at run time: create() returns nullopt
//    and map() returns false, with nothing changed. Every other failure (a contract violation, an
//    injected fault, an unexpected errno or CUresult) throws kvlab::Error (CudaError for CUDA)
//    with nothing changed, and reserve() throws OutOfMemory when address space is exhausted.
//  * A mapping is not accessible until set_access(); unmap turns the range back into reservation.
//  * synchronize() waits for device work that may still read mapped memory: call it before
//    unmapping anything a kernel may have used (a no-op for host memory, where kernels are
//    synchronous).
//  * Implementations are thread-safe: the vmm backend's background mapper calls them from its own
//    thread while the foreground may call them too.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "alloc/core/device.hpp"

namespace kvlab {

/// An opaque physical allocation: a memfd extent (POSIX) or a CUmemGenericAllocationHandle (CUDA).
using PhysHandle = std::uint64_t;

/// The calls of the interface, for fault hooks and counters.
enum class VmCall : std::uint8_t { reserve, free_reservation, create, release, map, set_access, unmap, synchronize };
inline constexpr int kVmCallCount = 8;
[[nodiscard]] const char* to_string(VmCall call) noexcept;
/// A page size as backend names write it: "64k" for 65536, "2m" for 2 MiB, "6144" for sizes that
/// are no whole KiB (vmm-SIZE, elastic-B-SIZE).
[[nodiscard]] std::string page_size_name(std::size_t bytes);

/// What a fault hook makes a call do (tests): nothing, fail as out of memory, fail as an error.
enum class VmFault : std::uint8_t { none, out_of_memory, error };

class VmDriver {
 public:
  VmDriver() = default;
  VmDriver(const VmDriver&) = delete;
  VmDriver& operator=(const VmDriver&) = delete;
  virtual ~VmDriver() = default;

  /// "posix" or "cuda".
  [[nodiscard]] virtual std::string name() const = 0;
  /// Where the mapped memory lives (what copy_bytes and the kernels must use).
  [[nodiscard]] virtual Device device() const noexcept = 0;
  /// The unit of create/map/unmap/set_access: 4 KiB on x86-64 Linux, 2 MiB on current GPUs.
  [[nodiscard]] virtual std::size_t granularity() const noexcept = 0;

  /// Reserves `bytes` (a granularity multiple) of address space aligned to `alignment` (a power of
  /// two, 0: the granularity). Inaccessible until mapped. Throws OutOfMemory when none is left.
  [[nodiscard]] virtual void* reserve(std::size_t bytes, std::size_t alignment) = 0;
  /// Gives a reservation back; it must hold no mapping.
  virtual void free_reservation(void* base, std::size_t bytes) = 0;

  /// A physical allocation of `bytes` (a granularity multiple); nullopt when memory is exhausted.
  [[nodiscard]] virtual std::optional<PhysHandle> create(std::size_t bytes) = 0;
  /// Gives a physical allocation back; it must not be mapped.
  virtual void release(PhysHandle handle) = 0;

  /// Maps all of `handle` (whose size is `bytes`) at `va` inside a reservation, over unmapped
  /// bytes. Returns false, with nothing mapped, when memory (page tables, VMAs) is exhausted.
  [[nodiscard]] virtual bool map(void* va, std::size_t bytes, PhysHandle handle) = 0;
  /// Makes a fully mapped range readable and writable by the device.
  virtual void set_access(void* va, std::size_t bytes) = 0;
  /// Unmaps exactly one earlier map(va, bytes, ...); the range becomes reservation again. The bytes
  /// stay in the handle: mapping it again elsewhere shows them.
  virtual void unmap(void* va, std::size_t bytes) = 0;
  /// Waits until no device work may still touch mapped memory (call before unmap).
  virtual void synchronize() = 0;
};

}  // namespace kvlab
