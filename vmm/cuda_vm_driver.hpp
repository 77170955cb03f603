#pragma once
// The virtual-memory driver over CUDA's VMM API (cuMemAddressReserve, cuMemCreate, cuMemMap, ...),
// reached only through a `const CudaDriverApi&`: production passes cuda_driver(), tests the
// contract-checking host double (alloc/cuda/emulated/cuda_driver_double.hpp).
#if !KVLAB_HAS_CUDA_HEADERS
#error "vmm/cuda_vm_driver.hpp needs the CUDA toolkit headers; guard the include with KVLAB_HAS_CUDA_HEADERS"
#endif

#include "alloc/cuda/cuda_driver.hpp"
#include "alloc/cuda/cuda_primary_context.hpp"
#include "vmm/vm_driver.hpp"

namespace kvlab {

struct CudaVmOptions {
  int device_ordinal = 0;
  /// The table is the host double: mapped "device" memory is host memory, so the backend copies
  /// and runs kernels on the host (Device::host). False for the real driver.
  bool host_memory = false;
  /// The table is the double and the backend runs as on a GPU (`--device emulated`): device() is
  /// Device::emulated, so per-batch arrays are staged in device memory and the CUDA kernels run
  /// under the SIMT emulator. Takes precedence over host_memory.
  bool emulated = false;
};

// Design note
//
// Rationale. vAttention keeps the KV cache virtually contiguous (one [batch][seq][head][dim] tensor
// per layer, read by unmodified contiguous kernels) and backs it with physical memory only as
// sequences grow. CUDA exposes exactly the needed primitives in its driver VMM API; this class is
// the thin, checked layer between them and the backend, in the manner of PyTorch's
// ExpandableSegment and TensorRT-LLM's CudaVmmArena.
//
// Approach.
//  * Construction: cuInit(0), cuDeviceGet, retain the device's primary context (the runtime's,
//    shared with the kernels), read cuMemGetAllocationGranularity(MINIMUM) for pinned device
//    memory. The destructor releases the primary context.
//  * reserve/free_reservation: cuMemAddressReserve / cuMemAddressFree, once per backend.
//  * create/release: cuMemCreate / cuMemRelease of one page each. cuMemCreate is slow (it clears
//    and registers memory), so the backend's page pool calls it for every page once, up front.
//  * map: cuMemMap(va, bytes, offset 0, handle) (the documented "offset must be zero"), then
//    set_access: cuMemSetAccess(READWRITE) for this device.
//  * unmap: cuMemUnmap. The GPU may still be reading the page from a kernel of this step, so the
//    backend calls synchronize() — cuCtxSynchronize on the primary context, made current on the
//    calling thread first (the background mapper's thread has no context of its own) — once
//    before each batch of unmaps.
//  * Out of memory is a value: CUDA_ERROR_OUT_OF_MEMORY from cuMemCreate gives nullopt, from
//    cuMemMap false; any other CUresult throws CudaError naming the call (KVLAB_CU_TRY), and
//    cuMemAddressReserve's out of memory throws OutOfMemory. Each call is one driver call, so a
//    failure changes nothing; rolling back a multi-page operation is the backend's job.
//
// Limitations. One device; no peer access for other GPUs (a second cuMemSetAccess descriptor
// would add it); cuCtxSynchronize waits for all work of the context, not one stream, which is
// coarse but safe (the KV of every stream may live in the unmapped page). The granularity is the
// driver's minimum (2 MiB on current GPUs): vAttention's 64 KiB pages need its modified driver,
// so smaller page sizes are refused here with InvalidArgument by the backend.
class CudaVmDriver final : public VmDriver {
 public:
  /// Initialises the driver and retains the primary context; throws CudaError when the driver or
  /// device is not there.
  explicit CudaVmDriver(const CudaDriverApi& api, CudaVmOptions options = {});

  [[nodiscard]] std::string name() const override { return "cuda"; }
  [[nodiscard]] Device device() const noexcept override {
    return options_.emulated ? Device::emulated : options_.host_memory ? Device::host : Device::cuda;
  }
  [[nodiscard]] std::size_t granularity() const noexcept override { return ctx_.granularity(); }

  [[nodiscard]] void* reserve(std::size_t bytes, std::size_t alignment) override;
  void free_reservation(void* base, std::size_t bytes) override;
  [[nodiscard]] std::optional<PhysHandle> create(std::size_t bytes) override;
  void release(PhysHandle handle) override;
  [[nodiscard]] bool map(void* va, std::size_t bytes, PhysHandle handle) override;
  void set_access(void* va, std::size_t bytes) override;
  void unmap(void* va, std::size_t bytes) override;
  void synchronize() override;

  [[nodiscard]] const CudaDriverApi& api() const noexcept { return api_; }

 private:
  const CudaDriverApi& api_;
  CudaVmOptions options_;
  CudaPrimaryContext ctx_;
};

}  // namespace kvlab
