// Compiles to nothing without the CUDA toolkit headers (KVLAB_HAS_CUDA_HEADERS, set by kvlab_alloc).
#if KVLAB_HAS_CUDA_HEADERS
#include "alloc/cuda/emulated/cuda_driver_double.hpp"

#include "alloc/faults/fault_injection.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>

namespace kvlab {

namespace {

// Guards g_state and everything in it: the table's functions are free functions, so they find the
// active double through this pointer.
std::mutex g_mutex;
detail::CudaDriverDoubleState* g_state = nullptr;
CudaDriverDouble* g_current = nullptr;

constexpr std::array<const char*, kCuEntryCount> kEntryNames = {
#define KVLAB_CU_ENTRY_NAME(name, abi) #name,
    KVLAB_CUDA_DRIVER_ENTRIES(KVLAB_CU_ENTRY_NAME)
#undef KVLAB_CU_ENTRY_NAME
};

std::string hex(CUdeviceptr value) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(value));
  return buf;
}

std::string range(CUdeviceptr ptr, std::size_t size) {
  // Appended piecewise: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string&& here.
  std::string text = "[";
  text += hex(ptr);
  text += ", +";
  text += hex(size);
  text += ")";
  return text;
}

const char* access_name(CUmemAccess_flags flags) {
  switch (flags) {
    case CU_MEM_ACCESS_FLAGS_PROT_NONE:
      return "none";
    case CU_MEM_ACCESS_FLAGS_PROT_READ:
      return "read";
    case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
      return "read-write";
    default:
      return "invalid";
  }
}

int host_protection(CUmemAccess_flags flags) {
  switch (flags) {
    case CU_MEM_ACCESS_FLAGS_PROT_READ:
      return PROT_READ;
    case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
      return PROT_READ | PROT_WRITE;
    default:
      return PROT_NONE;
  }
}

void* as_host(CUdeviceptr ptr) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr)); }

// Turns [ptr, ptr + size) back into reserved, inaccessible address space.
bool restore_reserved(CUdeviceptr ptr, std::size_t size) {
  return ::mmap(as_host(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) !=
         MAP_FAILED;
}

}  // namespace

namespace detail {

class CudaDriverDoubleState {
 public:
  struct Reservation {
    std::size_t size = 0;
  };
  struct Allocation {
    std::size_t size = 0;
    std::size_t extent = 0;  // offset in the memfd
    bool released = false;
    std::size_t mappings = 0;
  };
  struct Mapping {
    std::size_t size = 0;
    CUmemGenericAllocationHandle handle = 0;
    std::vector<CUmemAccess_flags> access;  // one per granule
  };
  struct NthFault {
    CuEntry entry;
    std::uint64_t call;
    CUresult result;
  };

  explicit CudaDriverDoubleState(const CudaDriverDoubleConfig& config) : cfg_(config) {
    fd_ = ::memfd_create("kvlab-cuda-driver-double", MFD_CLOEXEC);
    if (fd_ < 0) KVLAB_THROW(CudaError, std::string("CudaDriverDouble: memfd_create failed: ") + std::strerror(errno));
  }

  ~CudaDriverDoubleState() {
    // Mappings lie inside reservations, so unmapping the reservations drops them too.
    for (const auto& [base, r] : reservations_) ::munmap(as_host(base), r.size);
    ::close(fd_);
  }

  CudaDriverDoubleState(const CudaDriverDoubleState&) = delete;
  CudaDriverDoubleState& operator=(const CudaDriverDoubleState&) = delete;

  // --- bookkeeping shared by every entry ---

  /// Counts the call and returns the injected result if one fires.
  std::optional<CUresult> inject(CuEntry entry) {
    const auto index = static_cast<std::size_t>(entry);
    const std::uint64_t call = ++calls_[index];
    for (auto it = nth_faults_.begin(); it != nth_faults_.end(); ++it) {
      if (it->entry == entry && it->call == call) {
        const CUresult result = it->result;
        nth_faults_.erase(it);
        ++injected_;
        return result;
      }
    }
    if (injector_ != nullptr &&
        (injector_entries_.empty() ||
         std::find(injector_entries_.begin(), injector_entries_.end(), entry) != injector_entries_.end())) {
      if (injector_->should_fail(kEntryNames[index])) {
        ++injected_;
        return injector_result_;
      }
    }
    if (random_probability_ > 0.0 &&
        (random_entries_.empty() ||
         std::find(random_entries_.begin(), random_entries_.end(), entry) != random_entries_.end())) {
      // One draw per eligible call, uniform in [0, 1) from the top 53 bits: reproducible per seed.
      const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
      if (u < random_probability_) {
        ++injected_;
        return random_result_;
      }
    }
    return std::nullopt;
  }

  /// Records a contract violation and returns its documented code.
  CUresult violation(const char* who, CUresult code, const std::string& what) {
    const char* name = cu_result_name(code);
    violations_.push_back(std::string(who) + ": " + (name != nullptr ? name : "?") + ": " + what);
    return code;
  }

  bool initialized() const { return initialized_; }
  const CudaDriverDoubleConfig& config() const { return cfg_; }

  // --- initialisation, devices, contexts ---

  CUresult init(unsigned int flags) {
    if (flags != 0) return violation("cuInit", CUDA_ERROR_INVALID_VALUE, "flags must be 0");
    initialized_ = true;
    return CUDA_SUCCESS;
  }

  CUresult driver_get_version(int* version) {
    if (version == nullptr) return violation("cuDriverGetVersion", CUDA_ERROR_INVALID_VALUE, "driverVersion is null");
    *version = cfg_.driver_version;
    return CUDA_SUCCESS;
  }

