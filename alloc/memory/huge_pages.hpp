#pragma once
// Host memory on transparent huge pages where the kernel allows them.
//
// Rationale. Streaming a KV cache over 4 KiB pages costs a TLB miss every 4 KiB and stops the
// hardware prefetchers at every page boundary; 2 MiB pages remove both. THP's common default mode
// is "madvise", in which plain malloc gets 4 KiB pages: only ranges advised with MADV_HUGEPAGE get
// huge ones. The host kernels' KV pools (a replay or figure that executes on the host), the
// benchmarks' buffers and the bandwidth probe all come from here, so the kernels and the bandwidth
// they are measured against see the same page size (issue 34).
//
// Approach. Blocks of 2 MiB and more are 2 MiB aligned and advised; smaller ones are plain
// allocations (a huge page would be mostly waste). The advice is best effort: where THP is "never"
// or absent the memory is ordinary, and nothing fails. Nothing is touched here, so the memory is
// still committed on first touch, now 2 MiB at a time.
//
// Limitations. A pool that is touched sparsely costs up to 2 MiB of RAM per touched 2 MiB, not
// 4 KiB. vmm's host pages are a memfd (shared memory), whose huge pages follow a separate setting
// (shmem_enabled, vmm/posix_vm_driver.hpp); hugetlbfs pages (reserved up front) are not used.
#include <cstddef>
#include <cstdlib>
#include <string>

#include "alloc/memory/memory_resource.hpp"

namespace kvlab {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

/// Advises [p, p + bytes) as transparent huge pages (p page-aligned). Returns whether the kernel
/// took the advice (false where THP is absent); either way nothing changes but the page size.
bool advise_huge_pages(void* p, std::size_t bytes) noexcept;

/// The kernel's THP mode, the bracketed word of /sys/kernel/mm/transparent_hugepage/`setting`
/// ("enabled": always, madvise or never; "shmem_enabled": always, within_size, advise, never, ...),
/// or "unknown" where the kernel has no THP.
[[nodiscard]] std::string transparent_huge_page_mode(const std::string& setting = "enabled");

/// One line for a run's header: what the host's KV memory gets, e.g. "host KV pools of 2 MiB and
/// more on 2 MiB pages (transparent huge pages: madvise; for shared memory, vmm's host pages: never)".
[[nodiscard]] std::string describe_host_huge_pages();

/// `bytes` of untouched memory, 2 MiB aligned and advised as huge pages when at least one huge page
/// long. Throws std::bad_alloc. Free with std::free.
[[nodiscard]] void* allocate_huge_page_backed(std::size_t bytes);

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

/// Host memory as HostMemoryResource gives it, with blocks of 2 MiB and more on huge pages: the
/// resource of host KV pools that host kernels read. Out of memory throws OutOfMemory.
class HugePageHostMemoryResource final : public MemoryResource {
 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept override;
  [[nodiscard]] Device do_device() const noexcept override { return Device::host; }
  [[nodiscard]] std::string do_name() const override { return "host (huge pages)"; }
};

/// The process-wide huge-page host resource.
[[nodiscard]] HugePageHostMemoryResource& huge_page_host_memory_resource();

}  // namespace kvlab
