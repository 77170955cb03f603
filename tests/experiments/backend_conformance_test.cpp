// Shared test bodies, instantiated over every backend the factory knows: the contract of
// alloc/backend/kv_backend.hpp (all-or-nothing mutations, side-effect-free questions, accounting that sums
// to the capacity, memory back to zero) holds for each of them.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <vector>

#include "alloc/core/error.hpp"
#include "alloc/memory/statistics_adaptor.hpp"
#include "serving/replay/backend_factory.hpp"
#include "serving/replay/kv_integrity.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

class BackendConformance : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<KvBackend> make(std::size_t capacity_tokens, MemoryResource* memory = nullptr) {
    BackendOptions o;
    o.model = testing::tiny_model();
    o.capacity_bytes = capacity_tokens * o.model.kv_bytes_per_token();
    o.max_seq_len = 128;
    o.memory = memory;
    return make_backend(GetParam(), o);
  }
  static void expect_consistent(const KvBackend& b, const SequenceSpec* blocked = nullptr) {
    const MemoryBreakdown m = b.breakdown(blocked);
    ASSERT_LE(m.used(), m.capacity);
    EXPECT_NEAR(MemoryFractions::of(m).sum(), 1.0, 1e-12);
  }
};

TEST_P(BackendConformance, FreshBackendIsAllFree) {
  auto b = make(1000);
  const MemoryBreakdown m = b->breakdown();
  EXPECT_EQ(m.allocated(), 0u);
  EXPECT_EQ(m.free(), m.capacity);
  // Whole blocks only: at most one block (256 tokens at the largest block size here) is cut off.
  EXPECT_LE(m.capacity, 1000 * b->model().kv_bytes_per_token());
  EXPECT_GT(m.capacity + 256 * b->model().kv_bytes_per_token(), 1000 * b->model().kv_bytes_per_token());
  EXPECT_EQ(b->num_sequences(), 0u);
}

TEST_P(BackendConformance, TokenStatesCountExactlyTheTokensHeld) {
  auto b = make(1000);
  b->admit(1, {10, 40}, 10);
  b->admit(2, {3, 9}, 3);
  b->grow(1, 5);
  EXPECT_EQ(b->length(1), 15);
  EXPECT_EQ(b->breakdown().token_states, 18 * b->model().kv_bytes_per_token());
  expect_consistent(*b);
}

TEST_P(BackendConformance, FailedAdmissionChangesNothing) {
  auto b = make(300);
  SeqId id = 0;
  while (b->can_admit({100, 100}, 100)) b->admit(id++, {100, 100}, 100);
  ASSERT_GT(id, 0);
  const MemoryBreakdown before = b->breakdown();
  EXPECT_THROW(b->admit(id, {100, 100}, 100), OutOfMemory);
  EXPECT_FALSE(b->contains(id));
  const MemoryBreakdown after = b->breakdown();
  EXPECT_EQ(before.token_states, after.token_states);
  EXPECT_EQ(before.reserved, after.reserved);
  EXPECT_EQ(before.internal_fragmentation, after.internal_fragmentation);
  EXPECT_EQ(before.free(), after.free());
}

TEST_P(BackendConformance, QuestionsHaveNoSideEffects) {
  auto b = make(500);
  b->admit(1, {50, 60}, 50);
  const MemoryBreakdown before = b->breakdown();
  for (int i = 0; i < 10; ++i) {
    (void)b->can_admit({100, 120}, 100);
    (void)b->can_grow(1, 10);
  }
  const MemoryBreakdown after = b->breakdown();
  EXPECT_EQ(before.allocated(), after.allocated());
  EXPECT_EQ(b->length(1), 50);
}

TEST_P(BackendConformance, RandomLifetimesReturnEveryByte) {
  auto b = make(2000);
  std::mt19937_64 rng(std::hash<std::string>{}(GetParam()));
  struct Live {
    SeqId id;
    std::int64_t final_tokens;
  };
  std::vector<Live> live;
  SeqId next = 0;
  for (int step = 0; step < 2000; ++step) {
    const int op = static_cast<int>(rng() % 4);
    if (op == 0 || live.empty()) {
      const std::int64_t prompt = 1 + static_cast<std::int64_t>(rng() % 64);
      const std::int64_t final_tokens = prompt + static_cast<std::int64_t>(rng() % 64);
      if (b->can_admit({prompt, final_tokens}, prompt)) {
        b->admit(next, {prompt, final_tokens}, prompt);
        live.push_back({next++, final_tokens});
      } else {
        EXPECT_THROW(b->admit(next, {prompt, final_tokens}, prompt), OutOfMemory);
      }
    } else if (op == 3) {
      const std::size_t i = rng() % live.size();
      b->release(live[i].id);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      const Live& l = live[rng() % live.size()];
      if (b->length(l.id) < l.final_tokens && b->can_grow(l.id, 1)) b->grow(l.id, 1);
    }
    expect_consistent(*b);
  }
  for (const Live& l : live) b->release(l.id);
  EXPECT_EQ(b->num_sequences(), 0u);
  EXPECT_EQ(b->breakdown().allocated(), 0u);
}