  CUresult error_text(const char* who, CUresult error, const char** str, bool want_name) {
    if (str == nullptr) return violation(who, CUDA_ERROR_INVALID_VALUE, "pStr is null");
    *str = want_name ? cu_result_name(error) : cu_result_description(error);
    // Documented: an unrecognised code gives CUDA_ERROR_INVALID_VALUE and a null string.
    return *str != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }

  CUresult check_device(const char* who, CUdevice dev) {
    if (dev != 0) return violation(who, CUDA_ERROR_INVALID_DEVICE, "device " + std::to_string(dev) + " does not exist");
    return CUDA_SUCCESS;
  }

  CUresult device_get(CUdevice* device, int ordinal) {
    if (device == nullptr) return violation("cuDeviceGet", CUDA_ERROR_INVALID_VALUE, "device is null");
    if (ordinal != 0) return violation("cuDeviceGet", CUDA_ERROR_INVALID_DEVICE, "ordinal " + std::to_string(ordinal));
    *device = 0;
    return CUDA_SUCCESS;
  }

  CUresult device_get_count(int* count) {
    if (count == nullptr) return violation("cuDeviceGetCount", CUDA_ERROR_INVALID_VALUE, "count is null");
    *count = 1;
    return CUDA_SUCCESS;
  }

  CUresult device_get_name(char* name, int len, CUdevice dev) {
    if (name == nullptr || len <= 0) return violation("cuDeviceGetName", CUDA_ERROR_INVALID_VALUE, "bad buffer");
    if (const CUresult r = check_device("cuDeviceGetName", dev); r != CUDA_SUCCESS) return r;
    const std::size_t n = std::min(cfg_.device_name.size(), static_cast<std::size_t>(len) - 1);
    std::memcpy(name, cfg_.device_name.data(), n);
    name[n] = '\0';
    return CUDA_SUCCESS;
  }

  CUresult device_get_attribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
    if (value == nullptr) return violation("cuDeviceGetAttribute", CUDA_ERROR_INVALID_VALUE, "pi is null");
    if (attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) {
      return violation("cuDeviceGetAttribute", CUDA_ERROR_INVALID_VALUE,
                       "attribute " + std::to_string(static_cast<int>(attrib)));
    }
    if (const CUresult r = check_device("cuDeviceGetAttribute", dev); r != CUDA_SUCCESS) return r;
    switch (attrib) {
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *value = cfg_.compute_capability_major;
        break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        *value = cfg_.compute_capability_minor;
        break;
      case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        *value = cfg_.multiprocessor_count;
        break;
      case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        *value = 32;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *value = 1024;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        *value = 48 * 1024;
        break;
      case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
        *value = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        *value = 1;
        break;
      default:
        *value = 0;
        break;  // a valid attribute the double does not model
    }
    return CUDA_SUCCESS;
  }

  CUresult device_total_mem(size_t* bytes, CUdevice dev) {
    if (bytes == nullptr) return violation("cuDeviceTotalMem", CUDA_ERROR_INVALID_VALUE, "bytes is null");
    if (const CUresult r = check_device("cuDeviceTotalMem", dev); r != CUDA_SUCCESS) return r;
    *bytes = cfg_.capacity;
    return CUDA_SUCCESS;
  }

  CUcontext primary_context() { return reinterpret_cast<CUcontext>(&primary_context_token_); }

  CUcontext current_context() const {
    const auto it = current_context_.find(std::this_thread::get_id());
    return it == current_context_.end() ? nullptr : it->second;
  }

  CUresult primary_ctx_retain(CUcontext* ctx, CUdevice dev) {
    if (ctx == nullptr) return violation("cuDevicePrimaryCtxRetain", CUDA_ERROR_INVALID_VALUE, "pctx is null");
    if (const CUresult r = check_device("cuDevicePrimaryCtxRetain", dev); r != CUDA_SUCCESS) return r;
    ++primary_context_refs_;
    *ctx = primary_context();
    return CUDA_SUCCESS;
  }

  CUresult primary_ctx_release(CUdevice dev) {
    if (const CUresult r = check_device("cuDevicePrimaryCtxRelease", dev); r != CUDA_SUCCESS) return r;
    if (primary_context_refs_ == 0) {
      return violation("cuDevicePrimaryCtxRelease", CUDA_ERROR_INVALID_CONTEXT, "primary context was not retained");
    }
    --primary_context_refs_;
    return CUDA_SUCCESS;
  }

  CUresult ctx_set_current(CUcontext ctx) {
    if (ctx != nullptr && (ctx != primary_context() || primary_context_refs_ == 0)) {
      return violation("cuCtxSetCurrent", CUDA_ERROR_INVALID_CONTEXT, "not a retained primary context");
    }
    current_context_[std::this_thread::get_id()] = ctx;
    return CUDA_SUCCESS;
  }

  CUresult ctx_get_current(CUcontext* ctx) {
    if (ctx == nullptr) return violation("cuCtxGetCurrent", CUDA_ERROR_INVALID_VALUE, "pctx is null");
    *ctx = current_context();
    return CUDA_SUCCESS;
  }

  CUresult require_context(const char* who) {
    if (current_context() == nullptr || primary_context_refs_ == 0) {
      return violation(who, CUDA_ERROR_INVALID_CONTEXT, "no current context on this thread");
    }
    return CUDA_SUCCESS;
  }

  CUresult ctx_synchronize() { return require_context("cuCtxSynchronize"); }  // nothing is ever in flight

