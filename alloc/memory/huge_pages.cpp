#include "alloc/memory/huge_pages.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <new>

#include "alloc/core/error.hpp"

namespace kvlab {

bool advise_huge_pages(void* p, std::size_t bytes) noexcept {
#ifdef MADV_HUGEPAGE
  return ::madvise(p, bytes, MADV_HUGEPAGE) == 0;
#else
  (void)p;
  (void)bytes;
  return false;
#endif
}

std::string transparent_huge_page_mode(const std::string& setting) {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/" + setting);
  std::string modes;
  std::getline(in, modes);
  const auto open = modes.find('['), close = modes.find(']');
  return open != std::string::npos && close > open ? modes.substr(open + 1, close - open - 1) : "unknown";
}

std::string describe_host_huge_pages() {
  const std::string mode = transparent_huge_page_mode();
  const std::string pools = mode == "always" || mode == "madvise" ? "host KV pools of 2 MiB and more on 2 MiB pages"
                                                                  : "host KV pools on 4 KiB pages";
  return pools + " (transparent huge pages: " + mode +
         "; for shared memory, vmm's host pages: " + transparent_huge_page_mode("shmem_enabled") + ")";
}

namespace {
/// `bytes` aligned to `alignment`, or nullptr: blocks of a huge page and more are rounded up to
/// whole huge pages (so the advice covers their last bytes too), 2 MiB aligned and advised. Freed
/// with std::free whatever the alignment.
void* allocate_advised(std::size_t bytes, std::size_t alignment) noexcept {
  alignment = std::max(alignment, alignof(std::max_align_t));
  const bool huge = bytes >= kHugePageBytes;
  if (huge) {
    bytes = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    alignment = std::max(alignment, kHugePageBytes);
  }
  void* p = nullptr;
  if (posix_memalign(&p, alignment, bytes) != 0) return nullptr;
  if (huge) (void)advise_huge_pages(p, bytes);
  return p;
}
}  // namespace

void* allocate_huge_page_backed(std::size_t bytes) {
  void* p = allocate_advised(bytes == 0 ? 1 : bytes, alignof(std::max_align_t));
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void* HugePageHostMemoryResource::do_allocate(std::size_t bytes, std::size_t alignment) {
  void* p = allocate_advised(bytes, alignment);
  if (p == nullptr) KVLAB_THROW(OutOfMemory, "host allocation of " + std::to_string(bytes) + " bytes failed");
  return p;
}

void HugePageHostMemoryResource::do_deallocate(void* p, std::size_t, std::size_t) noexcept { std::free(p); }

HugePageHostMemoryResource& huge_page_host_memory_resource() {
  static HugePageHostMemoryResource resource;
  return resource;
}

}  // namespace kvlab
