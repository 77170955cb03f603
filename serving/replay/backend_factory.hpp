#pragma once
// Backends by name, the one place the command line, sweeps and tests turn a name into a backend.
// Each backend family (contiguous-, paged-, vmm-, elastic-, and any new one) is one entry of a
// registry: a name prefix, the forms it accepts and a maker. A family kvlab ships is one file in
// serving/replay/families/ and one line of the registry; code outside may add its own with
// register_backend_family (docs/backend-interface.md). An unknown name fails loudly, listing the
// known forms.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "alloc/core/device.hpp"
#include "alloc/backend/kv_backend.hpp"
#include "alloc/memory/memory_resource.hpp"
#include "alloc/memory/physical_budget.hpp"
#include "vmm/vm_driver.hpp"

namespace kvlab {

struct CudaDriverApi;    // alloc/cuda/cuda_driver.hpp
class CudaDriverDouble;  // alloc/cuda/emulated/cuda_driver_double.hpp
class FaultInjector;     // alloc/faults/fault_injection.hpp

/// What one device gives a run: the memory resource its KV pools, per-batch arrays and kernel
/// arguments come from, its swap space, and its virtual-memory driver for vmm backends. The one
/// place a device (`--device host|cuda[:N]|emulated`, docs/devices.md) becomes memory resources
/// and drivers:
///  * host: the host memory resource; vmm backends map memfd pages (PosixVmDriver).
///  * cuda[:N]: device memory through the real driver's VMM calls (CudaVmmMemoryResource over
///    cuda_driver()), pinned host swap space, vmm through CudaVmDriver on the real driver.
///  * emulated: a contract-checking CUDA driver double (2 MiB granularity, as stock drivers) in
///    place of the driver, and then the very code of cuda: the same memory resource and vmm driver
///    over the double's table; the kernels are the CUDA ones under the SIMT emulator.
class DeviceContext {
 public:
  /// `device_bytes`: the emulated device's memory (the KV capacity plus headroom; 0: 8 GiB).
  /// Throws Error "--device cuda:0: no CUDA GPU found (...)" without a usable GPU and for a GPU
  /// index this machine does not have; InvalidArgument in a build without the CUDA headers.
  explicit DeviceContext(const DeviceSpec& spec, std::size_t device_bytes = 0);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  [[nodiscard]] const DeviceSpec& spec() const noexcept;
  [[nodiscard]] Device device() const noexcept { return spec().kind; }
  /// KV pools, per-batch arrays, the kernels' queries and outputs.
  [[nodiscard]] MemoryResource& memory() noexcept;
  /// Swap space and host cache tiers: pinned host memory on a GPU; nullptr: the host resource.
  [[nodiscard]] MemoryResource* swap_memory() noexcept;
  /// The driver's allocation granularity (vmm page sizes must be multiples of it); 0 on the host.
  [[nodiscard]] std::size_t granularity() const noexcept;
  /// The driver table the device's memory and vmm drivers call: the real driver's (cuda) or the
  /// double's (emulated), logged when KVLAB_DRIVER_LOG is set. Throws InvalidArgument on the host.
  [[nodiscard]] const CudaDriverApi& driver_api() const;
  /// Emulated: the driver double (fault injection, call counts); nullptr otherwise.
  [[nodiscard]] CudaDriverDouble* driver_double() noexcept;
  /// Emulated: from now, driver calls that change memory (create, map, set access, unmap,
  /// release, reserve, free, synchronise) also fail when `faults` says so (nullptr: stop).
  /// Elsewhere: nothing (faults reach copies only).
  void inject_driver_faults(FaultInjector* faults);
  /// Emulated: from now every cuMemUnmap fails with CUDA_ERROR_UNKNOWN (true) or none does (false),
  /// as every deallocation failed on the H200 (`--inject-faults teardown`). Elsewhere InvalidArgument.
  void refuse_unmaps(bool refuse);
  /// What is still held once the backends are gone: emulated, device memory, mappings or
  /// reservations and contract violations (the double sees everything); cuda, the device memory
  /// resource's live allocations and refused frees (mappings a vmm backend leaked are the
  /// driver's, which kvlab cannot list). One line each, only those new since the last call (a
  /// leak stays in the driver: the backend that left it is named once); empty when clean, and on
  /// the host.
  [[nodiscard]] std::string problems();
  /// One line for the run header: "host memory", "CUDA device 0 (NAME)", "emulated ...".
  [[nodiscard]] std::string describe() const;