  /// cuCtxSynchronize_v2 (the ABI of CUDA 13.0): the context is an argument; null means the current
  /// one. A handle that is no live context is what the H200's driver answered a garbage argument
  /// with: CUDA_ERROR_CONTEXT_IS_DESTROYED.
  CUresult ctx_synchronize_v2(CUcontext ctx) {
    if (ctx == nullptr) return require_context("cuCtxSynchronize");
    if (ctx != primary_context() || primary_context_refs_ == 0) {
      return violation("cuCtxSynchronize", CUDA_ERROR_CONTEXT_IS_DESTROYED,
                       "context " + hex(reinterpret_cast<std::uintptr_t>(ctx)) + " is not a live context");
    }
    return CUDA_SUCCESS;
  }

  CUresult mem_get_info(size_t* free, size_t* total) {
    if (free == nullptr || total == nullptr) return violation("cuMemGetInfo", CUDA_ERROR_INVALID_VALUE, "null output");
    if (const CUresult r = require_context("cuMemGetInfo"); r != CUDA_SUCCESS) return r;
    *free = cfg_.capacity - physical_bytes_;
    *total = cfg_.capacity;
    return CUDA_SUCCESS;
  }

  // --- virtual memory management ---

  bool aligned(std::size_t value) const { return value % cfg_.granularity == 0; }

  static bool overflows(CUdeviceptr ptr, std::size_t size) { return ptr + size < ptr; }

