#include "alloc/transfer/copy.hpp"

#include <cstring>

#include "alloc/core/error.hpp"
#include "alloc/faults/fault_injection.hpp"
#if KVLAB_HAS_CUDA
#include "alloc/cuda/cuda_check.hpp"
#endif

namespace kvlab {

void copy_bytes(Device device, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  throw_if_copy_fault("copy");
  if (host_addressable(device)) {  // host, or the emulated device's host-backed memory
    std::memmove(dst, src, bytes);
    return;
  }
#if KVLAB_HAS_CUDA
  // cudaMemcpyDefault: with unified addressing the runtime works out host or device on each side,
  // so the same call serves device copies and swaps to and from pinned host memory.
  KVLAB_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
#else
  KVLAB_THROW(InvalidArgument, "device copy requested in a build without CUDA");
#endif
}

void upload_bytes(Device device, void* dst, const void* host_src, std::size_t bytes) {
  if (bytes == 0) return;
  throw_if_copy_fault("upload");
  if (host_addressable(device)) {
    std::memmove(dst, host_src, bytes);
    return;
  }
#if KVLAB_HAS_CUDA
  KVLAB_CUDA_TRY(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
#else
  KVLAB_THROW(InvalidArgument, "device upload requested in a build without CUDA");
#endif
}

}  // namespace kvlab
