// The retained primary context (alloc/cuda/cuda_primary_context.hpp) on the contract-checking driver
// double: it holds exactly one retain while it lives, a failure at any set-up call leaves none, and
// what it hands to cuMemCreate and cuMemSetAccess names its device.
#include <gtest/gtest.h>

#include "alloc/core/error.hpp"

#if KVLAB_HAS_CUDA_HEADERS
#include "alloc/cuda/cuda_primary_context.hpp"
#include "alloc/cuda/emulated/cuda_driver_double.hpp"

namespace kvlab {
namespace {

constexpr std::size_t kG = std::size_t{64} << 10;
const CudaDriverDoubleConfig kDouble{.granularity = kG, .capacity = 4 * kG};

TEST(CudaPrimaryContext, HoldsOneRetainWhileItLives) {
  CudaDriverDouble dbl(kDouble);
  {
    const CudaPrimaryContext ctx(dbl.api(), 0);
    EXPECT_EQ(dbl.usage().primary_context_refs, 1);
    EXPECT_NE(ctx.context(), nullptr);
    EXPECT_EQ(ctx.granularity(), kG);
    const CUmemAllocationProp p = ctx.pinned_prop();
    EXPECT_EQ(p.type, CU_MEM_ALLOCATION_TYPE_PINNED);
    EXPECT_EQ(p.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
    EXPECT_EQ(p.location.id, ctx.device());
    const CUmemAccessDesc a = ctx.read_write_access();
    EXPECT_EQ(a.location.id, ctx.device());
    EXPECT_EQ(a.flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_EQ(ctx.synchronize(), CUDA_SUCCESS);
  }
  EXPECT_TRUE(dbl.usage().empty()) << dbl.leak_report();
  EXPECT_TRUE(dbl.violations().empty()) << dbl.violations().front();
}

TEST(CudaPrimaryContext, ASetUpFailureLeavesNoRetain) {
  for (const CuEntry e : {CuEntry::cuInit, CuEntry::cuDeviceGet, CuEntry::cuDevicePrimaryCtxRetain,
                          CuEntry::cuMemGetAllocationGranularity}) {
    CudaDriverDouble dbl(kDouble);
    dbl.fail_nth_call(e, 1);
    EXPECT_THROW((void)CudaPrimaryContext(dbl.api(), 0), CudaError) << cu_entry_name(e);
    EXPECT_EQ(dbl.injected_faults(), 1u) << cu_entry_name(e);
    EXPECT_TRUE(dbl.usage().empty()) << cu_entry_name(e) << ": " << dbl.leak_report();
    EXPECT_TRUE(dbl.violations().empty()) << dbl.violations().front();
  }
}

TEST(CudaPrimaryContext, SynchronizeReturnsTheFirstFailingCall) {
  CudaDriverDouble dbl(kDouble);
  const CudaPrimaryContext ctx(dbl.api(), 0);
  dbl.fail_nth_call(CuEntry::cuCtxSetCurrent, 1);
  EXPECT_EQ(ctx.synchronize(), CUDA_ERROR_UNKNOWN);
  dbl.fail_nth_call(CuEntry::cuCtxSynchronize, 1, CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(ctx.synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(ctx.synchronize(), CUDA_SUCCESS);
}

TEST(CudaPrimaryContext, AMissingDeviceIsAnError) {
  CudaDriverDouble dbl(kDouble);
  EXPECT_THROW((void)CudaPrimaryContext(dbl.api(), 1), CudaError);  // the double has ordinal 0 only
  EXPECT_TRUE(dbl.usage().empty()) << dbl.leak_report();
}

}  // namespace
}  // namespace kvlab

#else
TEST(CudaPrimaryContext, NeedsTheToolkitHeaders) { GTEST_SKIP() << "built without the CUDA toolkit headers"; }
#endif
