// KV integrity: replays that move KV in every way a backend can (copy-on-write, fork copies, swap
// out and in, vmm remaps, prefix-cache hits, recompute) write a known pattern into every slot and
// read every resident sequence back after every step; nothing may differ.
#include <gtest/gtest.h>

#include "alloc/faults/fault_injection.hpp"
#include "serving/replay/backend_factory.hpp"
#include "serving/replay/kv_integrity.hpp"
#include "kernels/kv_view.hpp"
#include "serving/replay/replayer.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

BackendOptions options(std::int64_t tokens) {
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = static_cast<std::size_t>(tokens) * o.model.kv_bytes_per_token();
  o.max_seq_len = 128;  // prompts <= 90 + outputs <= 25 fit; contiguous-max reserves 128 tokens
  o.memory = &host_memory_resource();
  return o;
}

/// Writes 20 tokens of sequence 1, checks them clean, changes one element of one token of one
/// layer (through host pointers: the backend's memory must be host-addressable) and expects
/// exactly that one mismatch.
void expect_one_corruption_found(KvBackend& b) {
  KvIntegrity check(b);
  b.admit(1, {20, 30}, 20);
  std::vector<std::uint64_t> tags;
  for (int t = 0; t < 20; ++t) tags.push_back(KvIntegrity::positional(1, t));
  check.write(1, 0, tags);
  const SeqId one = 1;
  EXPECT_EQ(check.verify({&one, 1}), 0);
  EXPECT_EQ(check.tokens_checked(), 20);
  b.prepare_batch({&one, 1});
  const KvView view = b.layer_view(1);
  half_t* v =
      view.layout == KvLayout::paged ? as_paged<half_t>(view).v(0, 13, 1) : as_contiguous<half_t>(view).v(0, 13, 1);
  v[5] = from_float<half_t>(1000.f);
  EXPECT_EQ(check.verify({&one, 1}), 1);
  EXPECT_EQ(check.mismatches(), 1);
  b.release(1);
}

TEST(KvIntegrity, DetectsACorruptedElement) {
  auto b = make_backend("paged-7", options(200));
  expect_one_corruption_found(*b);
}

/// The same on the emulated GPU, where the checker takes the GPU's path: per-batch metadata (block
/// tables, sequence bases) and every K/V row copied between device memory and the host.
TEST(KvIntegrity, DetectsACorruptedElementThroughDeviceCopies) {
  for (const std::string name : {"paged-7", "contiguous-oracle"}) {
    SCOPED_TRACE(name);
    DeviceContext device(parse_device_spec("emulated"), std::size_t{64} << 20);
    {
      BackendOptions o = options(200);
      o.memory = &device.memory();
      o.device = &device;
      auto b = make_backend(name, o);
      ASSERT_EQ(b->device(), Device::emulated);
      expect_one_corruption_found(*b);  // the emulated device's memory is host-addressable
    }
    EXPECT_EQ(device.problems(), "");
  }
}

TEST(KvIntegrity, PatternIsExactInEveryDtype) {
  for (std::uint64_t tag : {0ull, 1ull, 123456789ull})
    for (int d = 0; d < 64; ++d) {
      const float p = KvIntegrity::pattern(tag, 1, 0, 1, d);
      EXPECT_EQ(to_float(from_float<half_t>(p)), p);
      EXPECT_EQ(to_float(from_float<bfloat16_t>(p)), p);
    }
}

struct Scenario {
  const char* name;
  int samples;
  double beams;
  PreemptionMode preemption;
  int prefix_groups;
  std::int64_t capacity_tokens;
};

class KvIntegrityReplay : public ::testing::TestWithParam<std::string> {};

TEST_P(KvIntegrityReplay, EveryMoveKeepsTheBytes) {
  const Scenario scenarios[] = {
      {"beams+swap", 3, 0.3, PreemptionMode::swap, 0, 700},
      {"sampling+recompute", 2, 0.0, PreemptionMode::recompute, 0, 500},
      {"shared-prefixes", 1, 0.0, PreemptionMode::recompute, 2, 900},
  };
  for (const Scenario& sc : scenarios) {
    SyntheticWorkload w;
    w.num_requests = 16;
    w.rate = 40;
    w.prompt = LengthDistribution::parse("uniform:20:90", "p");
    w.output = LengthDistribution::parse("uniform:2:25", "o");
    w.prefix_groups = sc.prefix_groups;
    w.shared_prefix_tokens = sc.prefix_groups ? 48 : 0;
    w.seed = 11;
    auto b = make_backend(GetParam(), options(sc.capacity_tokens));
    ReplayConfig c;
    c.verify_kv = true;
    c.samples_per_request = sc.samples;
    c.beam_reselect_probability = sc.beams;
    c.preemption = sc.preemption;
    c.chunked_prefill = true;
    c.max_batched_tokens = 64;
    const ReplayResult r = replay(*b, generate(w), c);
    const ReplaySummary& s = r.summary;
    EXPECT_EQ(s.completed + s.rejected + s.truncated + s.failed, 16) << sc.name;
    EXPECT_GT(s.kv_tokens_checked, 1000) << sc.name;
    EXPECT_EQ(s.kv_mismatches, 0) << GetParam() << " " << sc.name;
    EXPECT_EQ(b->num_sequences(), 0u);
  }
}

TEST_P(KvIntegrityReplay, FaultsDoNotCorruptWhatSurvives) {
  SyntheticWorkload w;
  w.num_requests = 16;
  w.rate = 40;
  w.prompt = LengthDistribution::parse("uniform:20:90", "p");
  w.output = LengthDistribution::parse("uniform:2:25", "o");
  auto b = make_backend(GetParam(), options(600));
  ReplayConfig c;
  c.verify_kv = true;
  c.samples_per_request = 3;
  c.beam_reselect_probability = 0.3;
  c.preemption = PreemptionMode::swap;
  FaultInjector faults;
  faults.fail_randomly(0.05, 3);
  ScopedCopyFaults guard(faults);
  const ReplayResult r = replay(*b, generate(w), c);
  EXPECT_EQ(r.summary.kv_mismatches, 0);
  EXPECT_EQ(r.summary.completed + r.summary.rejected + r.summary.truncated + r.summary.failed, 16);
}

std::vector<std::string> storage_backends() {
  std::vector<std::string> v;
  for (const auto& f : backend_forms())
    if (f != "paged-256") v.push_back(f);  // 256-token blocks leave too few blocks at these sizes
  return v;
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, KvIntegrityReplay, ::testing::ValuesIn(storage_backends()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace kvlab
