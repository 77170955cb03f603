#pragma once
// The CUDA driver API, reached through ONE table of entry points resolved at run time.
//
// kvlab links the CUDA runtime statically and never links libcuda, so a binary starts on a machine
// without an NVIDIA driver. The virtual-memory calls a vAttention-style backend needs (cuMemCreate,
// cuMemMap, ...) exist only in the driver API, so they are fetched once, through the runtime's
// cudaGetDriverEntryPointByVersion, into a CudaDriverApi table. Code that manages GPU memory takes
// a `const CudaDriverApi&` instead of calling cu* functions directly: production passes
// cuda_driver(); tests pass the host-memory double's table (alloc/cuda/emulated/cuda_driver_double.hpp), which
// holds the same signatures and enforces the documented contract.
//
// Needs the CUDA toolkit headers (KVLAB_HAS_CUDA_HEADERS, set by alloc/CMakeLists.txt even in
// host-only builds); <cuda.h> supplies the types only — nothing here links libcuda.
#if !KVLAB_HAS_CUDA_HEADERS
#error "alloc/cuda/cuda_driver.hpp needs the CUDA toolkit headers; guard the include with KVLAB_HAS_CUDA_HEADERS"
#endif

#include <cuda.h>

#include <functional>
#include <string>

#include "alloc/core/error.hpp"

// Every entry of CudaDriverApi, once: X(name, abi). `name` is the documented (unversioned) driver
// name; cuda.h maps a few of them to their current ABI by macro (cuMemGetInfo -> cuMemGetInfo_v2),
// which applies to the member names too. `abi` is the CUDA version of the ABI the member's
// signature has: the suffix of its PFN_<name>_v<abi> typedef in <cudaTypedefs.h> (checked by
// static_assert in cuda_driver.cpp), and the version the entry is resolved at.
//
// Why per entry and never CUDA_VERSION: the driver hands out the newest ABI of a symbol at or
// below the version asked for, and an ABI may change its signature under the same name. CUDA 13.0
// gave cuCtxSynchronize a context argument (cuCtxSynchronize_v2, PFN_cuCtxSynchronize_v13000).
// kvlab asked for every entry at CUDA_VERSION (13000), got that function and called it with no
// argument, so the driver read a garbage context from a register: on the H200 every synchronize
// failed with CUDA_ERROR_CONTEXT_IS_DESTROYED and every device deallocation was refused
// (shared/gpu-runs/2026-11-27-h200). The driver double serves entry points by version too
// (CudaDriverDouble::entry_point), so a wrong `abi` here fails the same way in CI.
#define KVLAB_CUDA_DRIVER_ENTRIES(X)      \
  X(cuInit, 2000)                         \
  X(cuDriverGetVersion, 2020)             \
  X(cuGetErrorName, 6000)                 \
  X(cuGetErrorString, 6000)               \
  X(cuDeviceGet, 2000)                    \
  X(cuDeviceGetCount, 2000)               \
  X(cuDeviceGetName, 2000)                \
  X(cuDeviceGetAttribute, 2000)           \
  X(cuDeviceTotalMem, 3020)               \
  X(cuDevicePrimaryCtxRetain, 7000)       \
  X(cuDevicePrimaryCtxRelease, 11000)     \
  X(cuCtxSetCurrent, 4000)                \
  X(cuCtxGetCurrent, 4000)                \
  X(cuCtxSynchronize, 2000)               \
  X(cuMemGetInfo, 3020)                   \
  X(cuMemGetAllocationGranularity, 10020) \
  X(cuMemAddressReserve, 10020)           \
  X(cuMemAddressFree, 10020)              \
  X(cuMemCreate, 10020)                   \
  X(cuMemRelease, 10020)                  \
  X(cuMemMap, 10020)                      \
  X(cuMemUnmap, 10020)                    \
  X(cuMemSetAccess, 10020)                \
  X(cuMemGetAccess, 10020)