  struct Impl;  // serving/replay/backend_factory.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

struct BackendOptions {
  ModelGeometry model;
  std::size_t capacity_bytes = 0;
  std::int64_t max_seq_len = 0;      ///< 0: the model's max context
  MemoryResource* memory = nullptr;  ///< nullptr: accounting only
  /// The device the memory is on (its vmm driver, swap space, granularity); nullptr: the host.
  /// Given without `memory`, accounting only, but vmm page sizes are checked against the device.
  DeviceContext* device = nullptr;
  /// Host vmm backends: the process's memory-mapping limit to report as SystemLimit near (0: the
  /// kernel's vm.max_map_count; a test seam, vmm/posix_vm_driver.hpp).
  std::int64_t max_map_count = 0;
  /// Physical memory shared with other backends (the tenants of one GPU, serving/replay/tenants.hpp);
  /// nullptr: the backend's own capacity. Only families that map memory on demand take one
  /// (BackendFamily::shares_memory); make_backend refuses it for the others.
  std::shared_ptr<PhysicalBudget> budget;
};

/// One family of backends: every name that starts with `prefix` is made by `make` (which throws
/// InvalidArgument naming the name when the rest is not one of its forms).
struct BackendFamily {
  std::string prefix;                   ///< e.g. "paged-"
  std::string usage;                    ///< e.g. "paged-B[-hash|-radix]", for error messages and help
  std::vector<std::string> test_forms;  ///< forms the conformance suite runs (tiny model, 300-2000 tokens)
  std::function<std::unique_ptr<KvBackend>(std::string_view name, const BackendOptions& options)> make;
  /// Whether its backends honour BackendOptions::budget (memory shared with other backends).
  bool shares_memory = false;
};

/// Adds a family. Throws InvalidArgument when the prefix is empty, has no maker, or is taken.
void register_backend_family(BackendFamily family);
/// The registered families, the built-in ones first.
[[nodiscard]] std::vector<BackendFamily> backend_families();

/// Known forms (each family's usage string): contiguous-max|pow2|oracle[-buddy];
/// paged-B[-hash[-hostG]|-radix[-region]|-region] (B = block size in tokens, 1..1024);
/// vmm-SIZE[-mega][-overlap][-eagerN][-nodefer][-prefix] (SIZE a multiple of 4 KiB written with k or m: vmm-4k,
/// vmm-64k, vmm-2m; deferred reclamation on unless -nodefer).
[[nodiscard]] std::unique_ptr<KvBackend> make_backend(std::string_view name, const BackendOptions& options);

/// The virtual-memory driver for storage on `device` (nullptr: the host): memfd + mmap with
/// `host_capacity` bytes of address space on the host, the CUDA VMM calls on a GPU (the real
/// driver, or the emulated device's double).
[[nodiscard]] std::shared_ptr<VmDriver> make_vm_driver(DeviceContext* device, std::size_t host_capacity,
                                                       std::int64_t max_map_count = 0);
/// Whether the family of backend `name` can share memory with other backends (BackendFamily::
/// shares_memory); false for an unknown name.
[[nodiscard]] bool backend_shares_memory(std::string_view name);
/// The test forms of every family (what the conformance suite and the fuzzer run).
[[nodiscard]] std::vector<std::string> backend_forms();
/// What `kvlab compare` runs by default: every contiguous policy, paged and vmm at a few sizes.
[[nodiscard]] std::string default_compare_backends();

}  // namespace kvlab
