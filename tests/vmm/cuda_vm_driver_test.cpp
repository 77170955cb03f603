// The CUDA virtual-memory driver and the vmm backend over it, against the contract-checking host
// double of the driver API (alloc/cuda/emulated/cuda_driver_double.hpp): no violation, no leak, data in place.
#include <gtest/gtest.h>

#if KVLAB_HAS_CUDA_HEADERS
#include <cstring>
#include <vector>

#include "alloc/cuda/emulated/cuda_driver_double.hpp"
#include "alloc/core/error.hpp"
#include "tests/vmm/vmm_test_support.hpp"
#include "vmm/cuda_vm_driver.hpp"

namespace kvlab {
namespace {

using testing::kKiB;

CudaDriverDoubleConfig small_double(std::size_t granularity = 64 * kKiB) {
  CudaDriverDoubleConfig c;
  c.granularity = granularity;
  c.capacity = std::size_t{32} << 20;
  c.poison_byte = 0x7f;
  return c;
}

class CudaVmDriverTest : public ::testing::Test {
 protected:
  CudaVmDriverTest() : double_(small_double()) {}
  void TearDown() override {
    EXPECT_TRUE(double_.usage().empty()) << double_.leak_report();
    const auto v = double_.violations();
    EXPECT_TRUE(v.empty()) << v.front();
  }
  std::shared_ptr<CudaVmDriver> driver() {
    return std::make_shared<CudaVmDriver>(double_.api(), CudaVmOptions{0, true});
  }
  CudaDriverDouble double_;
};

TEST_F(CudaVmDriverTest, DriverFollowsTheContract) {
  auto d = driver();
  EXPECT_EQ(d->granularity(), 64 * kKiB);
  EXPECT_EQ(d->device(), Device::host);
  EXPECT_EQ(CudaVmDriver(double_.api()).device(), Device::cuda);
  void* base = d->reserve(1024 * kKiB, 0);
  const std::optional<PhysHandle> h = d->create(64 * kKiB);
  ASSERT_TRUE(h);
  auto* p = static_cast<unsigned char*>(base) + 192 * kKiB;
  ASSERT_TRUE(d->map(p, 64 * kKiB, *h));
  EXPECT_FALSE(double_.check_access(p, 64 * kKiB, true)) << "no access before set_access";
  double_.clear_violations();
  d->set_access(p, 64 * kKiB);
  EXPECT_TRUE(double_.check_access(p, 64 * kKiB, true));
  std::memset(p, 1, 64 * kKiB);
  d->synchronize();
  d->unmap(p, 64 * kKiB);
  d->release(*h);
  d->free_reservation(base, 1024 * kKiB);
  // Out of memory is a value: the double's capacity is 32 MiB.
  EXPECT_FALSE(d->create(std::size_t{64} << 20));
  EXPECT_THROW((void)d->create(4 * kKiB), CudaError) << "not a granularity multiple: a violation, not OOM";
  double_.clear_violations();
}

TEST_F(CudaVmDriverTest, BackendMapsWhatItUsesAndGivesEverythingBack) {
  {
    VmmConfig c = testing::tiny_vmm(64 * kKiB, 8 * 4 * 64 * kKiB, driver(), VmmLayout::per_layer, 2048, 4);
    VmmBackend b(c);  // 32 pages of 512 tokens of one tensor: 8 rows
    EXPECT_EQ(double_.usage().handles, 32u) << "every handle created up front";
    EXPECT_EQ(double_.usage().reservations, 1u);
    b.admit(1, {100, 1500}, 100);
    testing::write_tokens(b, 1, 1, 0, 100);
    for (int i = 0; i < 9; ++i) {
      const std::int64_t len = b.length(1);
      b.grow(1, 150);  // crosses 512-token page boundaries
      testing::write_tokens(b, 1, 1, len, len + 150);
    }
    EXPECT_EQ(b.length(1), 1450);
    EXPECT_EQ(testing::count_mismatches(b, 1, 1, 1450), 0);
    EXPECT_EQ(double_.usage().mappings, 4u * 3);
    // Every byte a kernel reads is mapped read-write; the slot's tail past its pages is not.
    for (int t = 0; t < 4; ++t) {
      EXPECT_TRUE(double_.check_access(b.slot_base(t, b.slot_of(1)), 1450 * 128, true));
      EXPECT_FALSE(double_.check_access(b.slot_base(t, b.slot_of(1)) + 3 * 64 * kKiB, 1, false));
    }
    double_.clear_violations();
    b.fork(1, 2);
    EXPECT_EQ(testing::count_mismatches(b, 2, 1, 1450), 0);
    b.release(1);
    EXPECT_EQ(double_.usage().mappings, 4u * 3);
    b.release(2);
    EXPECT_EQ(double_.usage().mappings, 0u);
    EXPECT_EQ(double_.usage().handles, 32u) << "pages are kept for reuse";
    EXPECT_GT(double_.call_count(CuEntry::cuCtxSynchronize), 0u) << "synchronize before unmap";
  }
}

TEST_F(CudaVmDriverTest, PagesMustBeGranularityMultiples) {
  EXPECT_THROW(VmmBackend(testing::tiny_vmm(16 * kKiB, 1024 * kKiB, driver())), InvalidArgument);
}

TEST_F(CudaVmDriverTest, TheBackgroundMapperSynchronizesOnItsOwnThread) {
  // With deferred reclamation the mapper reclaims cached pages, so it unmaps, so it synchronizes
  // from its own thread, which needs the context made current there (the double checks).
  {
    VmmConfig c = testing::tiny_vmm(64 * kKiB, 8 * 2 * 64 * kKiB, driver(), VmmLayout::megacache, 2048, 4);
    c.overlap = true;
    c.deferred_reclamation = true;
    VmmBackend b(c);                 // 8 rows (2 tensors) of 256 tokens
    b.admit(1, {1500, 1500}, 1500);  // 6 rows
    b.release(1);                    // its slot keeps the 6 rows
    b.admit(2, {10, 600}, 10);       // takes that slot (its cache covers 1 row)
    b.admit(3, {10, 600}, 10);       // a fresh slot, 1 row; 1 row left free
    const SeqId three[] = {3};
    b.prefetch(three, 500);  // 2 rows: the free row suffices
    b.begin_step();
    const VmmStats s = b.stats();
    EXPECT_GT(s.background_maps, 0);
    b.release(2);             // 6 cached rows, nothing free
    b.prefetch(three, 1000);  // 4 rows: the mapper must reclaim cached pages
    b.begin_step();
    EXPECT_GT(b.stats().background_unmaps, 0);
    EXPECT_EQ(double_.usage().mappings, static_cast<std::size_t>(b.stats().mapped_pages));
  }
}

}  // namespace
}  // namespace kvlab

#else
TEST(CudaVmDriver, NeedsToolkitHeaders) { GTEST_SKIP() << "CUDA toolkit headers not found"; }
#endif