TEST_P(BackendConformance, TryGrowIsCanGrowThenGrow) {
  // Twin backends under the same seeded operations near full capacity: one grows through
  // can_grow + grow, the other through try_grow. Answers, lengths and every byte of the breakdown
  // agree after every operation, forks (shared blocks, copy-on-write) and zero or oversized growth
  // included; both answers occur.
  auto a = make(700), b = make(700);
  std::mt19937_64 rng(std::hash<std::string>{}(GetParam()) + 1);
  std::vector<SeqId> live;
  SeqId next = 0;
  int yes = 0, no = 0;
  for (int step = 0; step < 3000; ++step) {
    const int op = static_cast<int>(rng() % 8);
    if (op == 0 || live.empty()) {
      const std::int64_t prompt = 1 + static_cast<std::int64_t>(rng() % 40);
      const SequenceSpec spec{prompt, 128};
      ASSERT_EQ(a->can_admit(spec, prompt), b->can_admit(spec, prompt));
      if (a->can_admit(spec, prompt)) {
        a->admit(next, spec, prompt);
        b->admit(next, spec, prompt);
        live.push_back(next++);
      }
    } else if (op == 1) {
      const std::size_t i = rng() % live.size();
      a->release(live[i]);
      b->release(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (op == 2) {
      const SeqId parent = live[rng() % live.size()];
      bool forked_a = true, forked_b = true;
      try {
        a->fork(parent, next);
      } catch (const OutOfMemory&) {
        forked_a = false;
      }
      try {
        b->fork(parent, next);
      } catch (const OutOfMemory&) {
        forked_b = false;
      }
      ASSERT_EQ(forked_a, forked_b) << step;
      if (forked_a) live.push_back(next);
      ++next;
    } else {
      const SeqId id = live[rng() % live.size()];
      const std::int64_t n = op == 3 ? 0 : op == 4 ? 1 + static_cast<std::int64_t>(rng() % 130) : 1;
      const bool want = a->can_grow(id, n);
      if (want) a->grow(id, n);
      ASSERT_EQ(b->try_grow(id, n), want) << "step " << step << ": sequence " << id << " by " << n;
      (want ? yes : no) += 1;
      ASSERT_EQ(a->length(id), b->length(id));
    }
    const MemoryBreakdown ma = a->breakdown(), mb = b->breakdown();
    ASSERT_EQ(ma.token_states, mb.token_states) << step;
    ASSERT_EQ(ma.reserved, mb.reserved) << step;
    ASSERT_EQ(ma.internal_fragmentation, mb.internal_fragmentation) << step;
    ASSERT_EQ(ma.free(), mb.free()) << step;
    ASSERT_EQ(ma.external_fragmentation, mb.external_fragmentation) << step;
    ASSERT_EQ(ma.shared_savings, mb.shared_savings) << step;
    ASSERT_EQ(ma.cached, mb.cached) << step;
  }
  EXPECT_GT(yes, 100);
  EXPECT_GT(no, 100);
  for (const SeqId id : live) {
    a->release(id);
    b->release(id);
  }
  EXPECT_EQ(b->breakdown().allocated(), 0u);
}

TEST_P(BackendConformance, ARefusedTryGrowKeepsThePreparedBatch) {
  // A refusal changes nothing, so the batch prepared before it stays viewable, as after can_grow;
  // a growth (even by zero tokens, as grow) needs a fresh batch.
  StatisticsAdaptor stats(host_memory_resource());
  auto b = make(600, &stats);
  b->admit(1, {10, 20}, 10);
  const SeqId one = 1;
  b->prepare_batch({&one, 1});
  EXPECT_FALSE(b->try_grow(1, 1000));  // past max_seq_len
  EXPECT_NO_THROW((void)b->layer_view(0));
  EXPECT_TRUE(b->try_grow(1, 1));
  EXPECT_EQ(b->length(1), 11);
  EXPECT_THROW((void)b->layer_view(0), InvalidArgument);
  b->release(1);
}

TEST_P(BackendConformance, StorageIsReturnedAtTeardown) {
  StatisticsAdaptor stats(host_memory_resource());
  {
    auto b = make(600, &stats);
    EXPECT_TRUE(b->has_storage());
    b->admit(1, {10, 20}, 10);
    const SeqId one = 1;
    b->prepare_batch({&one, 1});
    const KvView v = b->layer_view(1);
    EXPECT_EQ(v.num_kv_heads, 2);
    EXPECT_EQ(v.head_dim, 32);
    b->release(1);
  }
  EXPECT_EQ(stats.statistics().current_bytes, 0u);
}

// kvlab's contiguous views have the common-base form FlashInfer's kernels address (alloc/core/kv_view.hpp):
// one K base and one V base per layer, each sequence the same whole number of granules after
// both. Checked on host memory; tests/gpu/flashinfer_attention_test.cpp runs the kernels on it.
TEST_P(BackendConformance, ContiguousViewsShareOneKBaseAndOneVBase) {
  auto b = make(2000, &host_memory_resource());
  std::vector<SeqId> ids;
  for (SeqId id = 0; id < 5; ++id) {
    b->admit(id, {7 + 11 * id, 60 + id}, 7 + 11 * id);
    ids.push_back(id);
  }
  b->release(2);  // a hole: the survivors are not packed
  ids.erase(ids.begin() + 2);
  b->grow(3, 4);
  b->prepare_batch(ids);
  for (int layer = 0; layer < b->model().num_layers; ++layer) {
    const KvView v = b->layer_view(layer);
    if (v.layout == KvLayout::paged) {
      EXPECT_EQ(v.seq_base_index, nullptr);
      continue;
    }
    // kvlab's own contiguous families must have it; another (the test-only bump backend, with
    // K and V planes of per-sequence size) may lack it, and FlashInfer then refuses its views.
    const bool required = GetParam().starts_with("contiguous") || GetParam().starts_with("vmm");
    if (!required && v.seq_base_index == nullptr) continue;
    ASSERT_NE(v.seq_base_index, nullptr) << "layer " << layer;
    ASSERT_GT(v.base_granule, 0);
    EXPECT_EQ(v.token_stride % v.base_granule, 0);
    const std::size_t elem = size_of(v.dtype);
    for (std::size_t s = 0; s < ids.size(); ++s) {
      const std::size_t offset = static_cast<std::size_t>(v.seq_base_index[s]) * v.base_granule * elem;
      EXPECT_EQ(v.k_seq[s], static_cast<std::byte*>(v.k_base) + offset) << "layer " << layer << " sequence " << s;
      EXPECT_EQ(v.v_seq[s], static_cast<std::byte*>(v.v_base) + offset) << "layer " << layer << " sequence " << s;
    }
  }
  for (SeqId id : ids) b->release(id);
}

/// One bad call and the error every backend must give for it (the front door's, alloc/backend/kv_backend.cpp).
struct BadCall {
  const char* what;
  std::function<void(KvBackend&)> call;
  std::string error;
};

/// Every bad call of the front door, for backend `b` (which holds sequence 1 of 10 tokens).
std::vector<BadCall> front_door_bad_calls(const KvBackend& b) {
  static const std::vector<std::int32_t> three_ids = {1, 2, 3};
  static const SeqId unknown = 99;
  return {
      {"negative initial tokens",
       [](KvBackend& k) {
         k.admit(2, {10, 20}, -1);
       },
       "initial tokens must not be negative"},
      {"negative prompt",
       [](KvBackend& k) {
         k.admit(2, {-1, 20}, 0);
       },
       "prompt tokens must not be negative"},
      {"final below initial",
       [](KvBackend& k) {
         k.admit(2, {10, 5}, 10);
       },
       "final tokens must be at least the initial tokens"},
      {"final past max_seq_len",
       [](KvBackend& k) {
         k.admit(2, {10, 129}, 10);
       },
       "sequence of 129 tokens exceeds max_seq_len 128"},
      {"too few token ids",
       [&](KvBackend& k) {
         k.admit(2, {10, 20, three_ids}, 10);
       },
       "3 prompt token ids for a prompt of 10 tokens"},
      {"can_admit checks too",
       [](KvBackend& k) {
         (void)k.can_admit({10, 5}, 10);
       },
       "final tokens must be at least the initial tokens"},
      {"cached_prefix_tokens checks too",
       [](KvBackend& k) {
         (void)k.cached_prefix_tokens({10, 200});
       },
       "sequence of 200 tokens exceeds max_seq_len 128"},
      {"duplicate id",
       [](KvBackend& k) {
         k.admit(1, {10, 20}, 10);
       },
       "sequence 1 already exists"},
      {"grow unknown", [&](KvBackend& k) { k.grow(unknown, 1); }, "unknown sequence 99"},
      {"can_grow unknown", [&](KvBackend& k) { (void)k.can_grow(unknown, 1); }, "unknown sequence 99"},
      {"negative growth", [](KvBackend& k) { k.grow(1, -1); }, "growth must not be negative"},
      {"try_grow unknown", [&](KvBackend& k) { (void)k.try_grow(unknown, 1); }, "unknown sequence 99"},
      {"negative try_grow", [](KvBackend& k) { (void)k.try_grow(1, -1); }, "growth must not be negative"},
      {"fork unknown parent", [&](KvBackend& k) { k.fork(unknown, 5); }, "unknown sequence 99"},
      {"fork onto a live id", [](KvBackend& k) { k.fork(1, 1); }, "sequence 1 already exists"},
      {"release unknown", [&](KvBackend& k) { k.release(unknown); }, "unknown sequence 99"},
      {"length unknown", [&](KvBackend& k) { (void)k.length(unknown); }, "unknown sequence 99"},
      {"cached_tokens unknown", [&](KvBackend& k) { (void)k.cached_tokens(unknown); }, "unknown sequence 99"},
      {"is_swapped unknown", [&](KvBackend& k) { (void)k.is_swapped(unknown); }, "unknown sequence 99"},
      {"prepare_batch unknown",
       [&](KvBackend& k) {
         (void)k.prepare_batch({&unknown, 1});
       },
       "unknown sequence 99"},
      {"prefetch unknown",
       [&](KvBackend& k) {
         k.prefetch({&unknown, 1});
       },
       "unknown sequence 99"},
      {"view without storage", [](KvBackend& k) { (void)k.layer_view(0); },
       "accounting-only backend has no KV to view"},
      {"swap in a resident sequence", [](KvBackend& k) { k.swap_in(1); },
       b.supports_swap() ? "sequence 1 is not swapped out" : "backend " + b.name() + " cannot swap"},
      {"view before any batch", [](KvBackend& k) { (void)k.layer_view(0); },
       b.has_storage() ? "no prepared batch to view" : "accounting-only backend has no KV to view"},
      {"blocked spec checked too",
       [](KvBackend& k) {
         const SequenceSpec bad{10, 200};
         (void)k.breakdown(&bad);
       },
       "sequence of 200 tokens exceeds max_seq_len 128"},
  };
}

TEST_P(BackendConformance, BadInputsGetTheSameErrorFromTheFrontDoor) {
  auto b = make(1000);
  b->admit(1, {10, 20}, 10);
  const std::vector<BadCall> calls = front_door_bad_calls(*b);
  const MemoryBreakdown before = b->breakdown();
  for (const BadCall& c : calls) {
    try {
      c.call(*b);
      ADD_FAILURE() << c.what << ": no error";
    } catch (const InvalidArgument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("alloc/backend/kv_backend.cpp:"), std::string::npos)
          << c.what << ": not the front door's: " << msg;
      EXPECT_NE(msg.find(c.error), std::string::npos) << c.what << ": " << msg;
    }
  }
  // Nothing changed.
  EXPECT_EQ(b->num_sequences(), 1u);
  EXPECT_EQ(b->length(1), 10);
  EXPECT_EQ(b->breakdown().allocated(), before.allocated());
}

TEST_P(BackendConformance, SwappedSequencesAreNotResident) {
  auto b = make(1000);
  b->admit(1, {10, 20}, 10);
  if (!b->supports_swap()) {
    EXPECT_THROW(b->swap_out(1), InvalidArgument);
    return;
  }
  b->swap_out(1);
  const SeqId one = 1;
  for (const auto& call : std::vector<std::function<void()>>{[&] { b->swap_out(1); }, [&] { b->grow(1, 1); },
                                                             [&] { (void)b->try_grow(1, 1); }, [&] { b->fork(1, 2); },
                                                             [&] {
                                                               (void)b->prepare_batch({&one, 1});
                                                             },
                                                             [&] {
                                                               b->prefetch({&one, 1});
                                                             }}) {
    try {
      call();
      ADD_FAILURE() << "a swapped-out sequence was used";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("alloc/backend/kv_backend.cpp:"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("sequence 1 is"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(b->is_swapped(1));
  b->release(1);  // a swapped-out sequence can always be released
  EXPECT_EQ(b->num_sequences(), 0u);
}

TEST_P(BackendConformance, ViewsNeedAFreshBatch) {
  auto b = make(1000, &host_memory_resource());
  b->admit(1, {10, 20}, 10);
  const SeqId one = 1;
  b->prepare_batch({&one, 1});
  EXPECT_NO_THROW((void)b->layer_view(0));
  b->grow(1, 1);  // any mutation may move what the batch points at
  EXPECT_THROW((void)b->layer_view(0), InvalidArgument);
  b->prepare_batch({&one, 1});
  EXPECT_NO_THROW((void)b->layer_view(0));
  b->release(1);
}

TEST_P(BackendConformance, KvSurvivesGrowthAndFork) {
  auto b = make(1500, &host_memory_resource());
  KvIntegrity kv(*b);
  std::vector<std::uint64_t> tags(40);
  for (std::size_t t = 0; t < tags.size(); ++t) tags[t] = KvIntegrity::positional(7, static_cast<std::int64_t>(t));
  b->admit(1, {30, 40}, 30);
  kv.write(1, 0, std::span(tags).first(30));
  b->grow(1, 5);
  kv.write(1, 30, std::span(tags).subspan(30, 5));
  b->fork(1, 2);
  kv.fork(1, 2);
  b->grow(2, 3);  // the child writes past the shared part; the parent must not see it
  const std::uint64_t child_tag = KvIntegrity::positional(8, 35);
  kv.write(2, 35, {&child_tag, 1});
  b->grow(1, 3);
  kv.write(1, 35, std::span(tags).subspan(35, 3));
  const std::vector<SeqId> both = {1, 2};
  EXPECT_EQ(kv.verify(both), 0);
  EXPECT_GT(kv.tokens_checked(), 70);
  b->release(1);
  b->release(2);
  EXPECT_EQ(b->breakdown().allocated(), 0u);
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, BackendConformance, ::testing::ValuesIn(backend_forms()), [](const auto& info) {
  std::string n = info.param;
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
});

TEST(BackendFactory, UnknownNameFailsLoudly) {
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 1 << 20;
  try {
    (void)make_backend("cuckoo", o);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("contiguous-max"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)make_backend("contiguous-minimal", o), InvalidArgument);
}

// What a backend calls itself in every output, the factory builds again (issue 30: "paged-b16" was
// printed and refused).
TEST_P(BackendConformance, PrintedNamesRoundTrip) {
  auto b = make(1000);
  const std::string printed = b->name();
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 1000 * o.model.kv_bytes_per_token();
  o.max_seq_len = 128;
  EXPECT_EQ(make_backend(printed, o)->name(), printed) << GetParam();
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

TEST(BackendFactory, VmmNamesAndOptions) {
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 64ull << 20;
  o.max_seq_len = 128;
  EXPECT_EQ(make_backend("vmm-64k", o)->name(), "vmm-64k");
  // Every option shows in the name, in one canonical order, and the name builds the same backend.
  for (const auto& [asked, canonical] : std::vector<std::pair<std::string, std::string>>{
           {"vmm-16k-nodefer-overlap", "vmm-16k-overlap-nodefer"},
           {"vmm-16k-prefix-eager8-mega", "vmm-16k-mega-eager8-prefix"},
           {"vmm-2m-mega-overlap-eager32-nodefer-prefix", "vmm-2m-mega-overlap-eager32-nodefer-prefix"}}) {
    const std::string name = make_backend(asked, o)->name();
    EXPECT_EQ(name, canonical) << asked;
    EXPECT_EQ(make_backend(name, o)->name(), name);
  }
  EXPECT_NO_THROW((void)make_backend("vmm-2m-mega", o));
  EXPECT_NO_THROW((void)make_backend("vmm-16k-overlap-eager32-nodefer", o));
  for (const char* bad : {"vmm-6k", "vmm-2k", "vmm-64", "vmm-0k", "vmm-k", "vmm-64k-turbo", "vmm-64k-eager0", "vmm-"}) {
    try {
      (void)make_backend(bad, o);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW((void)make_backend("paged-16-lru", o), InvalidArgument);
  EXPECT_THROW((void)make_backend("paged-0", o), InvalidArgument);
  EXPECT_THROW((void)make_backend("paged-1025", o), InvalidArgument);
  EXPECT_NO_THROW((void)make_backend("paged-1024-radix", o));
}

}  // namespace
}  // namespace kvlab
