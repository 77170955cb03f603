// The CUDA code path end to end without a GPU: a replay in execute mode through the vmm backend
// whose physical pages come from the CUDA driver API — here the contract-checking driver double,
// which maps host memory and really enforces access rights — with the attention kernels' CUDA
// source running under the host SIMT emulator, and every KV byte verified after every step.
#include <gtest/gtest.h>

#if KVLAB_HAS_CUDA_HEADERS
#include "alloc/cuda/emulated/cuda_driver_double.hpp"
#include "serving/replay/replayer.hpp"
#include "kernels/simt/emulated_attention.hpp"
#include "tests/support/tiny_model.hpp"
#include "vmm/cuda_vm_driver.hpp"
#include "vmm/vmm_backend.hpp"

namespace kvlab {
namespace {

TEST(CudaPathEndToEnd, ReplayThroughTheDriverDoubleAndTheSimtEmulator) {
  CudaDriverDoubleConfig dc;
  dc.granularity = 64 << 10;
  dc.capacity = std::size_t{16} << 20;
  CudaDriverDouble dbl(dc);
  SyntheticWorkload w;
  w.num_requests = 7;
  w.rate = 100;
  w.prompt = LengthDistribution::parse("uniform:20:300", "p");
  w.output = LengthDistribution::parse("uniform:2:12", "o");
  w.seed = 5;
  for (bool overlap : {false, true}) {
    {
      VmmConfig c;
      c.model = testing::tiny_model();
      c.page_bytes = 64 << 10;  // 128 tokens of one tensor of the tiny model
      c.capacity_bytes = std::size_t{8} << 20;
      c.max_seq_len = 512;
      c.max_batch = 8;
      c.overlap = overlap;
      c.deferred_reclamation = true;
      c.driver = std::make_shared<CudaVmDriver>(dbl.api(), CudaVmOptions{0, true});
      VmmBackend backend(c);
      ReplayConfig rc;
      rc.execute = true;
      rc.attention = [](const AttentionParams& p, const KvView& kv) {
        emulated_attention(p, kv, /*num_partitions=*/2);
      };
      rc.verify_kv = true;
      rc.chunked_prefill = true;
      rc.max_batched_tokens = 128;
      const ReplayResult r = replay(backend, generate(w), rc);
      EXPECT_EQ(r.summary.completed, 7);
      EXPECT_EQ(r.summary.kv_mismatches, 0);
      EXPECT_GT(r.summary.kernel_s, 0.0);
      EXPECT_GT(dbl.call_count(CuEntry::cuMemMap), 0u);
      EXPECT_GT(dbl.call_count(CuEntry::cuMemSetAccess), 0u);
      EXPECT_TRUE(dbl.violations().empty()) << dbl.violations().front();
    }
    EXPECT_TRUE(dbl.usage().empty()) << dbl.leak_report();
  }
}

}  // namespace
}  // namespace kvlab
#else
TEST(CudaPathEndToEnd, NeedsToolkitHeaders) {
  GTEST_SKIP() << "CUDA toolkit headers not found: the driver double is not built";
}
#endif
