#pragma once
// Byte copies within one device's memory (host: memcpy; cuda: cudaMemcpy, synchronous).
#include <cstddef>

#include "alloc/device.hpp"

namespace kvlab {

void copy_bytes(Device device, void* dst, const void* src, std::size_t bytes);
/// Host memory to `device` memory.
void upload_bytes(Device device, void* dst, const void* host_src, std::size_t bytes);

}  // namespace kvlab
