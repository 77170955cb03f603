#pragma once
// Host memory backed by transparent huge pages where the kernel allows them (THP "madvise" mode is
// the common default, so plain malloc gets 4 KiB pages). Streaming a KV cache over 4 KiB pages
// costs a TLB miss every 4 KiB and stops the hardware prefetchers at every page boundary; 2 MiB
// pages remove both. Used for large host buffers the attention kernels and the bandwidth
// measurement stream, so both see the same page size.
#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace kvlab {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

/// `bytes` of untouched memory, 2 MiB aligned and advised as huge pages when at least one huge page
/// long (the advice is best effort: a kernel without THP still returns ordinary pages). Free with std::free.
inline void* allocate_huge_page_backed(std::size_t bytes) {
  if (bytes < kHugePageBytes) {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  const std::size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return p;
}

/// A std::allocator for large buffers (std::vector<T, HugePageAllocator<T>>).
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() noexcept = default;
  template <class U>
  explicit HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_huge_page_backed(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }
  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) noexcept { return true; }
};

}  // namespace kvlab
