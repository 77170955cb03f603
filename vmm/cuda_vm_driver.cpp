// Compiled in every build; the body exists only where the CUDA toolkit headers were found.
#if KVLAB_HAS_CUDA_HEADERS
#include "vmm/cuda_vm_driver.hpp"

#include <cstdint>
#include <string>

namespace kvlab {

namespace {
CUdeviceptr dptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }
}  // namespace

CudaVmDriver::CudaVmDriver(const CudaDriverApi& api, CudaVmOptions options)
    : api_(api), options_(options), ctx_(api, options.device_ordinal) {}

void* CudaVmDriver::reserve(std::size_t bytes, std::size_t alignment) {
  CUdeviceptr base = 0;
  KVLAB_CU_TRY(api_, cuMemAddressReserve(&base, bytes, alignment, 0, 0));  // OOM throws OutOfMemory
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(base));       // NOLINT(performance-no-int-to-ptr)
}

void CudaVmDriver::free_reservation(void* base, std::size_t bytes) {
  KVLAB_CU_TRY(api_, cuMemAddressFree(dptr(base), bytes));
}

std::optional<PhysHandle> CudaVmDriver::create(std::size_t bytes) {
  const CUmemAllocationProp p = ctx_.pinned_prop();
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
  const CUmemAccessDesc desc = ctx_.read_write_access();
  KVLAB_CU_TRY(api_, cuMemSetAccess(dptr(va), bytes, &desc, 1));
}

void CudaVmDriver::unmap(void* va, std::size_t bytes) { KVLAB_CU_TRY(api_, cuMemUnmap(dptr(va), bytes)); }

void CudaVmDriver::synchronize() {
  // The calling thread (the background mapper's, say) may have no current context yet.
  const CUresult r = ctx_.synchronize();
  if (r != CUDA_SUCCESS) detail::throw_cu_error(api_, r, "cuCtxSetCurrent + cuCtxSynchronize", __FILE__, __LINE__);
}

}  // namespace kvlab
#endif  // KVLAB_HAS_CUDA_HEADERS
