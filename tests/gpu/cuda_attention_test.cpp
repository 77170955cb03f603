// The real CUDA suite: attention and block-copy kernels on a GPU against the float64 reference,
// the device memory resources and the runtime-resolved driver table. Every test skips with the
// reason when this machine has no usable GPU (the CPU suite covers the same kernel source under
// the SIMT emulator). Run with tests/gpu/run.sh or `ctest -L gpu`.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "alloc/cuda/cuda_driver.hpp"
#include "alloc/cuda/cuda_memory_resource.hpp"
#include "alloc/cuda/cuda_runtime.hpp"
#include "kernels/cuda/cuda_attention.hpp"
#include "tests/gpu/device_array.hpp"
#include "tests/support/kv_fixture.hpp"

namespace kvlab {
namespace {

#define SKIP_WITHOUT_GPU()                                                                    \
  do {                                                                                        \
    if (!cuda_status().available) GTEST_SKIP() << "no usable GPU: " << cuda_status().message; \
  } while (0)

using testing::DeviceArray;

struct GpuCase {
  DType dtype;
  int group, head_dim, block_size, partitions;
  bool prefill;
};

template <class T>
void run_gpu_case(const GpuCase& c) {
  testing::KvShape shape;
  shape.seq_lens = {37, 1, 300, 64, 91, 1031, 5};  // prime batch of 7
  if (c.prefill) shape.q_lens = {5, 1, 17, 64, 3, 40, 5};
  shape.num_kv_heads = 2;
  shape.num_q_heads = 2 * c.group;
  shape.head_dim = c.head_dim;
  shape.block_size = c.block_size ? c.block_size : 16;
  testing::KvFixture<T> fx(shape);
  const std::vector<double> ref = fx.reference();
  const int batch = static_cast<int>(shape.seq_lens.size());

  DeviceArray<float> q(fx.q_data());
  DeviceArray<float> out(std::vector<float>(fx.out().size(), NAN));
  DeviceArray<std::int32_t> lens(shape.seq_lens);
  DeviceArray<std::int32_t> indptr(fx.q_indptr_data());
  std::vector<std::unique_ptr<DeviceArray<T>>> seq_k, seq_v;
  std::vector<T*> kptr, vptr;
  for (int s = 0; s < batch; ++s) {
    seq_k.push_back(std::make_unique<DeviceArray<T>>(fx.k_seq_data(s)));
    seq_v.push_back(std::make_unique<DeviceArray<T>>(fx.v_seq_data(s)));
    kptr.push_back(seq_k.back()->ptr);
    vptr.push_back(seq_v.back()->ptr);
  }
  DeviceArray<T*> dk(kptr), dv(vptr);
  DeviceArray<T> kpool(fx.k_pool_data()), vpool(fx.v_pool_data());
  DeviceArray<std::int32_t> table(fx.block_table_data());

  KvView view;
  if (c.block_size == 0) {
    view = erase(ContiguousKv<T>{dk.ptr, dv.ptr, fx.contiguous().token_stride, fx.contiguous().head_stride},
                 shape.num_kv_heads, shape.head_dim);
  } else {
    PagedKv<T> pv = fx.paged();
    pv.k_pool = kpool.ptr;
    pv.v_pool = vpool.ptr;
    pv.block_table = table.ptr;
    view = erase(pv, shape.num_kv_heads, shape.head_dim);
  }
  AttentionParams p = fx.params();
  p.q = q.ptr;
  p.out = out.ptr;
  p.seq_lens = lens.ptr;
  p.q_indptr = c.prefill ? indptr.ptr : nullptr;
  if (c.partitions == 0 && !c.prefill) {
    // Sized to the GPU: 14 blocks unsplit fill no GPU, and the longest sequence (1031 tokens)
    // allows at most 4 partitions of 256 tokens.
    p.host_seq_lens = shape.seq_lens.data();
    const int chosen = cuda_attention_partitions(p, view, {});
    EXPECT_GT(chosen, 1);
    EXPECT_LE(chosen, 4);
  }
  cuda_attention(p, view, c.partitions);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::string what = std::string(to_string(c.dtype)) + " g" + std::to_string(c.group) + " d" +
                           std::to_string(c.head_dim) + " bs" + std::to_string(c.block_size) + " parts" +
                           std::to_string(c.partitions) + (c.prefill ? " prefill" : " decode");
  testing::expect_matches_reference(out.to_host(), ref, {}, what);
}

class CudaAttention : public ::testing::TestWithParam<GpuCase> {};

TEST_P(CudaAttention, MatchesFloat64Reference) {
  SKIP_WITHOUT_GPU();
  const GpuCase c = GetParam();
  switch (c.dtype) {
    case DType::f16:
      return run_gpu_case<half_t>(c);
    case DType::bf16:
      return run_gpu_case<bfloat16_t>(c);
    case DType::f32:
      return run_gpu_case<float>(c);
  }
}

std::vector<GpuCase> gpu_cases() {
  std::vector<GpuCase> v;
  for (DType dt : {DType::f16, DType::bf16, DType::f32})
    for (int group : {1, 4, 8})
      for (int dim : {64, 128})
        for (int bs : {0, 1, 3, 7, 16, 17})
          for (bool prefill : {false, true})  // partitions 0: sized to the GPU (kernels/split_kv.hpp)
            v.push_back({dt, group, dim, bs, bs == 7 ? 3 : bs == 17 ? 0 : 1, prefill});
  v.push_back({DType::f16, 4, 256, 16, 5, false});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllShapes, CudaAttention, ::testing::ValuesIn(gpu_cases()), [](const auto& info) {
  const GpuCase& c = info.param;
  return std::string(to_string(c.dtype)) + "_g" + std::to_string(c.group) + "_d" + std::to_string(c.head_dim) +
         (c.block_size ? "_paged" + std::to_string(c.block_size) : "_contiguous") + "_p" +
         std::to_string(c.partitions) + (c.prefill ? "_prefill" : "_decode");
});

TEST(CudaBlockCopy, CopiesTheListedBlocks) {
  SKIP_WITHOUT_GPU();
  const int blocks = 9, block_bytes = 4096;
  std::vector<std::uint8_t> host(static_cast<std::size_t>(blocks) * block_bytes);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::uint8_t>(i * 31 + 7);
  DeviceArray<std::uint8_t> pool(host);
  DeviceArray<std::int32_t> src(std::vector<std::int32_t>{0, 4, 2}), dst(std::vector<std::int32_t>{8, 1, 3});
  simt::BlockCopyParams c;
  c.src_pool = pool.ptr;
  c.dst_pool = pool.ptr;
  c.src_blocks = src.ptr;
  c.dst_blocks = dst.ptr;
  c.num_pairs = 3;
  c.block_bytes = block_bytes;
  cuda_block_copy(c);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto after = pool.to_host();
  const int pairs[3][2] = {{0, 8}, {4, 1}, {2, 3}};
  for (auto [s, d] : pairs)
    for (int i = 0; i < block_bytes; ++i)
      ASSERT_EQ(after[static_cast<std::size_t>(d) * block_bytes + i],
                host[static_cast<std::size_t>(s) * block_bytes + i]);
}

TEST(CudaMemory, ResourcesAllocateAndTheDriverTableResolves) {
  SKIP_WITHOUT_GPU();
  CudaMemoryResource device;
  void* p = device.allocate(1 << 20);
  EXPECT_EQ(cudaMemset(p, 0, 1 << 20), cudaSuccess);
  device.deallocate(p, 1 << 20);
  CudaPinnedMemoryResource pinned;
  void* h = pinned.allocate(1 << 16);
  static_cast<char*>(h)[100] = 1;
  pinned.deallocate(h, 1 << 16);
  const CudaDriverApi& api = cuda_driver();
  int count = 0;
  EXPECT_EQ(api.cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_GE(count, 1);
}

}  // namespace
}  // namespace kvlab
