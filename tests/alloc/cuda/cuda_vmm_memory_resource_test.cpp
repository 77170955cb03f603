// Device memory through the VMM calls (alloc/cuda/cuda_vmm_memory_resource.hpp) on the contract-checking
// driver double: every allocation is usable read-write, a failure at any driver call leaves nothing
// behind, and a deallocation the driver refuses is retried until it succeeds, so nothing leaks.
#include <gtest/gtest.h>

#include <cstring>

#include "alloc/core/error.hpp"

#if KVLAB_HAS_CUDA_HEADERS
#include "alloc/cuda/cuda_vmm_memory_resource.hpp"
#include "alloc/cuda/emulated/cuda_driver_double.hpp"

namespace kvlab {
namespace {

constexpr std::size_t kG = std::size_t{64} << 10;

CudaDriverDoubleConfig config() {
  CudaDriverDoubleConfig c;
  c.granularity = kG;
  c.capacity = 16 * kG;
  return c;
}

TEST(CudaVmmMemoryResource, AllocationsAreGranularMappedAndWritable) {
  CudaDriverDouble dbl(config());
  {
    CudaVmmMemoryResource mr(dbl.api(), Device::emulated);
    EXPECT_EQ(mr.device(), Device::emulated);
    EXPECT_EQ(mr.granularity(), kG);
    void* a = mr.allocate(100);
    void* b = mr.allocate(kG + 1);
    EXPECT_TRUE(dbl.check_access(a, kG, true));
    EXPECT_TRUE(dbl.check_access(b, 2 * kG, true));
    std::memset(a, 1, kG);
    std::memset(b, 2, 2 * kG);
    EXPECT_EQ(dbl.usage().physical_bytes, 3 * kG);
    EXPECT_EQ(mr.live_allocations(), 2u);
    mr.deallocate(a, 100);
    mr.deallocate(b, kG + 1);
    EXPECT_EQ(mr.live_allocations(), 0u);
    EXPECT_THROW((void)mr.allocate(17 * kG), OutOfMemory);  // beyond the device: a value, nothing left
    EXPECT_EQ(dbl.usage().reservations, 0u);
  }
  EXPECT_TRUE(dbl.usage().empty()) << dbl.leak_report();
  EXPECT_TRUE(dbl.violations().empty()) << dbl.violations().front();
}

TEST(CudaVmmMemoryResource, EveryAllocationCallCanFailWithoutALeak) {
  CudaDriverDouble dbl(config());
  CudaVmmMemoryResource mr(dbl.api(), Device::emulated);
  for (CuEntry e : {CuEntry::cuMemAddressReserve, CuEntry::cuMemCreate, CuEntry::cuMemMap, CuEntry::cuMemSetAccess}) {
    dbl.fail_nth_call(e, 1);
    EXPECT_THROW((void)mr.allocate(kG), CudaError) << cu_entry_name(e);
    const CudaDriverDoubleUsage u = dbl.usage();
    EXPECT_EQ(u.reservations + u.handles + u.mappings + u.allocations, 0u) << cu_entry_name(e) << dbl.leak_report();
  }
  EXPECT_TRUE(dbl.violations().empty()) << dbl.violations().front();
}

TEST(CudaVmmMemoryResource, RefusedDeallocationsAreRetriedNotLeaked) {
  CudaDriverDouble dbl(config());
  {
    CudaVmmMemoryResource mr(dbl.api(), Device::emulated);
    for (CuEntry e :
         {CuEntry::cuCtxSynchronize, CuEntry::cuMemUnmap, CuEntry::cuMemRelease, CuEntry::cuMemAddressFree}) {
      void* p = mr.allocate(kG);
      dbl.fail_nth_call(e, 1);
      mr.deallocate(p, kG);  // noexcept: the block waits on the pending list
      EXPECT_EQ(mr.pending_frees(), 1u) << cu_entry_name(e);
      EXPECT_EQ(dbl.usage().reservations, 1u) << cu_entry_name(e);
      mr.flush_pending();
      EXPECT_EQ(mr.pending_frees(), 0u) << cu_entry_name(e);
      EXPECT_EQ(dbl.usage().reservations, 0u) << cu_entry_name(e) << dbl.leak_report();
    }
  }
  EXPECT_TRUE(dbl.usage().empty()) << dbl.leak_report();
  EXPECT_TRUE(dbl.violations().empty()) << dbl.violations().front();
}

}  // namespace
}  // namespace kvlab
#else
TEST(CudaVmmMemoryResource, NeedsToolkitHeaders) { GTEST_SKIP() << "CUDA toolkit headers not found"; }
#endif
