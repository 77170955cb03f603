#pragma once
// Run-time discovery of CUDA. kvlab binaries link the CUDA runtime statically and never link
// libcuda, so they start everywhere; whether a GPU can be used is a question asked here, once.
#include <string>

namespace kvlab {

struct CudaStatus {
  bool compiled = false;   ///< built with nvcc (KVLAB_HAS_CUDA)
  bool available = false;  ///< a driver and at least one device answered
  int device_count = 0;
  int driver_version = 0;   ///< e.g. 12040; 0 when no driver
  int runtime_version = 0;  ///< version of the statically linked runtime
  std::string device_name;  ///< device 0
  std::string message;      ///< one line: why CUDA is unavailable, or what was found
};

/// Probes the driver and devices (cached after the first call). Never throws, never aborts.
[[nodiscard]] const CudaStatus& cuda_status();

}  // namespace kvlab
