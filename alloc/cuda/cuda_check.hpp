#pragma once
// Check macros for CUDA runtime calls (only for translation units built with KVLAB_HAS_CUDA).
// The error names the failing call, the cudaError_t name and the file:line, as RMM's RMM_CUDA_TRY.
#include <cuda_runtime_api.h>

#include <string>

#include "alloc/core/error.hpp"

#define KVLAB_CUDA_TRY(call)                                                                                     \
  do {                                                                                                           \
    const cudaError_t kvlab_status_ = (call);                                                                    \
    if (kvlab_status_ != cudaSuccess) {                                                                          \
      (void)cudaGetLastError(); /* clear sticky-free errors so later calls start clean */                        \
      const std::string kvlab_msg_ = std::string(#call) + " failed: " + cudaGetErrorName(kvlab_status_) + " (" + \
                                     cudaGetErrorString(kvlab_status_) + ")";                                    \
      if (kvlab_status_ == cudaErrorMemoryAllocation) KVLAB_THROW(::kvlab::OutOfMemory, kvlab_msg_);             \
      KVLAB_THROW(::kvlab::CudaError, kvlab_msg_);                                                               \
    }                                                                                                            \
  } while (0)
