// A fourth backend, written against the front door exactly as docs/backend-interface.md shows, to
// prove that a new backend needs only its own file plus one registration with the factory: this
// file is all there is of it. It then runs the whole shared conformance suite (the EveryBackend
// instantiation in backend_conformance_test.cpp picks its test forms up from the factory) and a
// replay with KV verification.
//
// The design: a bump allocator. Each sequence gets exactly final_tokens tokens at the top of one
// region, laid out [layer][K|V][tokens][kv_heads][head_dim] like the contiguous backend; memory
// comes back only when every sequence has left (freed space below the top is external
// fragmentation until then). A poor allocator, but a complete backend.
#include <gtest/gtest.h>

#include <algorithm>

#include "alloc/transfer/copy.hpp"
#include "alloc/core/error.hpp"
#include "alloc/backend/table_backend.hpp"
#include "serving/replay/backend_factory.hpp"
#include "serving/replay/replayer.hpp"
#include "serving/traces/workload.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

struct BumpSequence : SequenceState {
  std::size_t offset = 0;
  std::int64_t capacity_tokens = 0;
};

class BumpBackend final : public TableBackend<BumpSequence> {
 public:
  explicit BumpBackend(const BackendOptions& o)
      : TableBackend(o.model, o.max_seq_len),
        capacity_(o.capacity_bytes / model().kv_bytes_per_token() * model().kv_bytes_per_token()),
        memory_(o.memory) {
    KVLAB_EXPECTS(capacity_ > 0, "KV capacity is below one token");
    if (memory_ != nullptr) region_ = static_cast<std::byte*>(memory_->allocate(capacity_));
  }
  ~BumpBackend() override {
    try {
      if (memory_ != nullptr) memory_->deallocate(region_, capacity_);
    } catch (...) {  // nothing to report to at teardown
    }
  }

 private:
  [[nodiscard]] std::size_t bytes(std::int64_t tokens) const noexcept {
    return static_cast<std::size_t>(tokens) * model().kv_bytes_per_token();
  }
  [[nodiscard]] std::byte* layer_base(const BumpSequence& s, int layer, int kv) const noexcept {
    const std::size_t plane = bytes(s.capacity_tokens) / (2 * static_cast<std::size_t>(model().num_layers));
    return region_ + s.offset + (2 * static_cast<std::size_t>(layer) + kv) * plane;
  }
  /// Takes `tokens` tokens at the top, or throws OutOfMemory changing nothing.
  std::size_t bump(std::int64_t tokens) {
    if (top_ + bytes(tokens) > capacity_)
      KVLAB_THROW(OutOfMemory, "bump: " + std::to_string(tokens) + " tokens do not fit");
    const std::size_t at = top_;
    top_ += bytes(tokens);
    return at;
  }

  [[nodiscard]] std::string do_name() const override { return "bump"; }
  [[nodiscard]] Device do_device() const noexcept override { return memory_ ? memory_->device() : Device::host; }
  [[nodiscard]] bool do_has_storage() const noexcept override { return region_ != nullptr; }
  [[nodiscard]] bool do_can_admit(const SequenceSpec& spec, std::int64_t) const override {
    return top_ + bytes(std::max<std::int64_t>(spec.final_tokens, 1)) <= capacity_;
  }
  void do_admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens) override {
    BumpSequence s;
    s.capacity_tokens = std::max<std::int64_t>(spec.final_tokens, 1);
    s.offset = bump(s.capacity_tokens);
    s.length = initial_tokens;
    s.final_tokens = spec.final_tokens;
    seqs_.insert(id, s);
  }
  [[nodiscard]] bool do_can_grow(SeqId id, std::int64_t n) const override {
    return at(id).length + n <= at(id).capacity_tokens;
  }
  void do_grow(SeqId id, std::int64_t n) override {
    if (!do_can_grow(id, n)) KVLAB_THROW(OutOfMemory, "bump: sequence " + std::to_string(id) + " is full");
    at(id).length += n;
  }
  void do_fork(SeqId parent, SeqId child) override {
    BumpSequence c = at(parent);
    c.cached_tokens = 0;
    c.offset = bump(c.capacity_tokens);
    if (region_ != nullptr) {
      const std::size_t written = bytes(c.length) / (2 * static_cast<std::size_t>(model().num_layers));
      for (int layer = 0; layer < model().num_layers; ++layer)
        for (int kv = 0; kv < 2; ++kv)
          copy_bytes(device(), layer_base(c, layer, kv), layer_base(at(parent), layer, kv), written);
    }
    seqs_.insert(child, c);
  }
  void do_release(SeqId id) override {
    dead_ += bytes(at(id).capacity_tokens);
    seqs_.erase(id);
    if (seqs_.empty()) top_ = dead_ = 0;  // the arena empties: everything comes back at once
  }
  PreparedBatch do_prepare_batch(std::span<const SeqId> seqs) override {
    batch_views_.begin_contiguous(static_cast<int>(seqs.size()));
    for (int b = 0; b < static_cast<int>(seqs.size()); ++b) {
      const BumpSequence& s = at(seqs[b]);
      batch_views_.set_length(b, s.length);
      if (region_ == nullptr) continue;
      for (int layer = 0; layer < model().num_layers; ++layer)
        batch_views_.set_bases(b, layer, layer_base(s, layer, 0), layer_base(s, layer, 1));
    }
    return batch_views_.finish(device(), memory_);
  }
  [[nodiscard]] MemoryBreakdown do_breakdown(const SequenceSpec*) const override {
    MemoryBreakdown m;
    m.capacity = capacity_;
    for (const auto& [id, s] : seqs_) {
      m.token_states += bytes(s.length);
      m.reserved += bytes(std::max(s.final_tokens, s.length) - s.length);
      m.internal_fragmentation += bytes(s.capacity_tokens - std::max(s.final_tokens, s.length));
    }
    m.external_fragmentation = dead_;  // freed, but below the top: unusable until the arena empties
    return m;
  }

  std::size_t capacity_;
  MemoryResource* memory_;
  std::byte* region_ = nullptr;
  std::size_t top_ = 0, dead_ = 0;
};

