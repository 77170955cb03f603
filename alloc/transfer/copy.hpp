#pragma once
// Byte copies for a backend on `device` (host and emulated: memmove; cuda: cudaMemcpy with cudaMemcpyDefault,
// synchronous, so either side may be device or pinned host memory).
#include <cstddef>

#include "alloc/core/device.hpp"

namespace kvlab {

void copy_bytes(Device device, void* dst, const void* src, std::size_t bytes);
/// Host memory to `device` memory.
void upload_bytes(Device device, void* dst, const void* host_src, std::size_t bytes);

}  // namespace kvlab
