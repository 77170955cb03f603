// The real driver table: on a machine without an NVIDIA driver (or a build without CUDA) it must
// refuse with one clear line, never crash; and the CUresult check macro must name the error.
#include <gtest/gtest.h>

#include <string>

#include "alloc/cuda/cuda_runtime.hpp"
#include "alloc/core/error.hpp"

#if KVLAB_HAS_CUDA_HEADERS
#include "alloc/cuda/cuda_driver.hpp"
#include "alloc/cuda/cuda_primary_context.hpp"
#include "alloc/cuda/cuda_vmm_memory_resource.hpp"

namespace kvlab {
namespace {

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

// Not a documented code, yet inside CUresult's value range (0..1023), so forming it is defined.
constexpr auto kUnknownResult = static_cast<CUresult>(1000);

std::string what_of_cuda_driver() {
  try {
    (void)cuda_driver();
  } catch (const CudaError& e) {
    return e.what();
  }
  return {};
}

TEST(CudaDriver, ThrowsOneClearLineWithoutDriverOrDevice) {
  if (cuda_status().available) GTEST_SKIP() << "a CUDA driver and device are present: " << cuda_status().message;
  const std::string what = what_of_cuda_driver();
  ASSERT_FALSE(what.empty()) << "cuda_driver() must throw CudaError without a usable driver";
  EXPECT_TRUE(Contains(what, "cuda_driver.cpp:"));
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
#if KVLAB_HAS_CUDA
  EXPECT_TRUE(Contains(what, "no NVIDIA driver") || Contains(what, "no usable device")) << what;
#else
  EXPECT_TRUE(Contains(what, "built without CUDA"));
#endif
  // The failure is cached: a second call says the same thing (no second probe, no crash).
  EXPECT_EQ(what_of_cuda_driver(), what);
}

TEST(CudaDriver, ResolvesEveryEntryWhenADriverExists) {
  if (!cuda_status().available) GTEST_SKIP() << "no CUDA driver here: " << cuda_status().message;
  const CudaDriverApi& api = cuda_driver();
#define KVLAB_EXPECT_RESOLVED(name, abi) EXPECT_NE(api.name, nullptr) << #name;
  KVLAB_CUDA_DRIVER_ENTRIES(KVLAB_EXPECT_RESOLVED)
#undef KVLAB_EXPECT_RESOLVED
  int count = 0;
  KVLAB_CU_TRY(api, cuDeviceGetCount(&count));
  EXPECT_GE(count, 1);
}

// The H200's failure, on the real driver: synchronize and a device allocation's whole round trip
// (reserve, create, map, access, synchronize, unmap, release, free) through the resolved table,
// twice, with the primary context retained and released in between.
TEST(CudaDriver, SynchronizesAndGivesDeviceMemoryBackOnTheRealDriver) {
  if (!cuda_status().available) GTEST_SKIP() << "no CUDA driver here: " << cuda_status().message;
  for (int round = 0; round < 2; ++round) {
    CudaPrimaryContext ctx(cuda_driver(), 0);
    EXPECT_EQ(ctx.synchronize(), CUDA_SUCCESS) << "round " << round;
    CudaVmmMemoryResource mr(cuda_driver(), Device::cuda, 0);
    void* p = mr.allocate(100);
    mr.deallocate(p, 100);
    EXPECT_EQ(mr.pending_frees(), 0u) << mr.refusals();
    EXPECT_EQ(mr.live_allocations(), 0u);
  }
}

TEST(CudaDriverResultName, NamesDocumentedCodesWithoutADriver) {
  EXPECT_STREQ(cu_result_name(CUDA_SUCCESS), "CUDA_SUCCESS");
  EXPECT_STREQ(cu_result_name(CUDA_ERROR_INVALID_VALUE), "CUDA_ERROR_INVALID_VALUE");
  EXPECT_STREQ(cu_result_name(CUDA_ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_STREQ(cu_result_name(CUDA_ERROR_NOT_INITIALIZED), "CUDA_ERROR_NOT_INITIALIZED");
  EXPECT_STREQ(cu_result_name(CUDA_ERROR_INVALID_DEVICE), "CUDA_ERROR_INVALID_DEVICE");
  EXPECT_STREQ(cu_result_name(CUDA_ERROR_INVALID_CONTEXT), "CUDA_ERROR_INVALID_CONTEXT");
  EXPECT_STREQ(cu_result_name(CUDA_ERROR_ILLEGAL_ADDRESS), "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_STREQ(cu_result_name(CUDA_ERROR_UNKNOWN), "CUDA_ERROR_UNKNOWN");
  EXPECT_STREQ(cu_result_description(CUDA_ERROR_OUT_OF_MEMORY), "out of memory");
  EXPECT_EQ(cu_result_name(kUnknownResult), nullptr);
  EXPECT_EQ(cu_result_description(kUnknownResult), nullptr);
}

// A hand-made table: each test fills only the entries it calls.
CudaDriverApi failing_table() {
  CudaDriverApi api;
  api.cuMemUnmap = [](CUdeviceptr, size_t) -> CUresult { return CUDA_ERROR_INVALID_VALUE; };
  api.cuMemCreate = [](CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                       unsigned long long) -> CUresult { return CUDA_ERROR_OUT_OF_MEMORY; };
  api.cuMemRelease = [](CUmemGenericAllocationHandle) -> CUresult { return kUnknownResult; };
  api.cuInit = [](unsigned int) -> CUresult { return CUDA_SUCCESS; };
  return api;
}

TEST(CudaDriverTry, ThrowsCudaErrorNamingCallCodeAndLocation) {
  const CudaDriverApi api = failing_table();
  try {
    KVLAB_CU_TRY(api, cuMemUnmap(0, 0));
    FAIL() << "KVLAB_CU_TRY did not throw";
  } catch (const OutOfMemory&) {
    FAIL() << "CUDA_ERROR_INVALID_VALUE is not out of memory";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(Contains(what, "cuMemUnmap(0, 0) failed: CUDA_ERROR_INVALID_VALUE (1)"));
    EXPECT_TRUE(Contains(what, "cuda_driver_test.cpp:"));
  }
}

TEST(CudaDriverTry, OutOfMemoryIsItsOwnType) {
  const CudaDriverApi api = failing_table();
  CUmemGenericAllocationHandle handle = 0;
  CUmemAllocationProp prop{};
  EXPECT_THROW(KVLAB_CU_TRY(api, cuMemCreate(&handle, 1, &prop, 0)), OutOfMemory);
}

TEST(CudaDriverTry, UnknownCodesAreNamedByTheDriverWhenPossible) {
  CudaDriverApi api = failing_table();
  try {
    KVLAB_CU_TRY(api, cuMemRelease(7));
    FAIL() << "KVLAB_CU_TRY did not throw";
  } catch (const CudaError& e) {
    EXPECT_TRUE(Contains(std::string(e.what()), "unrecognized CUresult (1000)"));
  }
  api.cuGetErrorName = [](CUresult, const char** str) -> CUresult {
    *str = "CUDA_ERROR_FROM_THE_DRIVER";
    return CUDA_SUCCESS;
  };
  try {
    KVLAB_CU_TRY(api, cuMemRelease(7));
    FAIL() << "KVLAB_CU_TRY did not throw";
  } catch (const CudaError& e) {
    EXPECT_TRUE(Contains(std::string(e.what()), "CUDA_ERROR_FROM_THE_DRIVER (1000)"));
  }
}

TEST(CudaDriverTry, SuccessDoesNotThrow) {
  const CudaDriverApi api = failing_table();
  EXPECT_NO_THROW(KVLAB_CU_TRY(api, cuInit(0)));
}

}  // namespace
}  // namespace kvlab

#else  // !KVLAB_HAS_CUDA_HEADERS

TEST(CudaDriver, NeedsToolkitHeaders) {
  GTEST_SKIP() << "CUDA toolkit headers not found: the driver table is not built";
}

#endif