namespace kvlab {

/// Driver entry points with exactly the signatures of <cuda.h> (checked by static_assert in
/// cuda_driver.cpp). A default-constructed table is all nullptr.
struct CudaDriverApi {
  // Initialisation, versions, error names.
  CUresult(CUDAAPI* cuInit)(unsigned int flags) = nullptr;
  CUresult(CUDAAPI* cuDriverGetVersion)(int* driver_version) = nullptr;
  CUresult(CUDAAPI* cuGetErrorName)(CUresult error, const char** str) = nullptr;
  CUresult(CUDAAPI* cuGetErrorString)(CUresult error, const char** str) = nullptr;
  // Devices.
  CUresult(CUDAAPI* cuDeviceGet)(CUdevice* device, int ordinal) = nullptr;
  CUresult(CUDAAPI* cuDeviceGetCount)(int* count) = nullptr;
  CUresult(CUDAAPI* cuDeviceGetName)(char* name, int len, CUdevice dev) = nullptr;
  CUresult(CUDAAPI* cuDeviceGetAttribute)(int* value, CUdevice_attribute attrib, CUdevice dev) = nullptr;
  CUresult(CUDAAPI* cuDeviceTotalMem)(size_t* bytes, CUdevice dev) = nullptr;
  // Contexts: the runtime's primary context, shared with the kernels.
  CUresult(CUDAAPI* cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice dev) = nullptr;
  CUresult(CUDAAPI* cuDevicePrimaryCtxRelease)(CUdevice dev) = nullptr;
  CUresult(CUDAAPI* cuCtxSetCurrent)(CUcontext ctx) = nullptr;
  CUresult(CUDAAPI* cuCtxGetCurrent)(CUcontext* ctx) = nullptr;
  CUresult(CUDAAPI* cuCtxSynchronize)() = nullptr;
  CUresult(CUDAAPI* cuMemGetInfo)(size_t* free, size_t* total) = nullptr;
  // Virtual memory management: reserve VA, create physical handles, map, grant access.
  CUresult(CUDAAPI* cuMemGetAllocationGranularity)(size_t* granularity, const CUmemAllocationProp* prop,
                                                   CUmemAllocationGranularity_flags option) = nullptr;
  CUresult(CUDAAPI* cuMemAddressReserve)(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                         unsigned long long flags) = nullptr;
  CUresult(CUDAAPI* cuMemAddressFree)(CUdeviceptr ptr, size_t size) = nullptr;
  CUresult(CUDAAPI* cuMemCreate)(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                 unsigned long long flags) = nullptr;
  CUresult(CUDAAPI* cuMemRelease)(CUmemGenericAllocationHandle handle) = nullptr;
  CUresult(CUDAAPI* cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                              unsigned long long flags) = nullptr;
  CUresult(CUDAAPI* cuMemUnmap)(CUdeviceptr ptr, size_t size) = nullptr;
  CUresult(CUDAAPI* cuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) = nullptr;
  CUresult(CUDAAPI* cuMemGetAccess)(unsigned long long* flags, const CUmemLocation* location,
                                    CUdeviceptr ptr) = nullptr;
};

/// The real driver's table, resolved on the first call (thread-safe) and cached, including a
/// failure: without a driver or a device every call throws CudaError with one line saying so
/// (e.g. "no NVIDIA driver found ..."), and in a build without CUDA one saying it was built without
/// CUDA. With KVLAB_DRIVER_LOG=FILE the table logs every call (alloc/cuda/cuda_driver_log.hpp); a FILE
/// that cannot be opened throws Error. Never crashes and never loads anything but what the static
/// runtime already loads.
[[nodiscard]] const CudaDriverApi& cuda_driver();

/// "CUDA_ERROR_INVALID_VALUE" for CUDA_ERROR_INVALID_VALUE, from a static table, so it works without
/// a driver (the double's errors print the same way). Unknown codes give nullptr.
[[nodiscard]] const char* cu_result_name(CUresult result) noexcept;

/// A short description of a known code ("invalid argument"), nullptr for unknown codes.
[[nodiscard]] const char* cu_result_description(CUresult result) noexcept;

/// Finds one driver entry point: `name` (unversioned) with the ABI of CUDA version `abi`; nullptr
/// when there is none, with one line in `why` ("symbol not found", "driver too old", ...).
using CudaEntryLookup = std::function<void*(const char* name, int abi, std::string& why)>;

/// Fills every entry of `api` through `lookup`, each at its own ABI version (KVLAB_CUDA_DRIVER_ENTRIES).
/// Returns "" or one line naming the first entry the lookup did not provide; `api` is then all
/// nullptr. Production looks up through cudaGetDriverEntryPointByVersion, the double through
/// CudaDriverDouble::entry_point: one resolution for both.
[[nodiscard]] std::string resolve_cuda_driver_table(CudaDriverApi& api, const CudaEntryLookup& lookup);

namespace detail {
/// Throws OutOfMemory for CUDA_ERROR_OUT_OF_MEMORY and CudaError otherwise; the message reads
/// "<call> failed: CUDA_ERROR_X (code): description" and carries file:line. Unknown codes are named
/// by api.cuGetErrorName when the table has it.
[[noreturn]] void throw_cu_error(const CudaDriverApi& api, CUresult status, const char* call, const char* file,
                                 int line);
}  // namespace detail

}  // namespace kvlab

/// Calls `api.call` and throws on failure, as KVLAB_CUDA_TRY does for the runtime:
///   KVLAB_CU_TRY(api, cuMemMap(ptr, size, 0, handle, 0));
/// CUDA_ERROR_OUT_OF_MEMORY throws kvlab::OutOfMemory, anything else kvlab::CudaError naming the
/// call, the CUresult (e.g. CUDA_ERROR_INVALID_VALUE) and this file:line. `api` is evaluated once.
#define KVLAB_CU_TRY(api, call)                                                                    \
  do {                                                                                             \
    const ::kvlab::CudaDriverApi& kvlab_cu_api_ = (api);                                           \
    const ::CUresult kvlab_cu_status_ = kvlab_cu_api_.call;                                        \
    if (kvlab_cu_status_ != ::CUDA_SUCCESS)                                                        \
      ::kvlab::detail::throw_cu_error(kvlab_cu_api_, kvlab_cu_status_, #call, __FILE__, __LINE__); \
  } while (0)