  CUresult check_prop(const char* who, const CUmemAllocationProp* prop) {
    if (prop == nullptr) return violation(who, CUDA_ERROR_INVALID_VALUE, "prop is null");
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) {
      return violation(who, CUDA_ERROR_INVALID_VALUE, "prop->type must be CU_MEM_ALLOCATION_TYPE_PINNED");
    }
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      return violation(who, CUDA_ERROR_INVALID_VALUE, "the double models device allocations only");
    }
    if (prop->location.id != 0) {
      return violation(who, CUDA_ERROR_INVALID_DEVICE,
                       "device " + std::to_string(prop->location.id) + " does not exist");
    }
    return CUDA_SUCCESS;
  }

  CUresult check_location(const char* who, const CUmemLocation& location) {
    if (location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      return violation(who, CUDA_ERROR_INVALID_VALUE, "only device locations are modelled");
    }
    if (location.id != 0) {
      return violation(who, CUDA_ERROR_INVALID_DEVICE, "device " + std::to_string(location.id) + " does not exist");
    }
    return CUDA_SUCCESS;
  }

  CUresult granularity(size_t* out, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags option) {
    constexpr const char* who = "cuMemGetAllocationGranularity";
    if (out == nullptr) return violation(who, CUDA_ERROR_INVALID_VALUE, "granularity is null");
    if (const CUresult r = check_prop(who, prop); r != CUDA_SUCCESS) return r;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
      return violation(who, CUDA_ERROR_INVALID_VALUE, "unknown granularity option");
    }
    *out = cfg_.granularity;  // minimum == recommended
    return CUDA_SUCCESS;
  }

  CUresult address_reserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                           unsigned long long flags) {
    constexpr const char* who = "cuMemAddressReserve";
    if (ptr == nullptr) return violation(who, CUDA_ERROR_INVALID_VALUE, "ptr is null");
    if (flags != 0) return violation(who, CUDA_ERROR_INVALID_VALUE, "flags must be 0");
    if (size == 0 || !aligned(size)) {
      return violation(who, CUDA_ERROR_INVALID_VALUE,
                       "size " + hex(size) + " is not a positive multiple of the granularity");
    }
    if (alignment != 0 && !std::has_single_bit(alignment)) {
      return violation(who, CUDA_ERROR_INVALID_VALUE, "alignment " + hex(alignment) + " is not a power of two");
    }
    if (addr % static_cast<CUdeviceptr>(::getpagesize()) != 0) {
      return violation(who, CUDA_ERROR_INVALID_VALUE, "address hint " + hex(addr) + " is not page aligned");
    }
    // Over-reserve, then trim, so the start is aligned to max(alignment, granularity).
    const std::size_t align = std::max<std::size_t>(alignment, cfg_.granularity);
    if (size > SIZE_MAX - align) return CUDA_ERROR_OUT_OF_MEMORY;
    const std::size_t total = size + align;
    void* raw = ::mmap(addr != 0 ? as_host(addr) : nullptr, total, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;  // address space exhausted: not a misuse
    const auto raw_begin = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(raw));
    const CUdeviceptr base = (raw_begin + align - 1) / align * align;
    if (base > raw_begin) ::munmap(raw, base - raw_begin);
    if (const CUdeviceptr tail = base + size; tail < raw_begin + total)
      ::munmap(as_host(tail), raw_begin + total - tail);
    reservations_[base] = Reservation{size};
    *ptr = base;
    return CUDA_SUCCESS;
  }

  CUresult address_free(CUdeviceptr ptr, size_t size) {
    constexpr const char* who = "cuMemAddressFree";
    const auto it = reservations_.find(ptr);
    if (it == reservations_.end())
      return violation(who, CUDA_ERROR_INVALID_VALUE, "no reservation starts at " + hex(ptr));
    if (it->second.size != size) {
      return violation(who, CUDA_ERROR_INVALID_VALUE,
                       "size " + hex(size) + " differs from the reserved " + hex(it->second.size));
    }
    if (const auto m = first_mapping_overlapping(ptr, size); m != mappings_.end()) {
      return violation(
          who, CUDA_ERROR_INVALID_VALUE,
          "reservation " + range(ptr, size) + " still holds the mapping " + range(m->first, m->second.size));
    }
    ::munmap(as_host(ptr), size);
    reservations_.erase(it);
    return CUDA_SUCCESS;
  }

  CUresult create(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                  unsigned long long flags) {
    constexpr const char* who = "cuMemCreate";
    if (handle == nullptr) return violation(who, CUDA_ERROR_INVALID_VALUE, "handle is null");
    if (const CUresult r = check_prop(who, prop); r != CUDA_SUCCESS) return r;
    if (flags != 0) return violation(who, CUDA_ERROR_INVALID_VALUE, "flags must be 0");
    if (size == 0 || !aligned(size)) {
      return violation(who, CUDA_ERROR_INVALID_VALUE,
                       "size " + hex(size) + " is not a positive multiple of the granularity");
    }
    if (size > cfg_.capacity - physical_bytes_) return CUDA_ERROR_OUT_OF_MEMORY;
    const std::optional<std::size_t> extent = take_extent(size);
    if (!extent) return CUDA_ERROR_OUT_OF_MEMORY;
    if (cfg_.poison_byte >= 0) poison(*extent, size);
    const CUmemGenericAllocationHandle h = next_handle_++;
    allocations_[h] = Allocation{size, *extent, false, 0};
    physical_bytes_ += size;
    *handle = h;
    return CUDA_SUCCESS;
  }

  CUresult release(CUmemGenericAllocationHandle handle) {
    const auto it = allocations_.find(handle);
    if (it == allocations_.end() || it->second.released) {
      return violation("cuMemRelease", CUDA_ERROR_INVALID_VALUE,
                       "handle " + hex(handle) + " is unknown or already released");
    }
    it->second.released = true;
    if (it->second.mappings == 0) free_allocation(it);
    return CUDA_SUCCESS;
  }

  CUresult map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
               unsigned long long flags) {
    constexpr const char* who = "cuMemMap";
    if (flags != 0) return violation(who, CUDA_ERROR_INVALID_VALUE, "flags must be 0");
    const auto alloc = allocations_.find(handle);
    if (alloc == allocations_.end() || alloc->second.released) {
      return violation(who, CUDA_ERROR_INVALID_VALUE, "handle " + hex(handle) + " is unknown or released");
    }
    if (size == 0 || !aligned(ptr) || !aligned(size) || !aligned(offset)) {
      return violation(who, CUDA_ERROR_INVALID_VALUE,
                       "ptr, size and offset must be multiples of the granularity (" + range(ptr, size) + ", offset " +
                           hex(offset) + ")");
    }
    if (offset != 0 && !cfg_.allow_map_offset) {
      return violation(who, CUDA_ERROR_INVALID_VALUE,
                       "offset " + hex(offset) + " must be 0 (documented: currently must be zero)");
    }
    if (offset > alloc->second.size || size > alloc->second.size - offset) {
      return violation(
          who, CUDA_ERROR_INVALID_VALUE,
          "offset + size " + hex(offset) + " + " + hex(size) + " exceeds the allocation " + hex(alloc->second.size));
    }
    if (overflows(ptr, size) || !inside_one_reservation(ptr, size)) {
      return violation(who, CUDA_ERROR_INVALID_VALUE, range(ptr, size) + " is not inside one reservation");
    }
    if (const auto m = first_mapping_overlapping(ptr, size); m != mappings_.end()) {
      return violation(who, CUDA_ERROR_INVALID_VALUE,
                       range(ptr, size) + " overlaps the mapping " + range(m->first, m->second.size));
    }
    // MAP_SHARED over the memfd: the bytes live in the handle's extent, not in this address range.
    const void* mapped = ::mmap(as_host(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd_,
                                static_cast<off_t>(alloc->second.extent + offset));
    if (mapped == MAP_FAILED) {
      restore_reserved(ptr, size);  // a failed MAP_FIXED may have dropped the reservation's pages
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    mappings_[ptr] =
        Mapping{size, handle, std::vector<CUmemAccess_flags>(size / cfg_.granularity, CU_MEM_ACCESS_FLAGS_PROT_NONE)};
    ++alloc->second.mappings;
    return CUDA_SUCCESS;
  }

  CUresult unmap(CUdeviceptr ptr, size_t size) {
    constexpr const char* who = "cuMemUnmap";
    if (size == 0 || !aligned(ptr) || !aligned(size) || overflows(ptr, size)) {
      return violation(who, CUDA_ERROR_INVALID_VALUE, range(ptr, size) + " is not granularity aligned");
    }
    // The range must be tiled exactly by whole mappings: no sub-range, no unmapped bytes.
    std::vector<std::map<CUdeviceptr, Mapping>::iterator> covered;
    CUdeviceptr cursor = ptr;
    for (auto it = mappings_.find(ptr); cursor < ptr + size; ++it) {
      if (it == mappings_.end() || it->first != cursor) {
        const auto m = mapping_containing(cursor);
        return violation(who, CUDA_ERROR_INVALID_VALUE,
                         m == mappings_.end()
                             ? hex(cursor) + " in " + range(ptr, size) + " is not mapped"
                             : range(ptr, size) + " cuts the mapping " + range(m->first, m->second.size));
      }
      cursor += it->second.size;
      covered.push_back(it);
    }
    if (cursor != ptr + size) {
      const auto last = covered.back();
      return violation(who, CUDA_ERROR_INVALID_VALUE,
                       range(ptr, size) + " cuts the mapping " + range(last->first, last->second.size));
    }
    for (const auto& it : covered) {
      restore_reserved(it->first, it->second.size);
      const auto alloc = allocations_.find(it->second.handle);
      if (--alloc->second.mappings == 0 && alloc->second.released) free_allocation(alloc);
      mappings_.erase(it);
    }
    return CUDA_SUCCESS;
  }

  CUresult set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
    constexpr const char* who = "cuMemSetAccess";
    if (desc == nullptr || count == 0) return violation(who, CUDA_ERROR_INVALID_VALUE, "no access descriptors");
    CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    for (std::size_t i = 0; i < count; ++i) {
      if (const CUresult r = check_location(who, desc[i].location); r != CUDA_SUCCESS) return r;
      if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
          desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
        return violation(who, CUDA_ERROR_INVALID_VALUE,
                         "unknown access flags " + std::to_string(static_cast<int>(desc[i].flags)));
      }
      flags = desc[i].flags;  // one device: the last descriptor for it wins
    }
    if (size == 0 || !aligned(ptr) || !aligned(size) || overflows(ptr, size)) {
      return violation(who, CUDA_ERROR_INVALID_VALUE, range(ptr, size) + " is not granularity aligned");
    }
    if (const std::optional<CUdeviceptr> hole = first_unmapped(ptr, size)) {
      return violation(who, CUDA_ERROR_INVALID_VALUE,
                       range(ptr, size) + " is not fully mapped: " + hex(*hole) + " is not mapped");
    }
    const CUdeviceptr end = ptr + size;
    for (auto it = mapping_containing(ptr); it != mappings_.end() && it->first < end; ++it) {
      const CUdeviceptr lo = std::max(ptr, it->first);
      const CUdeviceptr hi = std::min(end, it->first + it->second.size);
      ::mprotect(as_host(lo), hi - lo, host_protection(flags));
      std::fill(it->second.access.begin() + static_cast<std::ptrdiff_t>((lo - it->first) / cfg_.granularity),
                it->second.access.begin() + static_cast<std::ptrdiff_t>((hi - it->first) / cfg_.granularity), flags);
    }
    return CUDA_SUCCESS;
  }

  CUresult get_access(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
    constexpr const char* who = "cuMemGetAccess";
    if (flags == nullptr || location == nullptr) return violation(who, CUDA_ERROR_INVALID_VALUE, "null argument");
    if (const CUresult r = check_location(who, *location); r != CUDA_SUCCESS) return r;
    const auto it = mapping_containing(ptr);
    if (it == mappings_.end()) return violation(who, CUDA_ERROR_INVALID_VALUE, hex(ptr) + " is not mapped");
    *flags = it->second.access[(ptr - it->first) / cfg_.granularity];
    return CUDA_SUCCESS;
  }

  // --- the soft GPU fault ---

  bool check_access(CUdeviceptr ptr, std::size_t bytes, bool write) {
    constexpr const char* who = "check_access";
    if (bytes == 0) return true;
    if (overflows(ptr, bytes)) {
      violation(who, CUDA_ERROR_ILLEGAL_ADDRESS, range(ptr, bytes) + " wraps around");
      return false;
    }
    const CUdeviceptr end = ptr + bytes;
    for (CUdeviceptr cursor = ptr; cursor < end;) {
      const auto it = mapping_containing(cursor);
      if (it == mappings_.end()) {
        violation(
            who, CUDA_ERROR_ILLEGAL_ADDRESS,
            std::string(write ? "write to " : "read of ") + range(ptr, bytes) + ": " + hex(cursor) + " is not mapped");
        return false;
      }
      const std::size_t granule = (cursor - it->first) / cfg_.granularity;
      const CUmemAccess_flags have = it->second.access[granule];
      const bool ok = write ? have == CU_MEM_ACCESS_FLAGS_PROT_READWRITE : have != CU_MEM_ACCESS_FLAGS_PROT_NONE;
      if (!ok) {
        violation(who, CUDA_ERROR_ILLEGAL_ADDRESS,
                  std::string(write ? "write to " : "read of ") + range(ptr, bytes) + ": " + hex(cursor) +
                      " has access " + access_name(have));
        return false;
      }
      cursor = it->first + (granule + 1) * cfg_.granularity;
    }
    return true;
  }

  // --- fault injection and accounting ---

  void fail_nth_call(CuEntry entry, std::uint64_t n, CUresult result) {
    nth_faults_.push_back(NthFault{entry, calls_[static_cast<std::size_t>(entry)] + n, result});
  }

  void fail_randomly(double probability, std::uint64_t seed, CUresult result, std::vector<CuEntry> entries) {
    random_probability_ = probability;
    rng_.seed(seed);
    random_result_ = result;
    random_entries_ = std::move(entries);
  }

  void clear_faults() {
    nth_faults_.clear();
    random_probability_ = 0.0;
    random_entries_.clear();
    injector_ = nullptr;
    injector_entries_.clear();
  }
  void use_fault_injector(FaultInjector* injector, std::vector<CuEntry> entries, CUresult result) {
    injector_ = injector;
    injector_entries_ = std::move(entries);
    injector_result_ = result;
  }

  std::uint64_t injected_faults() const { return injected_; }
  std::uint64_t call_count(CuEntry entry) const { return calls_[static_cast<std::size_t>(entry)]; }

  CudaDriverDoubleUsage usage() const {
    CudaDriverDoubleUsage u;
    u.reservations = reservations_.size();
    for (const auto& [base, r] : reservations_) u.reserved_bytes += r.size;
    for (const auto& [h, a] : allocations_) u.handles += a.released ? 0 : 1;
    u.allocations = allocations_.size();
    u.physical_bytes = physical_bytes_;
    u.mappings = mappings_.size();
    for (const auto& [base, m] : mappings_) u.mapped_bytes += m.size;
    u.primary_context_refs = primary_context_refs_;
    return u;
  }

  std::string leak_report() const {
    std::string report;
    for (const auto& [base, r] : reservations_) report += "reservation " + range(base, r.size) + " not freed\n";
    for (const auto& [base, m] : mappings_) {
      report += "mapping " + range(base, m.size) + " of handle " + hex(m.handle) + " not unmapped\n";
    }
    for (const auto& [h, a] : allocations_) {
      if (!a.released) report += "handle " + hex(h) + " (" + hex(a.size) + " bytes) not released\n";
    }
    if (primary_context_refs_ != 0) {
      report += "primary context retained " + std::to_string(primary_context_refs_) + " time(s) more than released\n";
    }
    return report;
  }

  std::vector<std::string> violations() const { return violations_; }
  void clear_violations() { violations_.clear(); }

 private:
  using MappingIt = std::map<CUdeviceptr, Mapping>::iterator;

  MappingIt mapping_containing(CUdeviceptr ptr) {
    auto it = mappings_.upper_bound(ptr);
    if (it == mappings_.begin()) return mappings_.end();
    --it;
    return ptr < it->first + it->second.size ? it : mappings_.end();
  }

  MappingIt first_mapping_overlapping(CUdeviceptr ptr, std::size_t size) {
    if (const auto it = mapping_containing(ptr); it != mappings_.end()) return it;
    const auto next = mappings_.lower_bound(ptr);
    return next != mappings_.end() && next->first < ptr + size ? next : mappings_.end();
  }

  std::optional<CUdeviceptr> first_unmapped(CUdeviceptr ptr, std::size_t size) {
    for (CUdeviceptr cursor = ptr; cursor < ptr + size;) {
      const auto it = mapping_containing(cursor);
      if (it == mappings_.end()) return cursor;
      cursor = it->first + it->second.size;
    }
    return std::nullopt;
  }

  bool inside_one_reservation(CUdeviceptr ptr, std::size_t size) const {
    auto it = reservations_.upper_bound(ptr);
    if (it == reservations_.begin()) return false;
    --it;
    return ptr + size <= it->first + it->second.size;
  }

  // Extents of the memfd: first fit over freed extents, else the file grows (never fails for
  // fragmentation, so only `capacity` decides out-of-memory).
  std::optional<std::size_t> take_extent(std::size_t size) {
    for (auto it = free_extents_.begin(); it != free_extents_.end(); ++it) {
      if (it->second < size) continue;
      const std::size_t offset = it->first;
      const std::size_t rest = it->second - size;
      free_extents_.erase(it);
      if (rest != 0) free_extents_[offset + size] = rest;
      return offset;
    }
    if (::ftruncate(fd_, static_cast<off_t>(file_size_ + size)) != 0) return std::nullopt;
    const std::size_t offset = file_size_;
    file_size_ += size;
    return offset;
  }

  void give_extent(std::size_t offset, std::size_t size) {
    // Returns the RAM and zeroes the bytes: the next owner must not see this allocation's data.
    ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset), static_cast<off_t>(size));
    auto next = free_extents_.lower_bound(offset);
    if (next != free_extents_.end() && offset + size == next->first) {
      size += next->second;
      next = free_extents_.erase(next);
    }
    if (next != free_extents_.begin()) {
      const auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += size;
        return;
      }
    }
    free_extents_[offset] = size;
  }

  void poison(std::size_t offset, std::size_t size) {
    std::vector<unsigned char> chunk(std::min<std::size_t>(size, std::size_t{1} << 20),
                                     static_cast<unsigned char>(cfg_.poison_byte));
    for (std::size_t done = 0; done < size;) {
      const ssize_t n =
          ::pwrite(fd_, chunk.data(), std::min(chunk.size(), size - done), static_cast<off_t>(offset + done));
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
  }

  void free_allocation(std::unordered_map<CUmemGenericAllocationHandle, Allocation>::iterator it) {
    give_extent(it->second.extent, it->second.size);
    physical_bytes_ -= it->second.size;
    allocations_.erase(it);
  }

  CudaDriverDoubleConfig cfg_;
  int fd_ = -1;
  std::size_t file_size_ = 0;
  std::map<std::size_t, std::size_t> free_extents_;  // offset -> size
  std::map<CUdeviceptr, Reservation> reservations_;
  std::unordered_map<CUmemGenericAllocationHandle, Allocation> allocations_;
  std::map<CUdeviceptr, Mapping> mappings_;
  CUmemGenericAllocationHandle next_handle_ = 1;  // never reused, so a stale handle stays invalid
  std::size_t physical_bytes_ = 0;
  bool initialized_ = false;
  int primary_context_refs_ = 0;
  char primary_context_token_ = 0;  // its address is the primary context's CUcontext
  std::unordered_map<std::thread::id, CUcontext> current_context_;
  std::array<std::uint64_t, kCuEntryCount> calls_{};
  std::vector<NthFault> nth_faults_;
  double random_probability_ = 0.0;
  std::mt19937_64 rng_;
  CUresult random_result_ = CUDA_ERROR_UNKNOWN;
  std::vector<CuEntry> random_entries_;
  std::uint64_t injected_ = 0;
  FaultInjector* injector_ = nullptr;  // a shared plan (alloc/faults), asked after the double's own
  std::vector<CuEntry> injector_entries_;
  CUresult injector_result_ = CUDA_ERROR_UNKNOWN;
  std::vector<std::string> violations_;
};

}  // namespace detail

