#include "alloc/cuda/cuda_runtime.hpp"

#if KVLAB_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvlab {

namespace {
CudaStatus probe() {
  CudaStatus s;
#if KVLAB_HAS_CUDA
  s.compiled = true;
  cudaRuntimeGetVersion(&s.runtime_version);
  if (cudaDriverGetVersion(&s.driver_version) != cudaSuccess || s.driver_version == 0) {
    s.driver_version = 0;
    s.message = "no NVIDIA driver found (libcuda.so.1 could not be loaded); CUDA features are unavailable";
    return s;
  }
  const cudaError_t err = cudaGetDeviceCount(&s.device_count);
  if (err != cudaSuccess || s.device_count == 0) {
    s.device_count = 0;
    s.message = std::string("NVIDIA driver present but no usable device: ") +
                (err != cudaSuccess ? cudaGetErrorName(err) : "device count is 0");
    (void)cudaGetLastError();
    return s;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) s.device_name = prop.name;
  s.available = true;
  s.message = std::to_string(s.device_count) + " CUDA device(s); device 0: " + s.device_name;
#else
  s.message = "kvlab was built without CUDA (nvcc not found or KVLAB_ENABLE_CUDA=OFF)";
#endif
  return s;
}
}  // namespace

const CudaStatus& cuda_status() {
  static const CudaStatus status = probe();
  return status;
}

}  // namespace kvlab
