#include "alloc/cuda/cuda_driver.hpp"

#include <string>
#include <type_traits>

#include <cudaTypedefs.h>

#include "alloc/cuda/cuda_driver_log.hpp"
#include "alloc/cuda/cuda_runtime.hpp"

#if KVLAB_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvlab {

// Each member must have exactly the ABI it is resolved at: a wrong signature would still compile
// after the reinterpret_cast in resolve_cuda_driver_table() and then read garbage arguments at run
// time (cuCtxSynchronize at 13000 did, on the H200). <cudaTypedefs.h> names every ABI of every
// entry point PFN_<name>_v<version>.
#define KVLAB_CHECK_SIGNATURE(name, abi)                                            \
  static_assert(std::is_same_v<decltype(CudaDriverApi::name), PFN_##name##_v##abi>, \
                "CudaDriverApi::" #name " does not have the ABI of PFN_" #name "_v" #abi);
KVLAB_CUDA_DRIVER_ENTRIES(KVLAB_CHECK_SIGNATURE)
#undef KVLAB_CHECK_SIGNATURE

namespace {

struct ResultInfo {
  CUresult code;
  const char* name;
  const char* description;
};

// The codes kvlab and the double can produce, plus the ones a failing driver commonly returns.
// Names come from the enum so they cannot drift; descriptions are short paraphrases of cuda.h.
#define KVLAB_CU_RESULT(code, text) \
  { code, #code, text }
constexpr ResultInfo kResults[] = {
    KVLAB_CU_RESULT(CUDA_SUCCESS, "no error"),
    KVLAB_CU_RESULT(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    KVLAB_CU_RESULT(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    KVLAB_CU_RESULT(CUDA_ERROR_NOT_INITIALIZED, "driver not initialized (cuInit not called)"),
    KVLAB_CU_RESULT(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    KVLAB_CU_RESULT(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    KVLAB_CU_RESULT(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) busy or unavailable"),
    KVLAB_CU_RESULT(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    KVLAB_CU_RESULT(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    KVLAB_CU_RESULT(CUDA_ERROR_DEVICE_NOT_LICENSED, "device not licensed"),
    KVLAB_CU_RESULT(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    KVLAB_CU_RESULT(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    KVLAB_CU_RESULT(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
    KVLAB_CU_RESULT(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
    KVLAB_CU_RESULT(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
    KVLAB_CU_RESULT(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    KVLAB_CU_RESULT(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired"),
    KVLAB_CU_RESULT(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    KVLAB_CU_RESULT(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    KVLAB_CU_RESULT(CUDA_ERROR_ILLEGAL_STATE, "the operation is not permitted in the current state"),
    KVLAB_CU_RESULT(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    KVLAB_CU_RESULT(CUDA_ERROR_NOT_READY, "device not ready"),
    KVLAB_CU_RESULT(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    KVLAB_CU_RESULT(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    KVLAB_CU_RESULT(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
    KVLAB_CU_RESULT(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    KVLAB_CU_RESULT(CUDA_ERROR_ASSERT, "device-side assert triggered"),
    KVLAB_CU_RESULT(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
    KVLAB_CU_RESULT(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    KVLAB_CU_RESULT(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    KVLAB_CU_RESULT(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    KVLAB_CU_RESULT(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
    KVLAB_CU_RESULT(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
                    "system has unsupported display driver / cuda driver combination"),
    KVLAB_CU_RESULT(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
                    "forward compatibility was attempted on non supported HW"),
    KVLAB_CU_RESULT(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
    KVLAB_CU_RESULT(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef KVLAB_CU_RESULT

const ResultInfo* find_result(CUresult result) noexcept {
  for (const ResultInfo& info : kResults) {
    if (info.code == result) return &info;
  }
  return nullptr;
}

// Outcome of the one resolution attempt: the table, or the one-line reason there is none.
struct Resolution {
  CudaDriverApi api;
  std::string error;
};

#if KVLAB_HAS_CUDA
/// The real driver's entry point at one ABI version, through the runtime that is linked statically.
void* runtime_entry_point(const char* name, int abi, std::string& why) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err =
      cudaGetDriverEntryPointByVersion(name, &fn, static_cast<unsigned>(abi), cudaEnableDefault, &query);
  if (err == cudaSuccess && query == cudaDriverEntryPointSuccess && fn != nullptr) return fn;
  (void)cudaGetLastError();
  why = err != cudaSuccess                                 ? cudaGetErrorName(err)
        : query == cudaDriverEntryPointVersionNotSufficent ? "driver too old"
                                                           : "symbol not found";
  return nullptr;
}
#endif

Resolution resolve() noexcept {
  Resolution r;
  try {
    // cuda_status() already asked the runtime whether a driver and a device answer; reuse its
    // one-line verdict so every CUDA entry point reports the same reason.
    const CudaStatus& status = cuda_status();
    if (!status.available) {
      r.error = status.message;
      return r;
    }
#if KVLAB_HAS_CUDA
    r.error = resolve_cuda_driver_table(r.api, runtime_entry_point);
    if (r.error.empty()) {
      // The runtime has initialised the driver already; cuInit is idempotent and makes the table
      // usable on its own.
      if (const CUresult init = r.api.cuInit(0); init != CUDA_SUCCESS) {
        const char* name = cu_result_name(init);
        r.error = "cuInit(0) failed: " + (name != nullptr ? std::string(name) : std::to_string(init));
      }
    }
    if (!r.error.empty()) r.api = CudaDriverApi{};
#endif
  } catch (const std::exception& e) {
    r.error = e.what();
    r.api = CudaDriverApi{};
  }
  return r;
}

}  // namespace

const CudaDriverApi& cuda_driver() {
  static const Resolution resolution = resolve();
  if (!resolution.error.empty()) KVLAB_THROW(CudaError, resolution.error);
  static const CudaDriverApi& table = logged_if_requested(resolution.api);  // KVLAB_DRIVER_LOG=FILE
  return table;
}

std::string resolve_cuda_driver_table(CudaDriverApi& api, const CudaEntryLookup& lookup) {
  std::string error;
  const auto entry = [&](const char* name, int abi, auto& slot) {
    if (!error.empty()) return;
    std::string why;
    void* fn = lookup(name, abi, why);
    if (fn == nullptr) {
      error = std::string("the NVIDIA driver does not provide ") + name + " with the ABI of CUDA " +
              std::to_string(abi / 1000) + "." + std::to_string(abi % 1000 / 10) + " (" +
              (why.empty() ? "symbol not found" : why) + ")";
      return;
    }
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(fn);  // the ABI static_assert'ed above
  };
#define KVLAB_RESOLVE_ENTRY(name, abi) entry(#name, abi, api.name);
  KVLAB_CUDA_DRIVER_ENTRIES(KVLAB_RESOLVE_ENTRY)
#undef KVLAB_RESOLVE_ENTRY
  if (!error.empty()) api = CudaDriverApi{};
  return error;
}

const char* cu_result_name(CUresult result) noexcept {
  const ResultInfo* info = find_result(result);
  return info != nullptr ? info->name : nullptr;
}

const char* cu_result_description(CUresult result) noexcept {
  const ResultInfo* info = find_result(result);
  return info != nullptr ? info->description : nullptr;
}

namespace detail {

void throw_cu_error(const CudaDriverApi& api, CUresult status, const char* call, const char* file, int line) {
  const char* name = cu_result_name(status);
  const char* description = cu_result_description(status);
  if (name == nullptr && api.cuGetErrorName != nullptr && api.cuGetErrorName(status, &name) != CUDA_SUCCESS) {
    name = nullptr;
  }
  if (description == nullptr && api.cuGetErrorString != nullptr &&
      api.cuGetErrorString(status, &description) != CUDA_SUCCESS) {
    description = nullptr;
  }
  std::string msg = std::string(call) + " failed: " + (name != nullptr ? name : "unrecognized CUresult") + " (" +
                    std::to_string(static_cast<int>(status)) + ")";
  if (description != nullptr) msg += std::string(": ") + description;
  if (status == CUDA_ERROR_OUT_OF_MEMORY) throw OutOfMemory(located(file, line, msg));
  throw CudaError(located(file, line, msg));
}

}  // namespace detail

}  // namespace kvlab