namespace {

using State = detail::CudaDriverDoubleState;

bool needs_init(CuEntry entry) {
  return entry != CuEntry::cuInit && entry != CuEntry::cuDriverGetVersion && entry != CuEntry::cuGetErrorName &&
         entry != CuEntry::cuGetErrorString;
}

// Every table function: lock, find the active double, count the call, inject a fault if one is
// due, enforce cuInit, then run the body. Nothing may escape into C callers.
template <class Body>
CUresult enter(CuEntry entry, Body&& body) noexcept {
  std::lock_guard lock(g_mutex);
  if (g_state == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = *g_state;
  try {
    if (const std::optional<CUresult> injected = s.inject(entry)) return *injected;
    if (s.config().require_init && !s.initialized() && needs_init(entry)) {
      return s.violation(cu_entry_name(entry), CUDA_ERROR_NOT_INITIALIZED, "cuInit(0) has not succeeded yet");
    }
    return body(s);
  } catch (const std::bad_alloc&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    return CUDA_ERROR_UNKNOWN;
  }
}

// clang-format off
CUresult CUDAAPI double_cuInit(unsigned int flags) {
  return enter(CuEntry::cuInit, [&](State& s) { return s.init(flags); });
}
CUresult CUDAAPI double_cuDriverGetVersion(int* version) {
  return enter(CuEntry::cuDriverGetVersion, [&](State& s) { return s.driver_get_version(version); });
}
CUresult CUDAAPI double_cuGetErrorName(CUresult error, const char** str) {
  return enter(CuEntry::cuGetErrorName, [&](State& s) { return s.error_text("cuGetErrorName", error, str, true); });
}
CUresult CUDAAPI double_cuGetErrorString(CUresult error, const char** str) {
  return enter(CuEntry::cuGetErrorString, [&](State& s) { return s.error_text("cuGetErrorString", error, str, false); });
}
CUresult CUDAAPI double_cuDeviceGet(CUdevice* device, int ordinal) {
  return enter(CuEntry::cuDeviceGet, [&](State& s) { return s.device_get(device, ordinal); });
}
CUresult CUDAAPI double_cuDeviceGetCount(int* count) {
  return enter(CuEntry::cuDeviceGetCount, [&](State& s) { return s.device_get_count(count); });
}
CUresult CUDAAPI double_cuDeviceGetName(char* name, int len, CUdevice dev) {
  return enter(CuEntry::cuDeviceGetName, [&](State& s) { return s.device_get_name(name, len, dev); });
}
CUresult CUDAAPI double_cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  return enter(CuEntry::cuDeviceGetAttribute, [&](State& s) { return s.device_get_attribute(value, attrib, dev); });
}
CUresult CUDAAPI double_cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  return enter(CuEntry::cuDeviceTotalMem, [&](State& s) { return s.device_total_mem(bytes, dev); });
}
CUresult CUDAAPI double_cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  return enter(CuEntry::cuDevicePrimaryCtxRetain, [&](State& s) { return s.primary_ctx_retain(ctx, dev); });
}
CUresult CUDAAPI double_cuDevicePrimaryCtxRelease(CUdevice dev) {
  return enter(CuEntry::cuDevicePrimaryCtxRelease, [&](State& s) { return s.primary_ctx_release(dev); });
}
CUresult CUDAAPI double_cuCtxSetCurrent(CUcontext ctx) {
  return enter(CuEntry::cuCtxSetCurrent, [&](State& s) { return s.ctx_set_current(ctx); });
}
CUresult CUDAAPI double_cuCtxGetCurrent(CUcontext* ctx) {
  return enter(CuEntry::cuCtxGetCurrent, [&](State& s) { return s.ctx_get_current(ctx); });
}
CUresult CUDAAPI double_cuCtxSynchronize() {
  return enter(CuEntry::cuCtxSynchronize, [&](State& s) { return s.ctx_synchronize(); });
}
CUresult CUDAAPI double_cuCtxSynchronize_v2(CUcontext ctx) {
  return enter(CuEntry::cuCtxSynchronize, [&](State& s) { return s.ctx_synchronize_v2(ctx); });
}
CUresult CUDAAPI double_cuMemGetInfo(size_t* free, size_t* total) {
  return enter(CuEntry::cuMemGetInfo, [&](State& s) { return s.mem_get_info(free, total); });
}
CUresult CUDAAPI double_cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                      CUmemAllocationGranularity_flags option) {
  return enter(CuEntry::cuMemGetAllocationGranularity, [&](State& s) { return s.granularity(granularity, prop, option); });
}
CUresult CUDAAPI double_cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                            unsigned long long flags) {
  return enter(CuEntry::cuMemAddressReserve, [&](State& s) { return s.address_reserve(ptr, size, alignment, addr, flags); });
}
CUresult CUDAAPI double_cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return enter(CuEntry::cuMemAddressFree, [&](State& s) { return s.address_free(ptr, size); });
}
CUresult CUDAAPI double_cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                    unsigned long long flags) {
  return enter(CuEntry::cuMemCreate, [&](State& s) { return s.create(handle, size, prop, flags); });
}
CUresult CUDAAPI double_cuMemRelease(CUmemGenericAllocationHandle handle) {
  return enter(CuEntry::cuMemRelease, [&](State& s) { return s.release(handle); });
}
CUresult CUDAAPI double_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                 unsigned long long flags) {
  return enter(CuEntry::cuMemMap, [&](State& s) { return s.map(ptr, size, offset, handle, flags); });
}
CUresult CUDAAPI double_cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return enter(CuEntry::cuMemUnmap, [&](State& s) { return s.unmap(ptr, size); });
}
CUresult CUDAAPI double_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  return enter(CuEntry::cuMemSetAccess, [&](State& s) { return s.set_access(ptr, size, desc, count); });
}
CUresult CUDAAPI double_cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  return enter(CuEntry::cuMemGetAccess, [&](State& s) { return s.get_access(flags, location, ptr); });
}
// clang-format on

