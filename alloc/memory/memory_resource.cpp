#include "alloc/memory/memory_resource.hpp"

#include <bit>
#include <cstdlib>
#include <new>

#include "alloc/core/error.hpp"

namespace kvlab {

void* MemoryResource::allocate(std::size_t bytes, std::size_t alignment) {
  KVLAB_EXPECTS(std::has_single_bit(alignment), "alignment must be a power of two");
  if (bytes == 0) return nullptr;
  return do_allocate(bytes, alignment);
}

void MemoryResource::deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept {
  if (p == nullptr) return;
  do_deallocate(p, bytes, alignment);
}

void* HostMemoryResource::do_allocate(std::size_t bytes, std::size_t alignment) {
  alignment = alignment < alignof(std::max_align_t) ? alignof(std::max_align_t) : alignment;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, bytes) != 0 || p == nullptr) {
    KVLAB_THROW(OutOfMemory, "host allocation of " + std::to_string(bytes) + " bytes failed");
  }
  return p;
}

void HostMemoryResource::do_deallocate(void* p, std::size_t, std::size_t) noexcept { std::free(p); }

HostMemoryResource& host_memory_resource() {
  static HostMemoryResource resource;
  return resource;
}

}  // namespace kvlab
