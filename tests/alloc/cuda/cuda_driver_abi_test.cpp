// Driver entry points are resolved at the ABI version each table member has, never at CUDA_VERSION.
// On the H200 (shared/gpu-runs/2026-11-27-h200) kvlab asked for every entry at 13000 and got
// cuCtxSynchronize_v2, which takes a context; called with none it read a garbage one, so every
// synchronize failed with CUDA_ERROR_CONTEXT_IS_DESTROYED and every device deallocation was
// refused. The driver double serves entry points by version as the driver does, so the same
// mistake fails here the same way.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "alloc/core/error.hpp"

#if KVLAB_HAS_CUDA_HEADERS
#include <cudaTypedefs.h>

#include "alloc/cuda/cuda_driver.hpp"
#include "alloc/cuda/cuda_primary_context.hpp"
#include "alloc/cuda/cuda_vmm_memory_resource.hpp"
#include "alloc/cuda/emulated/cuda_driver_double.hpp"

namespace kvlab {
namespace {

void* double_entry(const char* name, int abi, std::string& why) {
  return CudaDriverDouble::entry_point(name, abi, why);
}

CudaDriverDoubleConfig small_granules() {
  CudaDriverDoubleConfig c;
  c.granularity = std::size_t{64} << 10;
  return c;
}

TEST(CudaDriverAbi, EveryEntryIsAskedForOnceAtItsOwnAbi) {
  std::map<std::string, std::vector<int>> asked;
  CudaDriverApi api;
  const std::string error = resolve_cuda_driver_table(api, [&](const char* name, int abi, std::string& why) {
    asked[name].push_back(abi);
    return double_entry(name, abi, why);
  });
  ASSERT_EQ(error, "");
  EXPECT_EQ(asked.size(), kCuEntryCount);
  for (const auto& [name, abis] : asked) EXPECT_EQ(abis.size(), 1u) << name;
  // The ABI without arguments, not CUDA 13.0's cuCtxSynchronize_v2(CUcontext).
  EXPECT_EQ(asked["cuCtxSynchronize"], std::vector<int>{2000});
  EXPECT_EQ(asked["cuDevicePrimaryCtxRelease"], std::vector<int>{11000});
  EXPECT_EQ(asked["cuMemMap"], std::vector<int>{10020});
  std::string why;
  EXPECT_EQ(reinterpret_cast<void*>(api.cuCtxSynchronize),
            CudaDriverDouble::entry_point("cuCtxSynchronize", 2000, why));
}

TEST(CudaDriverAbi, AMissingEntryNamesItselfAndLeavesTheTableEmpty) {
  CudaDriverApi api;
  const std::string error = resolve_cuda_driver_table(api, [](const char* name, int abi, std::string& why) -> void* {
    if (std::string(name) == "cuMemUnmap") {
      why = "driver too old";
      return nullptr;
    }
    return double_entry(name, abi, why);
  });
  EXPECT_EQ(error, "the NVIDIA driver does not provide cuMemUnmap with the ABI of CUDA 10.2 (driver too old)");
  EXPECT_EQ(api.cuInit, nullptr);
  EXPECT_EQ(api.cuMemMap, nullptr);
}

TEST(CudaDriverAbi, TheDoubleServesTheNewestAbiAtOrBelowTheVersionAskedFor) {
  std::string why;
  void* v1 = CudaDriverDouble::entry_point("cuCtxSynchronize", 2000, why);
  void* v2 = CudaDriverDouble::entry_point("cuCtxSynchronize", 13000, why);
  ASSERT_NE(v1, nullptr);
  ASSERT_NE(v2, nullptr);
  EXPECT_NE(v1, v2);
  EXPECT_EQ(CudaDriverDouble::entry_point("cuCtxSynchronize", 12080, why), v1);
  EXPECT_EQ(CudaDriverDouble::entry_point("cuCtxSynchronize", CUDA_VERSION, why), v2);
  EXPECT_EQ(CudaDriverDouble::entry_point("cuMemMap", 10010, why), nullptr);
  EXPECT_EQ(why, "no ABI at or below that version");
  EXPECT_EQ(CudaDriverDouble::entry_point("cuNoSuchCall", 13000, why), nullptr);
  EXPECT_EQ(why, "symbol not found");
}

TEST(CudaDriverAbi, Cuda13SynchronizeTakesTheContextAndRefusesOneThatIsNotLive) {
  CudaDriverDouble dbl;
  const CudaDriverApi& api = dbl.api();
  std::string why;
  const auto sync_v2 = reinterpret_cast<PFN_cuCtxSynchronize_v13000>(  // NOLINT: as the driver hands it out
      CudaDriverDouble::entry_point("cuCtxSynchronize", 13000, why));
  ASSERT_EQ(api.cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  ASSERT_EQ(api.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  EXPECT_EQ(sync_v2(ctx), CUDA_SUCCESS);
  EXPECT_EQ(sync_v2(nullptr), CUDA_ERROR_INVALID_CONTEXT);  // null: the current one, and there is none
  int garbage = 0;
  EXPECT_EQ(sync_v2(reinterpret_cast<CUcontext>(&garbage)), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  ASSERT_EQ(api.cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(sync_v2(ctx), CUDA_ERROR_CONTEXT_IS_DESTROYED);  // released to zero: the handle is stale
  EXPECT_EQ(dbl.violations().size(), 3u);
}

// The H200's failure, end to end on the double: device memory given back through a table resolved
// the way production resolves it. With every entry asked for at CUDA_VERSION (kvlab before this
// test), synchronize answered CUDA_ERROR_CONTEXT_IS_DESTROYED and the deallocation was refused.
TEST(CudaDriverAbi, DeviceMemoryIsGivenBackThroughTheResolvedTable) {
  CudaDriverDouble dbl(small_granules());
  {
    CudaVmmMemoryResource mr(dbl.api(), Device::emulated);
    mr.deallocate(mr.allocate(100), 100);
    EXPECT_EQ(mr.pending_frees(), 0u) << mr.refusals();
    EXPECT_EQ(mr.refusals(), "");
    CudaPrimaryContext ctx(dbl.api(), 0);
    EXPECT_EQ(ctx.synchronize(), CUDA_SUCCESS);
  }
  EXPECT_TRUE(dbl.violations().empty()) << dbl.violations().front();
  EXPECT_TRUE(dbl.usage().empty()) << dbl.leak_report();
}

TEST(CudaDriverAbi, ARefusedDeallocationNamesTheCallAndItsResult) {
  CudaDriverDouble dbl(small_granules());
  {
    CudaVmmMemoryResource mr(dbl.api(), Device::emulated);
    void* a = mr.allocate(100);
    void* b = mr.allocate(100);
    dbl.fail_randomly(1.0, 1, CUDA_ERROR_CONTEXT_IS_DESTROYED, {CuEntry::cuCtxSynchronize});
    mr.deallocate(a, 100);
    mr.deallocate(b, 100);
    EXPECT_EQ(mr.pending_frees(), 2u);
    EXPECT_EQ(mr.refusals(), "cuCtxSetCurrent + cuCtxSynchronize: CUDA_ERROR_CONTEXT_IS_DESTROYED (709) x2");
    dbl.clear_faults();
    dbl.fail_randomly(1.0, 1, CUDA_ERROR_UNKNOWN, {CuEntry::cuMemRelease});
    mr.flush_pending();
    EXPECT_EQ(mr.refusals(), "cuMemRelease: CUDA_ERROR_UNKNOWN (999) x2");
    dbl.clear_faults();
    mr.flush_pending();
    EXPECT_EQ(mr.pending_frees(), 0u);
    EXPECT_EQ(mr.refusals(), "");
  }
  EXPECT_TRUE(dbl.usage().empty()) << dbl.leak_report();
}

}  // namespace
}  // namespace kvlab

#else
TEST(CudaDriverAbi, NeedsToolkitHeaders) { GTEST_SKIP() << "built without the CUDA toolkit headers"; }
#endif
