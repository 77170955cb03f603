#include "alloc/cuda/cuda_memory_resource.hpp"

#include "alloc/cuda/cuda_check.hpp"
#include "alloc/cuda/cuda_runtime.hpp"

namespace kvlab {

CudaMemoryResource::CudaMemoryResource(int device) : device_(device) {
  if (!cuda_status().available) KVLAB_THROW(CudaError, cuda_status().message);
  KVLAB_EXPECTS(device >= 0 && device < cuda_status().device_count, "CUDA device index out of range");
}

void* CudaMemoryResource::do_allocate(std::size_t bytes, std::size_t alignment) {
  KVLAB_EXPECTS(alignment <= 256, "cudaMalloc guarantees 256-byte alignment at most");
  KVLAB_CUDA_TRY(cudaSetDevice(device_));
  void* p = nullptr;
  KVLAB_CUDA_TRY(cudaMalloc(&p, bytes));
  return p;
}

void CudaMemoryResource::do_deallocate(void* p, std::size_t, std::size_t) noexcept {
  cudaSetDevice(device_);
  cudaFree(p);  // synchronizes with the device, as the contract of freeing in-use KV requires
}

CudaPinnedMemoryResource::CudaPinnedMemoryResource() {
  if (!cuda_status().available) KVLAB_THROW(CudaError, cuda_status().message);
}

void* CudaPinnedMemoryResource::do_allocate(std::size_t bytes, std::size_t alignment) {
  KVLAB_EXPECTS(alignment <= 4096, "cudaMallocHost guarantees page alignment at most");
  void* p = nullptr;
  KVLAB_CUDA_TRY(cudaMallocHost(&p, bytes));
  return p;
}

void CudaPinnedMemoryResource::do_deallocate(void* p, std::size_t, std::size_t) noexcept { cudaFreeHost(p); }

}  // namespace kvlab
