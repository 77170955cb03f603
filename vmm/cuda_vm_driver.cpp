// Compiled in every build; the body exists only where the CUDA toolkit headers were found.
#if KVLAB_HAS_CUDA_HEADERS
#include "vmm/cuda_vm_driver.hpp"

#include <cstdint>
#include <string>

namespace kvlab {

namespace {
CUdeviceptr dptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }
}  // namespace

CudaVmDriver::CudaVmDriver(const CudaDriverApi& api, CudaVmOptions options) : api_(api), options_(options) {
  KVLAB_CU_TRY(api_, cuInit(0));
  KVLAB_CU_TRY(api_, cuDeviceGet(&device_, options_.device_ordinal));
  KVLAB_CU_TRY(api_, cuDevicePrimaryCtxRetain(&context_, device_));
  try {
    const CUmemAllocationProp p = prop();
    KVLAB_CU_TRY(api_, cuMemGetAllocationGranularity(&granularity_, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    KVLAB_ASSERT(granularity_ > 0);
  } catch (...) {
    (void)api_.cuDevicePrimaryCtxRelease(device_);
    throw;
  }
}

CudaVmDriver::~CudaVmDriver() { (void)api_.cuDevicePrimaryCtxRelease(device_); }

CUmemAllocationProp CudaVmDriver::prop() const noexcept {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device_;
  return p;
}

void* CudaVmDriver::reserve(std::size_t bytes, std::size_t alignment) {
  CUdeviceptr base = 0;
  KVLAB_CU_TRY(api_, cuMemAddressReserve(&base, bytes, alignment, 0, 0));  // OOM throws OutOfMemory
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(base));      // NOLINT(performance-no-int-to-ptr)
}

void CudaVmDriver::free_reservation(void* base, std::size_t bytes) {
  KVLAB_CU_TRY(api_, cuMemAddressFree(dptr(base), bytes));
}

std::optional<PhysHandle> CudaVmDriver::create(std::size_t bytes) {
  const CUmemAllocationProp p = prop();
  CUmemGenericAllocationHandle handle = 0;
  const CUresult r = api_.cuMemCreate(&handle, bytes, &p, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return std::nullopt;
  if (r != CUDA_SUCCESS) detail::throw_cu_error(api_, r, "cuMemCreate(&handle, bytes, &prop, 0)", __FILE__, __LINE__);
  return static_cast<PhysHandle>(handle);
}

void CudaVmDriver::release(PhysHandle handle) {
  KVLAB_CU_TRY(api_, cuMemRelease(static_cast<CUmemGenericAllocationHandle>(handle)));
}

bool CudaVmDriver::map(void* va, std::size_t bytes, PhysHandle handle) {
  const CUresult r = api_.cuMemMap(dptr(va), bytes, 0, static_cast<CUmemGenericAllocationHandle>(handle), 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return false;
  if (r != CUDA_SUCCESS) detail::throw_cu_error(api_, r, "cuMemMap(va, bytes, 0, handle, 0)", __FILE__, __LINE__);
  return true;
}

void CudaVmDriver::set_access(void* va, std::size_t bytes) {
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device_;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  KVLAB_CU_TRY(api_, cuMemSetAccess(dptr(va), bytes, &desc, 1));
}

void CudaVmDriver::unmap(void* va, std::size_t bytes) { KVLAB_CU_TRY(api_, cuMemUnmap(dptr(va), bytes)); }

void CudaVmDriver::synchronize() {
  // The calling thread (the background mapper's, say) may have no current context yet.
  KVLAB_CU_TRY(api_, cuCtxSetCurrent(context_));
  KVLAB_CU_TRY(api_, cuCtxSynchronize());
}

}  // namespace kvlab
#endif  // KVLAB_HAS_CUDA_HEADERS
