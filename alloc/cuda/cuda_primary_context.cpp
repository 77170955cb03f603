// Compiled in every build; the body exists only where the CUDA toolkit headers were found.
#if KVLAB_HAS_CUDA_HEADERS
#include "alloc/cuda/cuda_primary_context.hpp"

#include "alloc/core/error.hpp"

namespace kvlab {

CudaPrimaryContext::CudaPrimaryContext(const CudaDriverApi& api, int ordinal) : api_(api) {
  KVLAB_CU_TRY(api_, cuInit(0));
  KVLAB_CU_TRY(api_, cuDeviceGet(&device_, ordinal));
  KVLAB_CU_TRY(api_, cuDevicePrimaryCtxRetain(&context_, device_));
  try {
    const CUmemAllocationProp p = pinned_prop();
    KVLAB_CU_TRY(api_, cuMemGetAllocationGranularity(&granularity_, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    KVLAB_ASSERT(granularity_ > 0);
  } catch (...) {
    (void)api_.cuDevicePrimaryCtxRelease(device_);
    throw;
  }
}

CudaPrimaryContext::~CudaPrimaryContext() { (void)api_.cuDevicePrimaryCtxRelease(device_); }

CUmemAllocationProp CudaPrimaryContext::pinned_prop() const noexcept {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device_;
  return p;
}

CUmemAccessDesc CudaPrimaryContext::read_write_access() const noexcept {
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device_;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return desc;
}

CUresult CudaPrimaryContext::synchronize() const noexcept {
  const CUresult r = api_.cuCtxSetCurrent(context_);
  return r != CUDA_SUCCESS ? r : api_.cuCtxSynchronize();
}

}  // namespace kvlab
#endif  // KVLAB_HAS_CUDA_HEADERS
