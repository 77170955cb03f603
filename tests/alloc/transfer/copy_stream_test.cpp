// CopyStream (alloc/transfer/copy_stream.hpp): on the host every copy lands at once; on the emulated device
// nothing lands before a fence or synchronize, then everything lands in the order enqueued, and
// deferred releases run only after the copies they follow. (The CUDA stream: tests/gpu.)
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "alloc/transfer/copy_stream.hpp"
#include "alloc/core/error.hpp"
#include "alloc/faults/fault_injection.hpp"

namespace kvlab {
namespace {

std::vector<int> iota(int n, int first) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(CopyStream, OnTheHostACopyLandsAtOnceAndReleasesRunAtOnce) {
  CopyStream s(Device::host);
  std::vector<int> a = iota(64, 1), b(64, -1);
  s.copy(b.data(), a.data(), a.size() * sizeof(int));
  EXPECT_EQ(b, a);
  EXPECT_EQ(s.pending_copies(), 0u);
  int released = 0;
  s.release_after([&] { ++released; });
  EXPECT_EQ(released, 1);
}

TEST(CopyStream, OnTheEmulatedDeviceNothingLandsBeforeAFence) {
  CopyStream s(Device::emulated);
  std::vector<int> a = iota(64, 1), b(64, -1);
  s.copy(b.data(), a.data(), a.size() * sizeof(int));
  EXPECT_EQ(s.pending_copies(), 1u);
  EXPECT_EQ(b, std::vector<int>(64, -1));  // a reader that did not fence sees the old bytes
  s.fence();
  EXPECT_EQ(b, a);
  EXPECT_EQ(s.pending_copies(), 0u);
}

TEST(CopyStream, CopiesLandInTheOrderEnqueued) {
  CopyStream s(Device::emulated);
  std::vector<int> a = iota(16, 100), b(16, -1), c(16, -2);
  s.copy(b.data(), a.data(), 16 * sizeof(int));  // b <- a
  s.copy(c.data(), b.data(), 16 * sizeof(int));  // c <- b: must read what the first one wrote
  a.assign(16, 7);                               // changed after enqueueing: the emulated copy reads it late
  s.synchronize();
  EXPECT_EQ(b, std::vector<int>(16, 7));
  EXPECT_EQ(c, b);
}

TEST(CopyStream, ReleasesWaitForTheCopiesBeforeThemUntilSynchronize) {
  CopyStream s(Device::emulated);
  std::vector<int> a = iota(8, 1), b(8, 0);
  std::vector<int> seen;
  s.copy(b.data(), a.data(), 8 * sizeof(int));
  s.release_after([&] { seen = b; });  // a release sees its copies done
  s.fence();
  EXPECT_TRUE(seen.empty());  // a fence orders later device work; it frees nothing
  s.synchronize();
  EXPECT_EQ(seen, a);
  seen.clear();
  s.synchronize();  // each release runs once
  EXPECT_TRUE(seen.empty());
}

TEST(CopyStream, TheDestructorMakesPendingCopiesAndRunsReleases) {
  std::vector<int> a = iota(8, 1), b(8, 0);
  int released = 0;
  {
    CopyStream s(Device::emulated);
    s.copy(b.data(), a.data(), 8 * sizeof(int));
    s.release_after([&] { ++released; });
  }
  EXPECT_EQ(b, a);
  EXPECT_EQ(released, 1);
}

TEST(CopyStream, AnInjectedFaultFailsTheCopyBeforeAnythingIsEnqueued) {
  CopyStream s(Device::emulated);
  std::vector<int> a = iota(8, 1), b(8, 0);
  FaultInjector faults;
  faults.fail_nth(1);
  {
    ScopedCopyFaults guard(faults);
    EXPECT_THROW(s.copy(b.data(), a.data(), 8 * sizeof(int)), Error);
  }
  EXPECT_EQ(s.pending_copies(), 0u);
  EXPECT_EQ(faults.injected(), 1u);
  s.synchronize();
  EXPECT_EQ(b, std::vector<int>(8, 0));
}

#if !KVLAB_HAS_CUDA
TEST(CopyStream, CudaInABuildWithoutCudaIsRefused) { EXPECT_THROW(CopyStream{Device::cuda}, InvalidArgument); }
#endif

}  // namespace
}  // namespace kvlab
