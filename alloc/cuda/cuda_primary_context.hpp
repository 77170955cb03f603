#pragma once
// One device's primary context, retained for as long as the object lives, with what every user of
// the driver's virtual-memory API asks of it: the allocation properties and access descriptor for
// pinned memory on that device, and their granularity. Shared by the vmm backend's driver
// (vmm/cuda_vm_driver) and the device memory resource (alloc/cuda/cuda_vmm_memory_resource), so both
// set the driver up the same way.
#if !KVLAB_HAS_CUDA_HEADERS
#error \
    "alloc/cuda/cuda_primary_context.hpp needs the CUDA toolkit headers; guard the include with KVLAB_HAS_CUDA_HEADERS"
#endif

#include <cstddef>

#include "alloc/cuda/cuda_driver.hpp"

namespace kvlab {

// Rationale. The primary context is the CUDA runtime's own, so kernels launched through the
// runtime and memory mapped through the driver share it; retaining it (not creating a context)
// keeps one context per device however many users there are.
//
// Approach. The constructor calls cuInit(0), cuDeviceGet, cuDevicePrimaryCtxRetain and
// cuMemGetAllocationGranularity(MINIMUM); when the last fails the retain is undone before the
// CudaError leaves, so a failed construction holds nothing. The destructor releases the context.
//
// Limitations. Not copyable or movable (one retain, one release). Minimum granularity only.
class CudaPrimaryContext {
 public:
  /// Throws CudaError (naming the call) when the driver, the device or the granularity query fails.
  CudaPrimaryContext(const CudaDriverApi& api, int ordinal);
  ~CudaPrimaryContext();
  CudaPrimaryContext(const CudaPrimaryContext&) = delete;
  CudaPrimaryContext& operator=(const CudaPrimaryContext&) = delete;

  [[nodiscard]] CUdevice device() const noexcept { return device_; }
  [[nodiscard]] CUcontext context() const noexcept { return context_; }
  /// cuMemGetAllocationGranularity(MINIMUM) for pinned memory on this device (2 MiB on current GPUs).
  [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }
  /// Pinned memory on this device, as cuMemCreate takes it.
  [[nodiscard]] CUmemAllocationProp pinned_prop() const noexcept;
  /// Read-write access for this device, as cuMemSetAccess takes it.
  [[nodiscard]] CUmemAccessDesc read_write_access() const noexcept;
  /// Makes the context current on the calling thread (a background thread may have none) and waits
  /// for all its work; CUDA_SUCCESS or the first failing call's result.
  [[nodiscard]] CUresult synchronize() const noexcept;

 private:
  const CudaDriverApi& api_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  std::size_t granularity_ = 0;
};

}  // namespace kvlab
