#include "vmm/posix_vm_driver.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "alloc/core/error.hpp"
#include "alloc/memory/huge_pages.hpp"

namespace kvlab {

std::string page_size_name(std::size_t bytes) {
  constexpr std::size_t kKiB = 1024, kMiB = kKiB * 1024;
  if (bytes != 0 && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + "m";
  if (bytes != 0 && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + "k";
  return std::to_string(bytes);
}

const char* to_string(VmCall call) noexcept {
  switch (call) {
    case VmCall::reserve:
      return "reserve";
    case VmCall::free_reservation:
      return "free_reservation";
    case VmCall::create:
      return "create";
    case VmCall::release:
      return "release";
    case VmCall::map:
      return "map";
    case VmCall::set_access:
      return "set_access";
    case VmCall::unmap:
      return "unmap";
    case VmCall::synchronize:
      return "synchronize";
  }
  return "?";
}

namespace {
std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }
std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
void* ptr(std::uintptr_t a) { return reinterpret_cast<void*>(a); }  // NOLINT(performance-no-int-to-ptr)
std::string hex(std::uintptr_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%zx", static_cast<std::size_t>(v));
  return buf;
}

// ---- the kernel's mapping limit ----------------------------------------------------------------
// Every page mapping is a memory map area of its own unless it merges with a neighbour; Linux
// allows vm.max_map_count of them per process (65530 by default). At small pages (vmm-4k) a large
// capacity reaches it: mmap then fails with ENOMEM (and so does malloc), which must not read as
// "out of KV memory". Near the limit (counted from /proc/self/maps) map() throws SystemLimit.

constexpr std::int64_t kMapHeadroom = 1024;  ///< areas left to malloc, threads and libraries

std::int64_t current_map_count() {
  std::int64_t lines = 0;
  if (std::FILE* f = std::fopen("/proc/self/maps", "r")) {
    for (int c; (c = std::fgetc(f)) != EOF;) lines += c == '\n';
    std::fclose(f);
  }
  return lines;
}

[[noreturn]] void throw_map_limit(std::int64_t areas, std::int64_t limit, std::size_t page_bytes) {
  KVLAB_THROW(SystemLimit, "mapping a " + std::to_string(page_bytes) + "-byte page: the process has " +
                               std::to_string(areas) +
                               " memory mappings, at the kernel's limit vm.max_map_count = " + std::to_string(limit) +
                               " (/proc/sys/vm/max_map_count); this is not out of KV memory: use a larger vmm page "
                               "size (e.g. vmm-64k or vmm-2m) or raise the limit (sysctl -w vm.max_map_count=1048576)");
}

/// Throws SystemLimit when the process is within kMapHeadroom of vm.max_map_count. Cheap until
/// the driver's own mappings could be near it: then the real count is read every 256 maps.
void check_map_limit(std::size_t driver_mappings, std::size_t page_bytes, std::int64_t limit) {
  static std::uint64_t calls = 0;  // under the driver's mutex
  if (limit <= 0 || static_cast<std::int64_t>(driver_mappings) * 2 < limit - 2 * kMapHeadroom) return;
  if (calls++ % 256 != 0) return;
  if (const std::int64_t areas = current_map_count(); areas >= limit - kMapHeadroom)
    throw_map_limit(areas, limit, page_bytes);
}
}  // namespace

std::int64_t PosixVmDriver::kernel_max_map_count() {
  static const std::int64_t limit = [] {
    std::int64_t n = 0;
    if (std::FILE* f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
      if (std::fscanf(f, "%" SCNd64, &n) != 1) n = 0;
      std::fclose(f);
    }
    return n;
  }();
  return limit;
}

PosixVmDriver::PosixVmDriver(std::size_t physical_bytes, std::int64_t max_map_count)
    : granularity_(static_cast<std::size_t>(::sysconf(_SC_PAGESIZE))),
      max_map_count_(max_map_count > 0 ? max_map_count : kernel_max_map_count()),
      advise_huge_pages_(transparent_huge_page_mode("shmem_enabled") == "advise") {
  KVLAB_EXPECTS(physical_bytes > 0, "the physical capacity must be positive");
  capacity_ = (physical_bytes + granularity_ - 1) / granularity_ * granularity_;
  fd_ = ::memfd_create("kvlab-vmm", MFD_CLOEXEC);
  if (fd_ < 0) KVLAB_THROW(Error, "PosixVmDriver: memfd_create failed: " + errno_text(errno));
  if (::ftruncate(fd_, static_cast<off_t>(capacity_)) != 0) {
    const int err = errno;
    ::close(fd_);
    KVLAB_THROW(Error, "PosixVmDriver: ftruncate of the memfd to " + std::to_string(capacity_) +
                           " bytes failed: " + errno_text(err));
  }
  free_extents_[0] = capacity_;
}

PosixVmDriver::~PosixVmDriver() {
  for (const auto& [base, bytes] : reservations_) ::munmap(ptr(base), bytes);  // takes mappings with it
  ::close(fd_);
}

void PosixVmDriver::set_fault_hook(FaultHook hook) {
  std::lock_guard lock(mutex_);
  hook_ = std::move(hook);
}

VmFault PosixVmDriver::enter(VmCall call) {
  ++calls_[static_cast<int>(call)];
  return hook_ ? hook_(call) : VmFault::none;
}

std::uint64_t PosixVmDriver::call_count(VmCall call) const {
  std::lock_guard lock(mutex_);
  return calls_[static_cast<int>(call)];
}

PosixVmUsage PosixVmDriver::usage() const {
  std::lock_guard lock(mutex_);
  return {reservations_.size(), reserved_bytes_, handles_.size(), physical_bytes_, mappings_.size(), mapped_bytes_};
}

void PosixVmDriver::check_aligned(const char* who, std::uintptr_t va, std::size_t bytes) const {
  if (bytes == 0 || va % granularity_ != 0 || bytes % granularity_ != 0) {
    KVLAB_THROW(InvalidArgument, std::string("PosixVmDriver::") + who + ": [" + hex(va) + ", +" +
                                     std::to_string(bytes) + ") is not a non-empty range of whole " +
                                     std::to_string(granularity_) + "-byte pages");
  }
}

bool PosixVmDriver::inside_one_reservation(std::uintptr_t va, std::size_t bytes) const {
  auto it = reservations_.upper_bound(va);
  if (it == reservations_.begin()) return false;
  --it;
  return va >= it->first && va + bytes <= it->first + it->second && va + bytes >= va;
}

bool PosixVmDriver::overlaps_mapping(std::uintptr_t va, std::size_t bytes) const {
  auto it = mappings_.lower_bound(va);
  if (it != mappings_.end() && it->first < va + bytes) return true;
  if (it == mappings_.begin()) return false;
  --it;
  return it->first + it->second > va;
}

bool PosixVmDriver::fully_mapped(std::uintptr_t va, std::size_t bytes) const {
  std::uintptr_t cursor = va;
  auto it = mappings_.upper_bound(va);
  if (it == mappings_.begin()) return false;
  --it;
  while (cursor < va + bytes) {
    if (it == mappings_.end() || it->first > cursor || it->first + it->second <= cursor) return false;
    cursor = it->first + it->second;
    ++it;
  }
  return true;
}

void PosixVmDriver::restore_reservation(void* va, std::size_t bytes) noexcept {
  ::mmap(va, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

void* PosixVmDriver::reserve(std::size_t bytes, std::size_t alignment) {
  std::lock_guard lock(mutex_);
  const VmFault fault = enter(VmCall::reserve);
  check_aligned("reserve", 0, bytes);
  KVLAB_EXPECTS(alignment == 0 || std::has_single_bit(alignment), "alignment must be a power of two");
  if (fault == VmFault::out_of_memory) KVLAB_THROW(OutOfMemory, "PosixVmDriver::reserve: injected out of memory");
  if (fault == VmFault::error) KVLAB_THROW(Error, "PosixVmDriver::reserve: injected failure");
  const std::size_t align = std::max(alignment, granularity_);
  if (bytes > SIZE_MAX - align) KVLAB_THROW(OutOfMemory, "PosixVmDriver::reserve: size overflows");
  const std::size_t total = bytes + align;
  void* raw = ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    KVLAB_THROW(OutOfMemory, "PosixVmDriver::reserve of " + std::to_string(bytes) + " bytes: " + errno_text(errno));
  }
  const std::uintptr_t begin = addr(raw);
  const std::uintptr_t base = (begin + align - 1) / align * align;
  if (base > begin) ::munmap(raw, base - begin);
  if (base + bytes < begin + total) ::munmap(ptr(base + bytes), begin + total - (base + bytes));
  reservations_[base] = bytes;
  reserved_bytes_ += bytes;
  return ptr(base);
}

void PosixVmDriver::free_reservation(void* base, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  const VmFault fault = enter(VmCall::free_reservation);
  const auto it = reservations_.find(addr(base));
  KVLAB_EXPECTS(
      it != reservations_.end() && it->second == bytes,
      "PosixVmDriver::free_reservation: no reservation of " + std::to_string(bytes) + " bytes at " + hex(addr(base)));
  KVLAB_EXPECTS(!overlaps_mapping(addr(base), bytes),
                "PosixVmDriver::free_reservation: the reservation still holds mappings");
  if (fault != VmFault::none) KVLAB_THROW(Error, "PosixVmDriver::free_reservation: injected failure");
  if (::munmap(base, bytes) != 0)
    KVLAB_THROW(Error, "PosixVmDriver::free_reservation: munmap failed: " + errno_text(errno));
  reservations_.erase(it);
  reserved_bytes_ -= bytes;
}

std::optional<PhysHandle> PosixVmDriver::create(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  const VmFault fault = enter(VmCall::create);
  check_aligned("create", 0, bytes);
  if (fault == VmFault::out_of_memory) return std::nullopt;
  if (fault == VmFault::error) KVLAB_THROW(Error, "PosixVmDriver::create: injected failure");
  for (auto it = free_extents_.begin(); it != free_extents_.end(); ++it) {  // first fit
    if (it->second < bytes) continue;
    const Extent e{it->first, bytes};
    if (it->second > bytes) free_extents_[it->first + bytes] = it->second - bytes;
    free_extents_.erase(it);
    handles_[next_handle_] = e;
    physical_bytes_ += bytes;
    return next_handle_++;
  }
  return std::nullopt;  // the memfd is the physical capacity: nothing fits
}

void PosixVmDriver::release(PhysHandle handle) {
  std::lock_guard lock(mutex_);
  const VmFault fault = enter(VmCall::release);
  const auto it = handles_.find(handle);
  KVLAB_EXPECTS(it != handles_.end(), "PosixVmDriver::release: unknown handle " + std::to_string(handle));
  if (fault != VmFault::none) KVLAB_THROW(Error, "PosixVmDriver::release: injected failure");
  const Extent e = it->second;
  // The contents are gone with the handle: give the RAM back now.
  ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(e.offset),
              static_cast<off_t>(e.size));
  handles_.erase(it);
  physical_bytes_ -= e.size;
  // Return the extent, merging with its neighbours.
  auto [pos, inserted] = free_extents_.emplace(e.offset, e.size);
  KVLAB_ASSERT(inserted);
  if (const auto next = std::next(pos); next != free_extents_.end() && pos->first + pos->second == next->first) {
    pos->second += next->second;
    free_extents_.erase(next);
  }
  if (pos != free_extents_.begin()) {
    const auto prev = std::prev(pos);
    if (prev->first + prev->second == pos->first) {
      prev->second += pos->second;
      free_extents_.erase(pos);
    }
  }
}

bool PosixVmDriver::map(void* va, std::size_t bytes, PhysHandle handle) {
  std::lock_guard lock(mutex_);
  const VmFault fault = enter(VmCall::map);
  check_aligned("map", addr(va), bytes);
  const auto h = handles_.find(handle);
  KVLAB_EXPECTS(h != handles_.end(), "PosixVmDriver::map: unknown handle " + std::to_string(handle));
  KVLAB_EXPECTS(h->second.size == bytes, "PosixVmDriver::map: the whole handle is mapped (" +
                                             std::to_string(h->second.size) + " bytes, not " + std::to_string(bytes) +
                                             ")");
  KVLAB_EXPECTS(inside_one_reservation(addr(va), bytes), "PosixVmDriver::map: [" + hex(addr(va)) + ", +" +
                                                             std::to_string(bytes) + ") is not inside one reservation");
  KVLAB_EXPECTS(!overlaps_mapping(addr(va), bytes),
                "PosixVmDriver::map: [" + hex(addr(va)) + ", +" + std::to_string(bytes) + ") overlaps a mapping");
  if (fault == VmFault::out_of_memory) return false;
  if (fault == VmFault::error) KVLAB_THROW(Error, "PosixVmDriver::map: injected failure");
  check_map_limit(mappings_.size(), bytes, max_map_count_);
  void* got = ::mmap(va, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, fd_, static_cast<off_t>(h->second.offset));
  if (got == MAP_FAILED) {
    const int err = errno;
    restore_reservation(va, bytes);             // a failed MAP_FIXED may have dropped the reservation there
    if (err == ENOMEM && max_map_count_ > 0) {  // the kernel's mapping limit, not the capacity
      if (const std::int64_t areas = current_map_count(); areas >= max_map_count_ - kMapHeadroom)
        throw_map_limit(areas, max_map_count_, bytes);
    }
    if (err == ENOMEM) return false;
    KVLAB_THROW(Error, "PosixVmDriver::map: mmap failed: " + errno_text(err));
  }
  // Shared memory gets huge pages only where its THP setting asks for the advice (best effort).
  if (advise_huge_pages_ && bytes % kHugePageBytes == 0 && addr(va) % kHugePageBytes == 0)
    (void)advise_huge_pages(va, bytes);
  mappings_[addr(va)] = bytes;
  mapped_bytes_ += bytes;
  return true;
}

void PosixVmDriver::set_access(void* va, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  const VmFault fault = enter(VmCall::set_access);
  check_aligned("set_access", addr(va), bytes);
  KVLAB_EXPECTS(fully_mapped(addr(va), bytes), "PosixVmDriver::set_access: [" + hex(addr(va)) + ", +" +
                                                   std::to_string(bytes) + ") is not fully mapped");
  if (fault != VmFault::none) KVLAB_THROW(Error, "PosixVmDriver::set_access: injected failure");
  if (::mprotect(va, bytes, PROT_READ | PROT_WRITE) != 0) {
    KVLAB_THROW(Error, "PosixVmDriver::set_access: mprotect failed: " + errno_text(errno));
  }
}

void PosixVmDriver::unmap(void* va, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  const VmFault fault = enter(VmCall::unmap);
  check_aligned("unmap", addr(va), bytes);
  const auto it = mappings_.find(addr(va));
  KVLAB_EXPECTS(it != mappings_.end() && it->second == bytes,
                "PosixVmDriver::unmap: no mapping of " + std::to_string(bytes) + " bytes at " + hex(addr(va)));
  if (fault != VmFault::none) KVLAB_THROW(Error, "PosixVmDriver::unmap: injected failure");
  // Replace the mapping by reservation in one step (no window where the range is free).
  void* got = ::mmap(va, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (got == MAP_FAILED) KVLAB_THROW(Error, "PosixVmDriver::unmap: mmap failed: " + errno_text(errno));
  mappings_.erase(it);
  mapped_bytes_ -= bytes;
}

void PosixVmDriver::synchronize() {
  std::lock_guard lock(mutex_);
  if (enter(VmCall::synchronize) != VmFault::none) KVLAB_THROW(Error, "PosixVmDriver::synchronize: injected failure");
  // Host kernels are synchronous: nothing can still be reading a page.
}

}  // namespace kvlab