// The double's entry points by name and ABI version, as the driver serves them: each row is one
// ABI of one symbol, from the CUDA version that introduced it. Every table entry must have a
// double at its ABI (a missing double_<name> fails to compile here); cuCtxSynchronize also has its
// CUDA 13.0 ABI, so a table that asks for it at the wrong version fails as the real driver did.
struct EntryRow {
  const char* name;
  int abi;
  void* fn;
};
template <class Fn>
void* erased(Fn fn) {
  return reinterpret_cast<void*>(fn);  // NOLINT: function pointer to void*, as the driver hands them out
}
const std::vector<EntryRow>& entry_rows() {
  static const std::vector<EntryRow> rows = [] {
    std::vector<EntryRow> r;
#define KVLAB_DOUBLE_ROW(name, abi) r.push_back({#name, abi, erased(&double_##name)});
    KVLAB_CUDA_DRIVER_ENTRIES(KVLAB_DOUBLE_ROW)
#undef KVLAB_DOUBLE_ROW
    r.push_back({"cuCtxSynchronize", 13000, erased(&double_cuCtxSynchronize_v2)});
    return r;
  }();
  return rows;
}

const CudaDriverApi& double_table() {
  static const CudaDriverApi table = [] {
    CudaDriverApi api;
    const std::string error = resolve_cuda_driver_table(
        api, [](const char* name, int abi, std::string& why) { return CudaDriverDouble::entry_point(name, abi, why); });
    if (!error.empty()) {  // a table entry without a double row: a programming error, caught by every test
      std::fprintf(stderr, "kvlab: the CUDA driver double cannot build its table: %s\n", error.c_str());
      std::abort();
    }
    return api;
  }();
  return table;
}

}  // namespace

