// `--device emulated` end to end, as the factory builds it (DeviceContext): every backend family on
// the CUDA driver double's memory — contiguous and paged pools from cuMemCreate + cuMemMap, vmm
// pages through CudaVmDriver — with the CUDA kernels under the SIMT emulator, their arguments in
// device memory, and every KV byte verified after every step. Then faults injected at the driver's
// calls and at device copies: every request ends completed, rejected or failed with a reason, the
// KV that remains reads back as written, and the double holds nothing once the backend is gone.
#include <gtest/gtest.h>

#include "alloc/cuda/cuda_runtime.hpp"
#include "alloc/core/error.hpp"
#include "alloc/faults/fault_injection.hpp"
#include "serving/replay/backend_factory.hpp"
#include "serving/replay/replayer.hpp"
#include "kernels/kv_view.hpp"
#include "paged/paged_backend.hpp"
#include "tests/support/tiny_model.hpp"

#if KVLAB_HAS_CUDA_HEADERS
#include "alloc/cuda/emulated/cuda_driver_double.hpp"

namespace kvlab {
namespace {

struct Case {
  std::string backend;
  int samples = 1;    // > 1 with beam reselection: forks and copy-on-write
  bool swap = false;  // preemption by swapping, in a pool too small for the load
  /// Also under injected faults (DriverAndCopyFaultsLoseNothing). Off where another case runs the
  /// same driver calls: elastic's per-layer groups map as its interleaved ones do, page by page
  /// (ElasticPages.ADriverFaultAtAnyCallLeavesNothingBehind covers multi-page groups on the host),
  /// and its beams took 22 s under ASan.
  bool faults = true;
};

std::vector<Request> workload(int n, std::uint64_t seed) {
  SyntheticWorkload w;
  w.num_requests = n;
  w.rate = 100;
  w.prompt = LengthDistribution::parse("uniform:8:60", "p");
  w.output = LengthDistribution::parse("uniform:2:10", "o");
  w.seed = seed;
  return generate(w);
}

/// Backends whose memory is 2 MiB pages mapped on demand: they need a capacity of whole pages.
bool on_pages(const std::string& backend) { return backend.starts_with("vmm") || backend.starts_with("elastic"); }

BackendOptions options(DeviceContext& device, bool vmm, std::int64_t tight_tokens = 0) {
  BackendOptions o;
  o.model = testing::tiny_model();
  o.max_seq_len = 128;
  // vmm-2m holds a 2 MiB page per tensor (4 tensors) for each sequence: 64 MiB is 8 sequences.
  // Tight: a pool that holds one or two of the running requests (up to 70 tokens each, 90 for a
  // group of three samples), so running ones are preempted.
  const std::int64_t tokens = tight_tokens > 0 ? tight_tokens : 600;
  o.capacity_bytes = vmm ? std::size_t{64} << 20 : static_cast<std::size_t>(tokens) * o.model.kv_bytes_per_token();
  o.memory = &device.memory();
  o.device = &device;
  return o;
}

ReplayConfig config(const Case& c, DeviceContext& device) {
  ReplayConfig rc;
  rc.execute = true;
  rc.verify_kv = true;
  rc.execute_layers = 1;
  rc.device_memory = &device.memory();
  rc.samples_per_request = c.samples;
  rc.beam_reselect_probability = c.samples > 1 ? 0.3 : 0.0;
  rc.seed = 3;
  rc.max_batched_tokens = 256;
  if (c.swap) rc.preemption = PreemptionMode::swap;
  return rc;
}

double counter(const ReplaySummary& s, const std::string& name) {
  for (const auto& [n, v] : s.backend_counters)
    if (n == name) return v;
  return -1;
}

/// The pool of a swap case: 5 blocks of 16, 8 for groups of samples (a group swaps as a whole).
std::int64_t tight_tokens(const Case& c) { return c.swap ? (c.samples > 1 ? 128 : 80) : 0; }

class EmulatedDevice : public ::testing::TestWithParam<Case> {};

TEST_P(EmulatedDevice, ReplaysVerifiedOnDeviceMemory) {
  const Case& c = GetParam();
  DeviceContext device(parse_device_spec("emulated"), std::size_t{256} << 20);
  CudaDriverDouble& dbl = *device.driver_double();
  {
    auto b = make_backend(c.backend, options(device, on_pages(c.backend), tight_tokens(c)));
    EXPECT_EQ(b->device(), Device::emulated);
    const ReplayResult r = replay(*b, workload(8, 1), config(c, device));
    EXPECT_EQ(r.summary.completed, 8) << c.backend;
    EXPECT_EQ(r.summary.failed, 0) << c.backend;
    EXPECT_EQ(r.summary.kv_mismatches, 0) << c.backend;
    EXPECT_GT(r.summary.kv_tokens_checked, 0) << c.backend;
    EXPECT_GT(r.summary.kernel_s, 0.0) << c.backend;
    EXPECT_GT(dbl.call_count(CuEntry::cuMemMap), 0u) << c.backend;
    if (c.samples > 1 && c.backend.starts_with("paged")) {
      EXPECT_GT(counter(r.summary, "cow_copies"), 0.0);
    }
    if (c.swap) {
      EXPECT_GT(r.summary.swaps, 0) << "the pool was meant to be too small: nothing was swapped";
    }
  }
  EXPECT_EQ(device.problems(), "") << c.backend;
}

INSTANTIATE_TEST_SUITE_P(EveryFamily, EmulatedDevice,
                         ::testing::Values(Case{"contiguous-max"}, Case{"contiguous-oracle", 3}, Case{"paged-16", 3},
                                           Case{"paged-16", 1, true}, Case{"paged-16", 3, true}, Case{"paged-16-hash"},
                                           Case{"vmm-2m"}, Case{"vmm-2m-mega-overlap"},
                                           Case{"elastic-16", 3, false, false},
                                           Case{"elastic-16-interleaved-reserve0"}),
                         [](const auto& info) {
                           std::string n = info.param.backend + (info.param.samples > 1 ? "_beams" : "") +
                                           (info.param.swap ? "_swap" : "");
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

/// One replay with `faults` armed at device copies and the emulated driver's calls.
void replay_under_faults(const Case& c, FaultInjector& faults, std::int64_t& failed, std::uint64_t& at_driver) {
  DeviceContext device(parse_device_spec("emulated"), std::size_t{256} << 20);
  {
    auto b = make_backend(c.backend, options(device, on_pages(c.backend), tight_tokens(c)));
    ReplayResult r;
    {
      ScopedCopyFaults guard(faults);
      device.inject_driver_faults(&faults);
      r = replay(*b, workload(10, 2), config(c, device));
      device.inject_driver_faults(nullptr);
    }
    const ReplaySummary& s = r.summary;
    EXPECT_EQ(s.completed + s.truncated + s.rejected + s.failed, 10) << c.backend;
    EXPECT_EQ(s.kv_mismatches, 0) << c.backend;
    for (const RequestRecord& q : r.requests)
      if (q.status == RequestRecord::Status::failed) {
        EXPECT_FALSE(q.reason.empty()) << c.backend;
      }
    EXPECT_EQ(b->num_sequences(), 0u) << c.backend;
    failed += s.failed;
  }
  at_driver += device.driver_double()->injected_faults();
  EXPECT_EQ(device.problems(), "") << c.backend << " after " << faults.injected() << " faults";
}

TEST_P(EmulatedDevice, DriverAndCopyFaultsLoseNothing) {
  const Case& c = GetParam();
  if (!c.faults) GTEST_SKIP() << c.backend << ": its driver calls are those of another case";
  std::int64_t failed = 0;
  std::uint64_t injected = 0, at_driver = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    FaultInjector faults;
    faults.fail_randomly(0.02, seed);
    replay_under_faults(c, faults, failed, at_driver);
    injected += faults.injected();
  }
  for (std::uint64_t n : {1, 2, 5, 13}) {  // the first calls, where one failure hits one request
    FaultInjector faults;
    faults.fail_nth(n);
    replay_under_faults(c, faults, failed, at_driver);
    injected += faults.injected();
  }
  EXPECT_GT(injected, 0u) << c.backend << ": no fault was injected";
  EXPECT_GT(at_driver, 0u) << c.backend << ": no fault reached a driver call";
  EXPECT_GT(failed, 0) << c.backend << ": no injected fault failed a request";
}

/// Writes (or, `check`, counts mismatches of) a value derived from (tag, token, layer, K|V,
/// element) in every KV slot of tokens [0, n) of `id`, through the views of a prepared batch.
int tokens(KvBackend& b, SeqId id, int tag, std::int64_t n, bool check) {
  b.prepare_batch({&id, 1});
  int bad = 0;
  const ModelGeometry& m = b.model();
  for (int layer = 0; layer < m.num_layers; ++layer) {
    const PagedKv<half_t> v = as_paged<half_t>(b.layer_view(layer));
    for (std::int64_t t = 0; t < n; ++t)
      for (int h = 0; h < m.num_kv_heads; ++h)
        for (int d = 0; d < m.head_dim; ++d)
          for (int kv = 0; kv < 2; ++kv) {
            half_t* slot = (kv == 0 ? v.k(0, t, h) : v.v(0, t, h)) + d;
            const half_t want = from_float<half_t>(static_cast<float>((tag * 131 + t * 7 + layer * 3 + kv + d) % 1000));
            if (check) {
              bad += to_float(*slot) != to_float(want);
            } else {
              *slot = want;
            }
          }
  }
  return bad;
}

// The swap copies run on their own stream, which the emulated device makes only at a fence: a
// swap-out whose freed blocks another sequence overwrites in the same step, and a swap-in read
// before its copies land, must still give back exactly the bytes swapped out. prepare_batch
// fences; without it this test sees the other sequence's bytes.
TEST(EmulatedDevice, AsyncSwapCopiesAreFencedBeforeTheBlocksAreReused) {
  DeviceContext device(parse_device_spec("emulated"), std::size_t{64} << 20);
  {
    BackendOptions o = options(device, false);
    o.capacity_bytes = 64 * o.model.kv_bytes_per_token();  // 4 blocks of 16
    auto b = make_backend("paged-16", o);
    b->admit(0, {40, 40}, 40);  // 3 blocks
    tokens(*b, 0, 1, 40, false);
    b->swap_out(0);             // its copies are enqueued, not made
    b->admit(1, {48, 48}, 48);  // takes the 3 blocks just freed
    tokens(*b, 1, 2, 48, false);
    b->release(1);
    b->swap_in(0);
    EXPECT_EQ(tokens(*b, 0, 1, 40, true), 0);
    EXPECT_GT(tokens(*b, 0, 2, 40, true), 0);  // the check can fail: another tag differs
    b->begin_step();                           // frees the emptied host buffer
    b->release(0);
  }
  EXPECT_EQ(device.problems(), "");
}

// The same through the prefix cache's host tier: a hit there copies cached bytes back into fresh
// device blocks, which may be the blocks a swap-out's copies still read. copy_host fences first;
// without that fence the swapped-out sequence comes back holding the restored prefix.
TEST(EmulatedDevice, AHostTierRestoreWaitsForTheSwapCopiesBeforeIt) {
  DeviceContext device(parse_device_spec("emulated"), std::size_t{64} << 20);
  {
    PagedConfig c;
    c.model = testing::tiny_model();
    c.capacity_bytes = 64 * c.model.kv_bytes_per_token();  // 4 blocks of 16
    c.max_seq_len = 128;
    c.memory = &device.memory();
    c.swap_memory = device.swap_memory();
    c.prefix_cache = PrefixCacheMode::hash;
    c.host_cache_bytes = 8 * 16 * c.model.kv_bytes_per_token();  // 8 host slots
    PagedBackend b(c);
    std::vector<std::int32_t> prefix(49), other(64);
    for (std::int32_t i = 0; i < 49; ++i) prefix[static_cast<std::size_t>(i)] = i;
    for (std::int32_t i = 0; i < 64; ++i) other[static_cast<std::size_t>(i)] = 1000 + i;
    b.admit(1, {48, 48, std::span(prefix).first(48)}, 48);  // 3 blocks, cached when full
    tokens(b, 1, 1, 48, false);
    b.release(1);
    b.admit(2, {64, 64, other}, 64);  // all 4 blocks: the 3 cached ones move to the host tier
    tokens(b, 2, 2, 64, false);
    b.swap_out(2);                     // copies enqueued, blocks freed
    b.admit(3, {49, 49, prefix}, 49);  // a host-tier hit: 48 tokens copied back into them
    EXPECT_EQ(b.cached_tokens(3), 48);
    EXPECT_EQ(tokens(b, 3, 1, 48, true), 0);  // the prefix came back from the host intact
    b.release(3);
    b.swap_in(2);
    EXPECT_EQ(tokens(b, 2, 2, 64, true), 0);  // and the swapped-out sequence kept its own bytes
    b.begin_step();
    b.release(2);
  }
  EXPECT_EQ(device.problems(), "");
}

TEST(EmulatedDevice, VmmPagesBelowTheDriverGranularityAreRefused) {
  DeviceContext device(parse_device_spec("emulated"));
  EXPECT_EQ(device.granularity(), std::size_t{2} << 20);
  BackendOptions o = options(device, true);
  o.memory = nullptr;  // the check comes first, even for accounting only (a run's probe)
  try {
    (void)make_backend("vmm-64k", o);
    ADD_FAILURE() << "vmm-64k was accepted on a 2 MiB driver";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of the CUDA driver's granularity (2m)"), std::string::npos)
        << e.what();
  }
}

TEST(EmulatedDevice, CudaWithoutAGpuFailsWithOneLine) {
  if (cuda_status().available) GTEST_SKIP() << "a GPU is here";
  try {
    DeviceContext device(parse_device_spec("cuda"));
    ADD_FAILURE() << "opened a GPU that is not there";
  } catch (const InvalidArgument&) {
    ADD_FAILURE() << "a missing GPU is not a bad argument";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no CUDA GPU found"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace kvlab
#else
TEST(EmulatedDevice, NeedsToolkitHeaders) { GTEST_SKIP() << "CUDA toolkit headers not found: no driver double"; }
#endif
