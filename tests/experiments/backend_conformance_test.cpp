// Shared test bodies, instantiated over every backend the factory knows: the contract of
// alloc/kv_backend.hpp (all-or-nothing mutations, side-effect-free questions, accounting that sums
// to the capacity, memory back to zero) holds for each of them.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "alloc/error.hpp"
#include "alloc/statistics_adaptor.hpp"
#include "experiments/backend_factory.hpp"
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

INSTANTIATE_TEST_SUITE_P(EveryBackend, BackendConformance, ::testing::ValuesIn(backend_forms()),
                         [](const auto& info) {
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

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

TEST(BackendFactory, VmmNamesAndOptions) {
  BackendOptions o;
  o.model = testing::tiny_model();
  o.capacity_bytes = 64ull << 20;
  o.max_seq_len = 128;
  EXPECT_EQ(make_backend("vmm-64k", o)->name().rfind("vmm", 0), 0u);
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
