// The CUDA driver double enforces the documented virtual-memory contract: each rule has a passing
// case and a violating case that must return the documented CUresult and change nothing.
#include <gtest/gtest.h>

#include "alloc/core/error.hpp"

#if KVLAB_HAS_CUDA_HEADERS
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "alloc/cuda/emulated/cuda_driver_double.hpp"

namespace kvlab {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kG = 2 * kMiB;  // the double's default granularity

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

CUmemAllocationProp device_prop(int device = 0) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUmemAccessDesc access_desc(CUmemAccess_flags flags, int device = 0) {
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device;
  desc.flags = flags;
  return desc;
}

// Not a documented code, yet inside CUresult's value range (0..1023), so forming it is defined.
constexpr auto kUnknownResult = static_cast<CUresult>(1000);

unsigned char* host(CUdeviceptr ptr) { return reinterpret_cast<unsigned char*>(static_cast<std::uintptr_t>(ptr)); }

CudaDriverDoubleConfig small_device(std::size_t capacity = 64 * kMiB) {
  CudaDriverDoubleConfig config;
  config.capacity = capacity;
  return config;
}

class CudaDriverDoubleTest : public ::testing::Test {
 protected:
  explicit CudaDriverDoubleTest(CudaDriverDoubleConfig config = small_device()) : double_(std::move(config)) {}

  void SetUp() override { ASSERT_EQ(api().cuInit(0), CUDA_SUCCESS); }

  // Every test gives everything back: the double's accounting proves it.
  void TearDown() override { EXPECT_TRUE(double_.usage().empty()) << double_.leak_report(); }

  const CudaDriverApi& api() const { return double_.api(); }

  CUdeviceptr reserve(std::size_t size, std::size_t alignment = 0) {
    CUdeviceptr ptr = 0;
    EXPECT_EQ(api().cuMemAddressReserve(&ptr, size, alignment, 0, 0), CUDA_SUCCESS);
    return ptr;
  }

  CUmemGenericAllocationHandle create(std::size_t size) {
    CUmemGenericAllocationHandle handle = 0;
    const CUmemAllocationProp prop = device_prop();
    EXPECT_EQ(api().cuMemCreate(&handle, size, &prop, 0), CUDA_SUCCESS);
    return handle;
  }

  CUresult set_access(CUdeviceptr ptr, std::size_t size, CUmemAccess_flags flags) {
    const CUmemAccessDesc desc = access_desc(flags);
    return api().cuMemSetAccess(ptr, size, &desc, 1);
  }