// The one registration: from here on "bump" is a backend like any other, in the CLI's factory
// and in the conformance suite's list of forms.
const bool registered = [] {
  register_backend_family({"bump", "bump", {"bump"}, [](std::string_view name, const BackendOptions& o) {
                             KVLAB_EXPECTS(name == "bump",
                                           "unknown backend '" + std::string(name) + "' (bump takes no options)");
                             return std::unique_ptr<KvBackend>(std::make_unique<BumpBackend>(o));
                           }});
  return true;
}();

TEST(FourthBackend, RunsTheWholeConformanceSuite) {
  ASSERT_TRUE(registered);
  const auto forms = backend_forms();
  EXPECT_NE(std::find(forms.begin(), forms.end(), "bump"), forms.end());
  // Every shared conformance test was instantiated for it.
  // Every shared conformance test was instantiated for it, as for the built-in contiguous-max.
  int bump = 0, contiguous = 0;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    if (std::string(suite.name()) != "EveryBackend/BackendConformance") continue;
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const std::string name = suite.GetTestInfo(j)->name();
      bump += name.ends_with("/bump") ? 1 : 0;
      contiguous += name.ends_with("/contiguous_max") ? 1 : 0;
    }
  }
  EXPECT_GT(contiguous, 0);
  EXPECT_EQ(bump, contiguous);
}

TEST(FourthBackend, TheRegistryRefusesAmbiguousFamilies) {
  const auto maker = [](std::string_view, const BackendOptions& o) {
    return std::unique_ptr<KvBackend>(std::make_unique<BumpBackend>(o));
  };
  for (const char* prefix : {"bump", "paged-x", "vmm", ""}) {  // taken, inside paged-, containing vmm-, empty
    EXPECT_THROW(register_backend_family({prefix, "x", {}, maker}), InvalidArgument) << prefix;
  }
  EXPECT_THROW(register_backend_family({"nomaker-", "x", {}, {}}), InvalidArgument);
  const auto before = backend_forms();
  EXPECT_EQ(std::count(before.begin(), before.end(), "bump"), 1);  // refused families left nothing behind
}

TEST(FourthBackend, ReplaysWithVerifiedKv) {
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 3000 * o.model.kv_bytes_per_token();
  o.max_seq_len = 256;
  o.memory = &host_memory_resource();
  auto backend = make_backend("bump", o);
  SyntheticWorkload w;
  w.num_requests = 40;
  w.rate = 50;
  w.prompt = LengthDistribution::parse("uniform:8:100", "prompt");
  w.output = LengthDistribution::parse("uniform:4:60", "output");
  ReplayConfig rc;
  rc.execute = true;
  rc.verify_kv = true;
  rc.samples_per_request = 2;  // forks copy the prompt
  const ReplayResult r = replay(*backend, generate(w), rc);
  EXPECT_EQ(r.summary.completed, 40);
  EXPECT_EQ(r.summary.kv_mismatches, 0);
  EXPECT_GT(r.summary.kv_tokens_checked, 0);
  EXPECT_GT(r.summary.mean_fractions.external_fragmentation, 0.0);  // the design's cost shows
  EXPECT_EQ(backend->num_sequences(), 0u);
}

}  // namespace
}  // namespace kvlab