const char* cu_entry_name(CuEntry entry) noexcept {
  const auto index = static_cast<std::size_t>(entry);
  return index < kEntryNames.size() ? kEntryNames[index] : "unknown entry";
}

CudaDriverDouble::CudaDriverDouble(CudaDriverDoubleConfig config) : config_(std::move(config)) {
  const auto page = static_cast<std::size_t>(::getpagesize());
  KVLAB_EXPECTS(std::has_single_bit(config_.granularity) && config_.granularity % page == 0,
                "granularity must be a power of two and a multiple of the host page size");
  KVLAB_EXPECTS(config_.poison_byte < 256, "poison_byte must be a byte value or negative");
  state_ = std::make_unique<detail::CudaDriverDoubleState>(config_);
  std::lock_guard lock(g_mutex);
  KVLAB_EXPECTS(g_current == nullptr, "another CudaDriverDouble is active; only one may exist at a time");
  g_current = this;
  g_state = state_.get();
}

CudaDriverDouble::~CudaDriverDouble() {
  std::lock_guard lock(g_mutex);
  g_current = nullptr;
  g_state = nullptr;
  state_.reset();
}

CudaDriverDouble* CudaDriverDouble::current() noexcept {
  std::lock_guard lock(g_mutex);
  return g_current;
}