  /// Maps `handle` at `ptr` and makes it read-write.
  void map_rw(CUdeviceptr ptr, std::size_t size, CUmemGenericAllocationHandle handle) {
    ASSERT_EQ(api().cuMemMap(ptr, size, 0, handle, 0), CUDA_SUCCESS);
    ASSERT_EQ(set_access(ptr, size, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  }

  /// The last violation mentions `part`; clears the log so the next expectation starts clean.
  void expect_violation(const std::string& part) {
    const std::vector<std::string> v = double_.violations();
    ASSERT_FALSE(v.empty()) << "expected a violation mentioning \"" << part << "\"";
    EXPECT_TRUE(Contains(v.back(), part));
    double_.clear_violations();
  }

  void expect_no_violation() {
    const std::vector<std::string> v = double_.violations();
    EXPECT_TRUE(v.empty()) << v.front();
  }

  CudaDriverDouble double_;
};

// --- initialisation, devices, contexts ---

TEST(CudaDriverDoubleInit, CallsBeforeCuInitReturnNotInitialized) {
  CudaDriverDouble d;
  const CudaDriverApi& api = d.api();
  int count = 0;
  EXPECT_EQ(api.cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  int version = 0;
  EXPECT_EQ(api.cuDriverGetVersion(&version), CUDA_SUCCESS);  // allowed before cuInit
  EXPECT_EQ(version, CUDA_VERSION);
  EXPECT_EQ(api.cuInit(1), CUDA_ERROR_INVALID_VALUE);  // flags must be 0
  EXPECT_EQ(api.cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(api.cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(d.violations().size(), 2u);
}

TEST(CudaDriverDoubleInit, OnlyOneDoubleAtATimeAndNoneMeansNotInitialized) {
  CudaDriverApi api;
  {
    CudaDriverDouble d;
    api = d.api();
    EXPECT_EQ(CudaDriverDouble::current(), &d);
    EXPECT_THROW(CudaDriverDouble second, InvalidArgument);
    EXPECT_EQ(CudaDriverDouble::current(), &d);
  }
  EXPECT_EQ(CudaDriverDouble::current(), nullptr);
  EXPECT_EQ(api.cuInit(0), CUDA_ERROR_NOT_INITIALIZED);  // table outliving its double is inert
}

TEST(CudaDriverDoubleInit, RejectsAnInvalidGranularity) {
  CudaDriverDoubleConfig config;
  config.granularity = 3 * kMiB;
  EXPECT_THROW(CudaDriverDouble d(config), InvalidArgument);
  EXPECT_EQ(CudaDriverDouble::current(), nullptr);
}

TEST_F(CudaDriverDoubleTest, OneFakeDevice) {
  CUdevice dev = -1;
  EXPECT_EQ(api().cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(api().cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
  expect_violation("ordinal 1");
  char name[64] = {};
  EXPECT_EQ(api().cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
  EXPECT_STREQ(name, "kvlab CUDA driver double");
  char tiny[6] = {};
  EXPECT_EQ(api().cuDeviceGetName(tiny, sizeof tiny, 0), CUDA_SUCCESS);
  EXPECT_STREQ(tiny, "kvlab");
  int value = 0;
  EXPECT_EQ(api().cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(value, 1);
  EXPECT_EQ(api().cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0), CUDA_SUCCESS);
  EXPECT_EQ(value, 9);
  EXPECT_EQ(api().cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 1), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(api().cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  std::size_t total = 0;
  EXPECT_EQ(api().cuDeviceTotalMem(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, 64 * kMiB);
  double_.clear_violations();
}

TEST_F(CudaDriverDoubleTest, ErrorNamesAndStrings) {
  const char* text = nullptr;
  EXPECT_EQ(api().cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(api().cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "out of memory");
  // Documented: an unknown code gives CUDA_ERROR_INVALID_VALUE and a null string.
  EXPECT_EQ(api().cuGetErrorName(kUnknownResult, &text), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(text, nullptr);
  expect_no_violation();
}

TEST_F(CudaDriverDoubleTest, PrimaryContextRetainSetSynchronizeRelease) {
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);  // no current context
  expect_violation("no current context");
  std::size_t free = 0;
  std::size_t total = 0;
  EXPECT_EQ(api().cuMemGetInfo(&free, &total), CUDA_ERROR_INVALID_CONTEXT);
  double_.clear_violations();

  CUcontext ctx = nullptr;
  ASSERT_EQ(api().cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(api().cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  CUcontext current = nullptr;
  EXPECT_EQ(api().cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, ctx);
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 64 * kMiB);
  EXPECT_EQ(free, 64 * kMiB);
  const CUmemGenericAllocationHandle h = create(4 * kG);
  EXPECT_EQ(api().cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, 64 * kMiB - 4 * kG);
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);

  // Another thread has no current context until it sets one.
  std::thread([&] { EXPECT_EQ(api().cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT); }).join();
  double_.clear_violations();

  EXPECT_EQ(double_.usage().primary_context_refs, 1);
  EXPECT_EQ(api().cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(api().cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(api().cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);  // more releases than retains
  expect_violation("not retained");
  EXPECT_EQ(api().cuCtxSetCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT);  // released: no longer usable
  expect_violation("not a retained primary context");
}

// --- granularity ---

TEST_F(CudaDriverDoubleTest, GranularityMinimumEqualsRecommended) {
  const CUmemAllocationProp prop = device_prop();
  std::size_t g = 0;
  EXPECT_EQ(api().cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  EXPECT_EQ(g, kG);
  EXPECT_EQ(api().cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
  EXPECT_EQ(g, kG);
  expect_no_violation();

  EXPECT_EQ(api().cuMemGetAllocationGranularity(&g, nullptr, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);
  const CUmemAllocationProp other_device = device_prop(1);
  EXPECT_EQ(api().cuMemGetAllocationGranularity(&g, &other_device, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_DEVICE);
  // (An out-of-range option cannot be formed without undefined behaviour: the enum only holds 0..1.)
  EXPECT_EQ(double_.violations().size(), 2u);
  double_.clear_violations();
}

TEST(CudaDriverDoubleGranularity, IsConfigurable) {
  CudaDriverDoubleConfig config;
  config.granularity = 64 * 1024;
  CudaDriverDouble d(config);
  ASSERT_EQ(d.api().cuInit(0), CUDA_SUCCESS);
  const CUmemAllocationProp prop = device_prop();
  std::size_t g = 0;
  EXPECT_EQ(d.api().cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  EXPECT_EQ(g, 64u * 1024);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(d.api().cuMemCreate(&h, 64 * 1024, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(d.api().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_TRUE(d.usage().empty());
}

// --- rule: sizes, addresses and offsets are granularity multiples ---

TEST_F(CudaDriverDoubleTest, ReserveIsGranularityAlignedAndHonoursAlignment) {
  const CUdeviceptr a = reserve(3 * kG);
  EXPECT_EQ(a % kG, 0u);
  const CUdeviceptr b = reserve(kG, 16 * kG);
  EXPECT_EQ(b % (16 * kG), 0u);
  EXPECT_EQ(double_.usage().reservations, 2u);
  EXPECT_EQ(double_.usage().reserved_bytes, 4 * kG);
  EXPECT_EQ(api().cuMemAddressFree(a, 3 * kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(b, kG), CUDA_SUCCESS);
  expect_no_violation();
}

TEST_F(CudaDriverDoubleTest, ReserveRejectsBadArguments) {
  CUdeviceptr ptr = 0;
  EXPECT_EQ(api().cuMemAddressReserve(&ptr, kG + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  expect_violation("granularity");
  EXPECT_EQ(api().cuMemAddressReserve(&ptr, 0, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  expect_violation("granularity");
  EXPECT_EQ(api().cuMemAddressReserve(&ptr, kG, 3 * kG, 0, 0), CUDA_ERROR_INVALID_VALUE);
  expect_violation("power of two");
  EXPECT_EQ(api().cuMemAddressReserve(&ptr, kG, 0, 0, 1), CUDA_ERROR_INVALID_VALUE);
  expect_violation("flags");
  EXPECT_EQ(api().cuMemAddressReserve(nullptr, kG, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  expect_violation("null");
  EXPECT_EQ(double_.usage().reservations, 0u);
}

TEST_F(CudaDriverDoubleTest, CreateRejectsBadSizesAndProperties) {
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp prop = device_prop();
  EXPECT_EQ(api().cuMemCreate(&h, kG / 2, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  expect_violation("granularity");
  EXPECT_EQ(api().cuMemCreate(&h, 0, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  expect_violation("granularity");
  EXPECT_EQ(api().cuMemCreate(&h, kG, &prop, 1), CUDA_ERROR_INVALID_VALUE);
  expect_violation("flags");
  prop.type = CU_MEM_ALLOCATION_TYPE_INVALID;
  EXPECT_EQ(api().cuMemCreate(&h, kG, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  expect_violation("PINNED");
  const CUmemAllocationProp other_device = device_prop(1);
  EXPECT_EQ(api().cuMemCreate(&h, kG, &other_device, 0), CUDA_ERROR_INVALID_DEVICE);
  expect_violation("device 1");
  EXPECT_EQ(double_.usage(), CudaDriverDoubleUsage{});
}

TEST_F(CudaDriverDoubleTest, MapRequiresGranularityMultiples) {
  const CUdeviceptr va = reserve(4 * kG);
  const CUmemGenericAllocationHandle h = create(2 * kG);
  EXPECT_EQ(api().cuMemMap(va + 4096, kG, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  expect_violation("multiples of the granularity");
  EXPECT_EQ(api().cuMemMap(va, kG + 4096, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  expect_violation("multiples of the granularity");
  EXPECT_EQ(api().cuMemMap(va, kG, 0, h, 1), CUDA_ERROR_INVALID_VALUE);
  expect_violation("flags");
  EXPECT_EQ(double_.usage().mappings, 0u);
  EXPECT_EQ(api().cuMemMap(va + kG, 2 * kG, 0, h, 0), CUDA_SUCCESS);
  expect_no_violation();
  EXPECT_EQ(api().cuMemUnmap(va + kG, 2 * kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, 4 * kG), CUDA_SUCCESS);
}

// --- rule: offset must be 0 (documented "currently must be zero"), offset + size fits the handle ---

TEST_F(CudaDriverDoubleTest, MapOffsetMustBeZeroAndSizeMustFitTheHandle) {
  const CUdeviceptr va = reserve(4 * kG);
  const CUmemGenericAllocationHandle h = create(2 * kG);
  EXPECT_EQ(api().cuMemMap(va, kG, kG, h, 0), CUDA_ERROR_INVALID_VALUE);
  expect_violation("must be 0");
  EXPECT_EQ(api().cuMemMap(va, 3 * kG, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  expect_violation("exceeds the allocation");
  EXPECT_EQ(api().cuMemMap(va, kG, 0, h, 0), CUDA_SUCCESS);  // a prefix of the handle is fine
  EXPECT_EQ(api().cuMemUnmap(va, kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, 4 * kG), CUDA_SUCCESS);
  expect_no_violation();
}

TEST(CudaDriverDoubleMapOffset, NonZeroOffsetWhenAllowedMapsThatPartOfTheHandle) {
  CudaDriverDoubleConfig config = small_device();
  config.allow_map_offset = true;
  CudaDriverDouble d(config);
  const CudaDriverApi& api = d.api();
  ASSERT_EQ(api.cuInit(0), CUDA_SUCCESS);
  const CUmemAllocationProp prop = device_prop();
  const CUmemAccessDesc rw = access_desc(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(api.cuMemAddressReserve(&va, 3 * kG, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemCreate(&h, 2 * kG, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemMap(va, 2 * kG, 0, h, 0), CUDA_SUCCESS);        // whole handle
  ASSERT_EQ(api.cuMemMap(va + 2 * kG, kG, kG, h, 0), CUDA_SUCCESS);  // its second granule again
  ASSERT_EQ(api.cuMemSetAccess(va, 3 * kG, &rw, 1), CUDA_SUCCESS);
  host(va)[kG + 5] = 0x5a;
  EXPECT_EQ(host(va + 2 * kG)[5], 0x5a);
  EXPECT_EQ(api.cuMemMap(va, kG, 2 * kG, h, 0), CUDA_ERROR_INVALID_VALUE);  // offset past the end
  EXPECT_EQ(api.cuMemUnmap(va, 3 * kG), CUDA_SUCCESS);
  EXPECT_EQ(api.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api.cuMemAddressFree(va, 3 * kG), CUDA_SUCCESS);
  EXPECT_TRUE(d.usage().empty()) << d.leak_report();
}

// --- rule: a map lies inside one reservation and never over mapped bytes ---

TEST_F(CudaDriverDoubleTest, MapMustLieInsideOneReservation) {
  const CUdeviceptr va = reserve(2 * kG);
  const CUmemGenericAllocationHandle h = create(2 * kG);
  EXPECT_EQ(api().cuMemMap(va + kG, 2 * kG, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // runs past the end
  expect_violation("not inside one reservation");
  EXPECT_EQ(api().cuMemMap(va - 2 * kG, 2 * kG, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // before it
  expect_violation("not inside one reservation");
  EXPECT_EQ(api().cuMemMap(va, 2 * kG, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemUnmap(va, 2 * kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, 2 * kG), CUDA_SUCCESS);
}

TEST_F(CudaDriverDoubleTest, MapNeverOverMappedBytes) {
  const CUdeviceptr va = reserve(4 * kG);
  const CUmemGenericAllocationHandle a = create(2 * kG);
  const CUmemGenericAllocationHandle b = create(2 * kG);
  ASSERT_EQ(api().cuMemMap(va + kG, 2 * kG, 0, a, 0), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemMap(va, 2 * kG, 0, b, 0), CUDA_ERROR_INVALID_VALUE);  // overlaps its start
  expect_violation("overlaps the mapping");
  EXPECT_EQ(api().cuMemMap(va + 2 * kG, 2 * kG, 0, b, 0), CUDA_ERROR_INVALID_VALUE);  // overlaps its end
  expect_violation("overlaps the mapping");
  EXPECT_EQ(api().cuMemMap(va + kG, kG, 0, b, 0), CUDA_ERROR_INVALID_VALUE);  // exactly on top
  expect_violation("overlaps the mapping");
  EXPECT_EQ(double_.usage().mappings, 1u);
  EXPECT_EQ(api().cuMemMap(va + 3 * kG, kG, 0, b, 0), CUDA_SUCCESS);  // adjacent is fine
  EXPECT_EQ(api().cuMemUnmap(va + kG, 3 * kG), CUDA_SUCCESS);         // both, in one call
  EXPECT_EQ(api().cuMemRelease(a), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemRelease(b), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, 4 * kG), CUDA_SUCCESS);
  expect_no_violation();
}

TEST_F(CudaDriverDoubleTest, MapRejectsUnknownAndReleasedHandles) {
  const CUdeviceptr va = reserve(kG);
  EXPECT_EQ(api().cuMemMap(va, kG, 0, 12345, 0), CUDA_ERROR_INVALID_VALUE);
  expect_violation("unknown or released");
  const CUmemGenericAllocationHandle h = create(kG);
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemMap(va, kG, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  expect_violation("unknown or released");
  EXPECT_EQ(api().cuMemAddressFree(va, kG), CUDA_SUCCESS);
}

// --- rule: access only on fully mapped ranges, and before any access ---

TEST_F(CudaDriverDoubleTest, SetAccessOnlyOnFullyMappedRanges) {
  const CUdeviceptr va = reserve(4 * kG);
  const CUmemGenericAllocationHandle a = create(kG);
  const CUmemGenericAllocationHandle b = create(kG);
  ASSERT_EQ(api().cuMemMap(va, kG, 0, a, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemMap(va + kG, kG, 0, b, 0), CUDA_SUCCESS);
  EXPECT_EQ(set_access(va, 3 * kG, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_ERROR_INVALID_VALUE);
  expect_violation("not fully mapped");
  EXPECT_EQ(set_access(va + 3 * kG, kG, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_ERROR_INVALID_VALUE);
  expect_violation("not fully mapped");
  EXPECT_EQ(set_access(va, kG + 4096, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_ERROR_INVALID_VALUE);
  expect_violation("granularity");
  // The failed calls granted nothing.
  EXPECT_FALSE(double_.check_access(va, 1, false));
  double_.clear_violations();
  EXPECT_EQ(set_access(va, 2 * kG, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);  // spans both mappings
  EXPECT_TRUE(double_.check_access(va, 2 * kG, true));
  expect_no_violation();
  EXPECT_EQ(api().cuMemUnmap(va, 2 * kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemRelease(a), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemRelease(b), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, 4 * kG), CUDA_SUCCESS);
}

TEST_F(CudaDriverDoubleTest, SetAccessRejectsBadDescriptors) {
  const CUdeviceptr va = reserve(kG);
  const CUmemGenericAllocationHandle h = create(kG);
  ASSERT_EQ(api().cuMemMap(va, kG, 0, h, 0), CUDA_SUCCESS);
  const CUmemAccessDesc other_device = access_desc(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 1);
  EXPECT_EQ(api().cuMemSetAccess(va, kG, &other_device, 1), CUDA_ERROR_INVALID_DEVICE);
  const CUmemAccessDesc bad_flags = access_desc(static_cast<CUmemAccess_flags>(2));
  EXPECT_EQ(api().cuMemSetAccess(va, kG, &bad_flags, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMemSetAccess(va, kG, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(double_.violations().size(), 3u);
  double_.clear_violations();
  EXPECT_EQ(api().cuMemUnmap(va, kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, kG), CUDA_SUCCESS);
}

TEST_F(CudaDriverDoubleTest, AccessMustBeSetBeforeAnyAccess) {
  const CUdeviceptr va = reserve(2 * kG);
  const CUmemGenericAllocationHandle h = create(kG);
  EXPECT_FALSE(double_.check_access(va, 16, false));  // reserved, not mapped
  expect_violation("is not mapped");
  ASSERT_EQ(api().cuMemMap(va, kG, 0, h, 0), CUDA_SUCCESS);
  EXPECT_FALSE(double_.check_access(va, 16, false));  // mapped, no access yet
  expect_violation("has access none");
  const CUmemLocation device{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  unsigned long long flags = 99;
  EXPECT_EQ(api().cuMemGetAccess(&flags, &device, va), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_NONE));

  ASSERT_EQ(set_access(va, kG, CU_MEM_ACCESS_FLAGS_PROT_READ), CUDA_SUCCESS);
  EXPECT_TRUE(double_.check_access(va, kG, false));
  EXPECT_FALSE(double_.check_access(va + 100, 8, true));  // read-only
  expect_violation("has access read");
  EXPECT_EQ(host(va)[100], 0);  // reading is really allowed now

  ASSERT_EQ(set_access(va, kG, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemGetAccess(&flags, &device, va + 4096), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  EXPECT_TRUE(double_.check_access(va, kG, true));
  host(va)[100] = 7;
  EXPECT_FALSE(double_.check_access(va + kG - 8, 16, false));  // runs into the unmapped granule
  expect_violation("is not mapped");
  EXPECT_TRUE(double_.check_access(va, 0, true));  // an empty access touches nothing

  // Unmap and map again: the new mapping starts without access, as documented.
  ASSERT_EQ(api().cuMemUnmap(va, kG), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemMap(va + kG, kG, 0, h, 0), CUDA_SUCCESS);
  EXPECT_FALSE(double_.check_access(va + kG, 1, false));
  expect_violation("has access none");
  EXPECT_EQ(api().cuMemGetAccess(&flags, &device, va), CUDA_ERROR_INVALID_VALUE);  // no longer mapped
  expect_violation("is not mapped");
  ASSERT_EQ(api().cuMemUnmap(va + kG, kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, 2 * kG), CUDA_SUCCESS);
}

using CudaDriverDoubleDeathTest = CudaDriverDoubleTest;

TEST_F(CudaDriverDoubleDeathTest, TouchingMemoryWithoutAccessFaultsLikeAGpu) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const CUdeviceptr va = reserve(kG);
  const CUmemGenericAllocationHandle h = create(kG);
  ASSERT_EQ(api().cuMemMap(va, kG, 0, h, 0), CUDA_SUCCESS);
  volatile unsigned char* p = host(va);
  EXPECT_DEATH(p[0] = 1, "");
  ASSERT_EQ(api().cuMemUnmap(va, kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, kG), CUDA_SUCCESS);
}

// --- rule: unmap covers whole mappings, never unmapped bytes ---

TEST_F(CudaDriverDoubleTest, UnmapMustCoverWholeMappings) {
  const CUdeviceptr va = reserve(4 * kG);
  const CUmemGenericAllocationHandle h = create(2 * kG);
  ASSERT_EQ(api().cuMemMap(va, 2 * kG, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemUnmap(va, kG), CUDA_ERROR_INVALID_VALUE);  // first half only
  expect_violation("cuts the mapping");
  EXPECT_EQ(api().cuMemUnmap(va + kG, kG), CUDA_ERROR_INVALID_VALUE);  // second half only
  expect_violation("cuts the mapping");
  EXPECT_EQ(api().cuMemUnmap(va, 3 * kG), CUDA_ERROR_INVALID_VALUE);  // plus unmapped bytes
  expect_violation("is not mapped");
  EXPECT_EQ(api().cuMemUnmap(va + 2 * kG, kG), CUDA_ERROR_INVALID_VALUE);  // only unmapped bytes
  expect_violation("is not mapped");
  EXPECT_EQ(api().cuMemUnmap(va + 4096, kG), CUDA_ERROR_INVALID_VALUE);
  expect_violation("granularity");
  EXPECT_EQ(double_.usage().mappings, 1u);
  EXPECT_EQ(api().cuMemUnmap(va, 2 * kG), CUDA_SUCCESS);
  expect_no_violation();
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, 4 * kG), CUDA_SUCCESS);
}

// --- rule: freeing a reservation needs its exact address and size and nothing mapped inside ---

TEST_F(CudaDriverDoubleTest, AddressFreeNeedsExactRangeAndNoMappings) {
  const CUdeviceptr va = reserve(4 * kG);
  EXPECT_EQ(api().cuMemAddressFree(va, 2 * kG), CUDA_ERROR_INVALID_VALUE);
  expect_violation("differs from the reserved");
  EXPECT_EQ(api().cuMemAddressFree(va + kG, 3 * kG), CUDA_ERROR_INVALID_VALUE);
  expect_violation("no reservation starts at");
  const CUmemGenericAllocationHandle h = create(kG);
  ASSERT_EQ(api().cuMemMap(va + 2 * kG, kG, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, 4 * kG), CUDA_ERROR_INVALID_VALUE);
  expect_violation("still holds the mapping");
  EXPECT_EQ(double_.usage().reservations, 1u);
  ASSERT_EQ(api().cuMemUnmap(va + 2 * kG, kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, 4 * kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, 4 * kG), CUDA_ERROR_INVALID_VALUE);  // twice
  expect_violation("no reservation starts at");
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
}

// --- rule: release is allowed while mapped; memory goes with the last mapping ---

TEST_F(CudaDriverDoubleTest, ReleaseWhileMappedFreesAfterTheLastUnmap) {
  const CUdeviceptr va = reserve(4 * kG);
  const CUmemGenericAllocationHandle h = create(kG);
  map_rw(va, kG, h);
  map_rw(va + 2 * kG, kG, h);  // a second mapping of the same handle
  host(va)[42] = 0xab;
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  CudaDriverDoubleUsage u = double_.usage();
  EXPECT_EQ(u.handles, 0u);
  EXPECT_EQ(u.allocations, 1u);
  EXPECT_EQ(u.physical_bytes, kG);
  EXPECT_EQ(host(va + 2 * kG)[42], 0xab);                      // still there
  EXPECT_EQ(api().cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);  // but released only once
  expect_violation("already released");

  ASSERT_EQ(api().cuMemUnmap(va, kG), CUDA_SUCCESS);
  EXPECT_EQ(double_.usage().physical_bytes, kG);  // one mapping left
  EXPECT_EQ(host(va + 2 * kG)[42], 0xab);
  ASSERT_EQ(api().cuMemUnmap(va + 2 * kG, kG), CUDA_SUCCESS);
  u = double_.usage();
  EXPECT_EQ(u.allocations, 0u);
  EXPECT_EQ(u.physical_bytes, 0u);
  EXPECT_EQ(api().cuMemAddressFree(va, 4 * kG), CUDA_SUCCESS);
}

// --- data: survives unmap/remap elsewhere, aliases across mappings ---

TEST_F(CudaDriverDoubleTest, DataSurvivesUnmapAndRemapAtAnotherAddress) {
  const CUdeviceptr va = reserve(8 * kG);
  const CUmemGenericAllocationHandle h = create(2 * kG);
  map_rw(va, 2 * kG, h);
  for (std::size_t i = 0; i < 2 * kG; i += 4096) host(va)[i] = static_cast<unsigned char>(i / 4096 + 1);
  ASSERT_EQ(api().cuMemUnmap(va, 2 * kG), CUDA_SUCCESS);
  map_rw(va + 5 * kG, 2 * kG, h);  // another offset in the VA range
  for (std::size_t i = 0; i < 2 * kG; i += 4096) {
    ASSERT_EQ(host(va + 5 * kG)[i], static_cast<unsigned char>(i / 4096 + 1)) << "byte " << i;
  }
  ASSERT_EQ(api().cuMemUnmap(va + 5 * kG, 2 * kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, 8 * kG), CUDA_SUCCESS);
  expect_no_violation();
}

TEST_F(CudaDriverDoubleTest, TwoMappingsOfOneHandleAlias) {
  const CUdeviceptr a = reserve(kG);
  const CUdeviceptr b = reserve(kG);
  const CUmemGenericAllocationHandle h = create(kG);
  map_rw(a, kG, h);
  map_rw(b, kG, h);
  std::memcpy(host(a) + 1000, "kv-cache", 8);
  EXPECT_EQ(std::memcmp(host(b) + 1000, "kv-cache", 8), 0);
  host(b)[kG - 1] = 0x11;
  EXPECT_EQ(host(a)[kG - 1], 0x11);
  ASSERT_EQ(api().cuMemUnmap(a, kG), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemUnmap(b, kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(a, kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(b, kG), CUDA_SUCCESS);
}

TEST_F(CudaDriverDoubleTest, FreedMemoryDoesNotLeakIntoTheNextAllocation) {
  const CUdeviceptr va = reserve(kG);
  CUmemGenericAllocationHandle h = create(kG);
  map_rw(va, kG, h);
  std::memset(host(va), 0xee, kG);
  ASSERT_EQ(api().cuMemUnmap(va, kG), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  h = create(kG);  // reuses the extent
  map_rw(va, kG, h);
  EXPECT_EQ(host(va)[0], 0);
  EXPECT_EQ(host(va)[kG - 1], 0);
  ASSERT_EQ(api().cuMemUnmap(va, kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAddressFree(va, kG), CUDA_SUCCESS);
}

TEST(CudaDriverDoublePoison, NewAllocationsCarryThePoisonByte) {
  CudaDriverDoubleConfig config = small_device();
  config.poison_byte = 0xa5;
  CudaDriverDouble d(config);
  const CudaDriverApi& api = d.api();
  ASSERT_EQ(api.cuInit(0), CUDA_SUCCESS);
  const CUmemAllocationProp prop = device_prop();
  const CUmemAccessDesc rw = access_desc(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(api.cuMemAddressReserve(&va, kG, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemCreate(&h, kG, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemMap(va, kG, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemSetAccess(va, kG, &rw, 1), CUDA_SUCCESS);
  EXPECT_EQ(host(va)[0], 0xa5);
  EXPECT_EQ(host(va)[kG - 1], 0xa5);
  EXPECT_EQ(api.cuMemUnmap(va, kG), CUDA_SUCCESS);
  EXPECT_EQ(api.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api.cuMemAddressFree(va, kG), CUDA_SUCCESS);
}

// --- rule: creating beyond capacity is CUDA_ERROR_OUT_OF_MEMORY with no partial state ---

TEST_F(CudaDriverDoubleTest, CreateBeyondCapacityIsOutOfMemoryWithNoPartialState) {
  std::vector<CUmemGenericAllocationHandle> handles;
  for (int i = 0; i < 31; ++i) handles.push_back(create(kG));  // 62 of 64 MiB
  const CudaDriverDoubleUsage before = double_.usage();
  CUmemGenericAllocationHandle h = 777;
  const CUmemAllocationProp prop = device_prop();
  EXPECT_EQ(api().cuMemCreate(&h, 2 * kG, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(h, 777u);  // output untouched
  EXPECT_EQ(double_.usage(), before);
  expect_no_violation();          // running out is not a misuse
  handles.push_back(create(kG));  // exactly full is fine
  EXPECT_EQ(double_.usage().physical_bytes, 64 * kMiB);
  EXPECT_EQ(api().cuMemCreate(&h, kG, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  for (const auto handle : handles) EXPECT_EQ(api().cuMemRelease(handle), CUDA_SUCCESS);
  handles.clear();
  const CUmemGenericAllocationHandle all = create(64 * kMiB);  // everything came back
  EXPECT_EQ(api().cuMemRelease(all), CUDA_SUCCESS);
}

TEST_F(CudaDriverDoubleTest, CuTryTurnsErrorsIntoKvlabExceptions) {
  const CUmemAllocationProp prop = device_prop();
  CUmemGenericAllocationHandle h = 0;
  try {
    KVLAB_CU_TRY(api(), cuMemCreate(&h, 128 * kMiB, &prop, 0));
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_TRUE(Contains(e.what(), "CUDA_ERROR_OUT_OF_MEMORY"));
  }
  try {
    KVLAB_CU_TRY(api(), cuMemUnmap(0, kG));
    FAIL() << "expected CudaError";
  } catch (const OutOfMemory&) {
    FAIL() << "not an out-of-memory error";
  } catch (const CudaError& e) {
    EXPECT_TRUE(Contains(e.what(), "cuMemUnmap(0, kG) failed: CUDA_ERROR_INVALID_VALUE"));
    EXPECT_TRUE(Contains(e.what(), "cuda_driver_double_test.cpp:"));
  }
  double_.clear_violations();
}

// --- fault injection ---

TEST_F(CudaDriverDoubleTest, FailTheNthCallOfAnEntry) {
  const CUdeviceptr va = reserve(4 * kG);
  const CUmemGenericAllocationHandle h = create(4 * kG);
  const std::uint64_t maps_before = double_.call_count(CuEntry::cuMemMap);
  double_.fail_nth_call(CuEntry::cuMemMap, 2, CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(api().cuMemMap(va, kG, 0, h, 0), CUDA_SUCCESS);                   // 1st: fine
  EXPECT_EQ(api().cuMemMap(va + kG, kG, 0, h, 0), CUDA_ERROR_OUT_OF_MEMORY);  // 2nd: injected
  EXPECT_EQ(double_.usage().mappings, 1u);                                    // no partial state
  EXPECT_EQ(double_.injected_faults(), 1u);
  ASSERT_EQ(api().cuMemMap(va + kG, kG, 0, h, 0), CUDA_SUCCESS);  // 3rd: fine again
  EXPECT_EQ(double_.call_count(CuEntry::cuMemMap), maps_before + 3);
  expect_no_violation();  // an injected failure is not the caller's fault

  // Other entries are unaffected; several faults may be armed at once.
  double_.fail_nth_call(CuEntry::cuMemUnmap, 1, CUDA_ERROR_UNKNOWN);
  double_.fail_nth_call(CuEntry::cuMemRelease, 1, CUDA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(api().cuMemUnmap(va, 2 * kG), CUDA_ERROR_UNKNOWN);
  EXPECT_EQ(double_.usage().mappings, 2u);
  EXPECT_EQ(api().cuMemUnmap(va, 2 * kG), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemRelease(h), CUDA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(double_.usage().handles, 1u);
  EXPECT_EQ(api().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(double_.injected_faults(), 3u);
  EXPECT_EQ(api().cuMemAddressFree(va, 4 * kG), CUDA_SUCCESS);
  EXPECT_THROW(double_.fail_nth_call(CuEntry::cuMemMap, 0), InvalidArgument);
}

std::vector<CUresult> random_create_release_run(std::uint64_t seed, std::vector<CuEntry> entries,
                                                std::uint64_t* injected) {
  CudaDriverDouble d(small_device());
  const CudaDriverApi& api = d.api();
  EXPECT_EQ(api.cuInit(0), CUDA_SUCCESS);
  d.fail_randomly(0.3, seed, CUDA_ERROR_OUT_OF_MEMORY, std::move(entries));
  const CUmemAllocationProp prop = device_prop();
  std::vector<CUresult> results;
  for (int i = 0; i < 200; ++i) {
    CUmemGenericAllocationHandle h = 0;
    const CUresult created = api.cuMemCreate(&h, kG, &prop, 0);
    results.push_back(created);
    if (created != CUDA_SUCCESS) continue;
    CUresult released = api.cuMemRelease(h);
    results.push_back(released);
    while (released != CUDA_SUCCESS) released = api.cuMemRelease(h);  // retry until it goes
  }
  EXPECT_TRUE(d.usage().empty()) << d.leak_report();
  EXPECT_TRUE(d.violations().empty());
  *injected = d.injected_faults();
  return results;
}

TEST(CudaDriverDoubleFaults, RandomFailuresAreReproduciblePerSeed) {
  std::uint64_t injected_a = 0;
  std::uint64_t injected_b = 0;
  std::uint64_t injected_c = 0;
  const std::vector<CUresult> a = random_create_release_run(42, {}, &injected_a);
  const std::vector<CUresult> b = random_create_release_run(42, {}, &injected_b);
  const std::vector<CUresult> c = random_create_release_run(43, {}, &injected_c);
  EXPECT_EQ(a, b);
  EXPECT_EQ(injected_a, injected_b);
  EXPECT_NE(a, c);
  // About 30% of calls fail (loose bounds: the test is about determinism, not the RNG).
  const auto failures = static_cast<double>(std::count(a.begin(), a.end(), CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_GT(failures / static_cast<double>(a.size()), 0.15);
  EXPECT_LT(failures / static_cast<double>(a.size()), 0.45);
}

TEST(CudaDriverDoubleFaults, RandomFailuresCanTargetChosenEntries) {
  std::uint64_t injected = 0;
  const std::vector<CUresult> results = random_create_release_run(7, {CuEntry::cuMemRelease}, &injected);
  EXPECT_GT(injected, 0u);
  // Every create succeeded: 200 creates plus 200 first releases were recorded.
  EXPECT_EQ(results.size(), 400u);
  for (std::size_t i = 0; i < results.size(); i += 2) EXPECT_EQ(results[i], CUDA_SUCCESS) << "create " << i / 2;
}

TEST_F(CudaDriverDoubleTest, ClearFaultsStopsInjection) {
  double_.fail_randomly(1.0, 1, CUDA_ERROR_UNKNOWN);
  int count = 0;
  EXPECT_EQ(api().cuDeviceGetCount(&count), CUDA_ERROR_UNKNOWN);
  double_.clear_faults();
  EXPECT_EQ(api().cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_THROW(double_.fail_randomly(1.5, 1), InvalidArgument);
  EXPECT_THROW(double_.fail_randomly(0.5, 1, CUDA_SUCCESS), InvalidArgument);
}

// --- leak accounting ---

TEST(CudaDriverDoubleLeaks, UsageAndReportNameWhatIsStillAlive) {
  CudaDriverDouble d(small_device());
  const CudaDriverApi& api = d.api();
  ASSERT_EQ(api.cuInit(0), CUDA_SUCCESS);
  const CUmemAllocationProp prop = device_prop();
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  CUcontext ctx = nullptr;
  ASSERT_EQ(api.cuMemAddressReserve(&va, 2 * kG, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemCreate(&h, kG, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemMap(va, kG, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  const CudaDriverDoubleUsage u = d.usage();
  EXPECT_EQ(u.reservations, 1u);
  EXPECT_EQ(u.reserved_bytes, 2 * kG);
  EXPECT_EQ(u.handles, 1u);
  EXPECT_EQ(u.allocations, 1u);
  EXPECT_EQ(u.physical_bytes, kG);
  EXPECT_EQ(u.mappings, 1u);
  EXPECT_EQ(u.mapped_bytes, kG);
  EXPECT_EQ(u.primary_context_refs, 1);
  EXPECT_FALSE(u.empty());
  const std::string report = d.leak_report();
  EXPECT_TRUE(Contains(report, "reservation"));
  EXPECT_TRUE(Contains(report, "mapping"));
  EXPECT_TRUE(Contains(report, "not released"));
  EXPECT_TRUE(Contains(report, "primary context"));
  // Destroying a double with leaks gives the host memory back; the next one starts clean.
}

TEST(CudaDriverDoubleLeaks, ANewDoubleStartsEmpty) {
  CudaDriverDouble d;
  EXPECT_TRUE(d.usage().empty());
  EXPECT_EQ(d.leak_report(), "");
  EXPECT_TRUE(d.violations().empty());
}

// --- a background mapper thread next to a foreground one ---

TEST_F(CudaDriverDoubleTest, ConcurrentMappersKeepTheContract) {
  constexpr int kThreads = 3;
  constexpr int kRounds = 100;
  const CUdeviceptr va = reserve(kThreads * 2 * kG);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const CUdeviceptr mine = va + static_cast<CUdeviceptr>(t) * 2 * kG;
      const CUmemAllocationProp prop = device_prop();
      const CUmemAccessDesc rw = access_desc(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
      for (int round = 0; round < kRounds; ++round) {
        CUmemGenericAllocationHandle h = 0;
        const CUdeviceptr at = mine + static_cast<CUdeviceptr>(round % 2) * kG;
        bool ok = api().cuMemCreate(&h, kG, &prop, 0) == CUDA_SUCCESS;
        ok = ok && api().cuMemMap(at, kG, 0, h, 0) == CUDA_SUCCESS;
        ok = ok && api().cuMemSetAccess(at, kG, &rw, 1) == CUDA_SUCCESS;
        ok = ok && double_.check_access(at, kG, true);
        if (ok) host(at)[round] = static_cast<unsigned char>(t);
        ok = ok && host(at)[round] == static_cast<unsigned char>(t);
        ok = ok && api().cuMemUnmap(at, kG) == CUDA_SUCCESS;
        ok = ok && api().cuMemRelease(h) == CUDA_SUCCESS;
        if (!ok) failures.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  expect_no_violation();
  EXPECT_EQ(api().cuMemAddressFree(va, kThreads * 2 * kG), CUDA_SUCCESS);
}

}  // namespace
}  // namespace kvlab

#else  // !KVLAB_HAS_CUDA_HEADERS

TEST(CudaDriverDouble, NeedsToolkitHeaders) {
  GTEST_SKIP() << "CUDA toolkit headers not found: the driver double is not built";
}

#endif
