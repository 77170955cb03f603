// CopyStream on a GPU (alloc/transfer/copy_stream.hpp): pinned host -> device -> pinned host on the copy
// stream, a kernel-free fence that the default stream's synchronous copy must respect, and
// releases that run only after synchronize. Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "alloc/transfer/copy_stream.hpp"
#include "alloc/cuda/cuda_memory_resource.hpp"
#include "alloc/cuda/cuda_runtime.hpp"

namespace kvlab {
namespace {

TEST(CudaCopyStream, RoundTripsThroughPinnedMemoryInOrder) {
  if (!cuda_status().available) GTEST_SKIP() << "no usable GPU: " << cuda_status().message;
  constexpr std::size_t kInts = std::size_t{16} << 20;  // 64 MiB: milliseconds over PCIe, so an unfenced read races it
  constexpr std::size_t kBytes = kInts * sizeof(int);
  CudaMemoryResource device_memory(0);
  CudaPinnedMemoryResource pinned;
  auto* src = static_cast<int*>(pinned.allocate(kBytes));
  auto* back = static_cast<int*>(pinned.allocate(kBytes));
  void* dev = device_memory.allocate(kBytes);
  std::iota(src, src + kInts, 17);
  std::memset(back, 0xff, kBytes);
  int released = 0;
  {
    CopyStream s(Device::cuda);
    s.copy(dev, src, kBytes);   // swap-in direction
    s.copy(back, dev, kBytes);  // swap-out direction, after it on the same stream
    s.release_after([&] { ++released; });
    s.fence();
    std::vector<int> last(16);
    // A synchronous copy on the default stream after the fence sees the copy stream's bytes, the
    // last ones (which land last) included.
    ASSERT_EQ(
        cudaMemcpy(last.data(), static_cast<int*>(dev) + kInts - 16, last.size() * sizeof(int), cudaMemcpyDeviceToHost),
        cudaSuccess);
    for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(last[i], static_cast<int>(17 + kInts - 16 + i));
    EXPECT_EQ(released, 0);
    s.synchronize();
    EXPECT_EQ(released, 1);
  }
  for (std::size_t i = 0; i < kInts; i += 4099) ASSERT_EQ(back[i], static_cast<int>(17 + i)) << i;
  device_memory.deallocate(dev, kBytes);
  pinned.deallocate(back, kBytes);
  pinned.deallocate(src, kBytes);
}

}  // namespace
}  // namespace kvlab