const CudaDriverApi& CudaDriverDouble::api() const noexcept { return double_table(); }

void* CudaDriverDouble::entry_point(const char* name, int abi, std::string& why) {
  const EntryRow* best = nullptr;
  bool known = false;
  for (const EntryRow& row : entry_rows()) {
    if (std::strcmp(row.name, name) != 0) continue;
    known = true;
    if (row.abi <= abi && (best == nullptr || row.abi > best->abi)) best = &row;
  }
  if (best != nullptr) return best->fn;
  why = known ? "no ABI at or below that version" : "symbol not found";
  return nullptr;
}

const CudaDriverDoubleConfig& CudaDriverDouble::config() const noexcept { return config_; }

bool CudaDriverDouble::check_access(CUdeviceptr ptr, std::size_t bytes, bool write) {
  std::lock_guard lock(g_mutex);
  return state_->check_access(ptr, bytes, write);
}

void CudaDriverDouble::fail_nth_call(CuEntry entry, std::uint64_t n, CUresult result) {
  KVLAB_EXPECTS(n >= 1, "n counts calls from now, starting at 1");
  KVLAB_EXPECTS(result != CUDA_SUCCESS, "an injected failure must not be CUDA_SUCCESS");
  std::lock_guard lock(g_mutex);
  state_->fail_nth_call(entry, n, result);
}

void CudaDriverDouble::fail_randomly(double probability, std::uint64_t seed, CUresult result,
                                     std::vector<CuEntry> entries) {
  KVLAB_EXPECTS(probability >= 0.0 && probability <= 1.0, "probability must lie in [0, 1]");
  KVLAB_EXPECTS(result != CUDA_SUCCESS, "an injected failure must not be CUDA_SUCCESS");
  std::lock_guard lock(g_mutex);
  state_->fail_randomly(probability, seed, result, std::move(entries));
}

void CudaDriverDouble::use_fault_injector(FaultInjector* injector, std::vector<CuEntry> entries, CUresult result) {
  KVLAB_EXPECTS(result != CUDA_SUCCESS, "an injected failure must not be CUDA_SUCCESS");
  std::lock_guard lock(g_mutex);
  state_->use_fault_injector(injector, std::move(entries), result);
}

void CudaDriverDouble::clear_faults() {
  std::lock_guard lock(g_mutex);
  state_->clear_faults();
}

std::uint64_t CudaDriverDouble::injected_faults() const {
  std::lock_guard lock(g_mutex);
  return state_->injected_faults();
}

std::uint64_t CudaDriverDouble::call_count(CuEntry entry) const {
  std::lock_guard lock(g_mutex);
  return state_->call_count(entry);
}

CudaDriverDoubleUsage CudaDriverDouble::usage() const {
  std::lock_guard lock(g_mutex);
  return state_->usage();
}

std::string CudaDriverDouble::leak_report() const {
  std::lock_guard lock(g_mutex);
  return state_->leak_report();
}

std::vector<std::string> CudaDriverDouble::violations() const {
  std::lock_guard lock(g_mutex);
  return state_->violations();
}

void CudaDriverDouble::clear_violations() {
  std::lock_guard lock(g_mutex);
  state_->clear_violations();
}

}  // namespace kvlab

#endif  // KVLAB_HAS_CUDA_HEADERS
