// The vmm backend over the POSIX driver: data in virtually contiguous slots, pages mapped on
// demand and reused, exact accounting, attention equal to the contiguous backend's, nothing left
// behind at teardown.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "alloc/contiguous/contiguous_backend.hpp"
#include "alloc/core/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/reference_attention.hpp"
#include "tests/support/kv_fixture.hpp"
#include "tests/vmm/vmm_test_support.hpp"

namespace kvlab {
namespace {

using testing::kKiB;
using testing::kTinyToken;
using testing::tiny_vmm;

std::shared_ptr<PosixVmDriver> posix(std::size_t bytes) { return std::make_shared<PosixVmDriver>(bytes); }

class VmmLayouts : public ::testing::TestWithParam<VmmLayout> {};

TEST_P(VmmLayouts, DataSurvivesGrowthAcrossPageBoundaries) {
  // 4 KiB pages: 32 tokens of one per-layer tensor, 16 of a megacache tensor. Every grow of 7
  // tokens crosses a boundary now and then; earlier tokens must never move or change.
  auto driver = posix(512 * kKiB);
  VmmBackend b(tiny_vmm(4 * kKiB, 512 * kKiB, driver, GetParam()));
  b.admit(1, {5, 300}, 5);
  b.admit(2, {40, 300}, 40);
  testing::write_tokens(b, 1, 1, 0, 5);
  testing::write_tokens(b, 2, 2, 0, 40);
  const std::byte* base1 = b.slot_base(0, b.slot_of(1));
  std::int64_t len1 = 5, len2 = 40;
  for (int step = 0; step < 35; ++step) {
    b.grow(1, 7);
    testing::write_tokens(b, 1, 1, len1, len1 + 7);
    len1 += 7;
    if (step % 3 == 0) {
      b.grow(2, 5);
      testing::write_tokens(b, 2, 2, len2, len2 + 5);
      len2 += 5;
    }
    ASSERT_EQ(b.slot_base(0, b.slot_of(1)), base1) << "a slot never moves";
  }
  EXPECT_EQ(testing::count_mismatches(b, 1, 1, len1), 0);
  EXPECT_EQ(testing::count_mismatches(b, 2, 2, len2), 0);
  // Exactly the pages the lengths need, in every tensor.
  const auto pages_for = [&](std::int64_t n) {
    return (n * static_cast<std::int64_t>(b.token_bytes_per_tensor()) + 4095) / 4096;
  };
  EXPECT_EQ(b.mapped_pages(1), b.num_tensors() * pages_for(len1));
  EXPECT_EQ(b.mapped_pages(2), b.num_tensors() * pages_for(len2));
  EXPECT_EQ(driver->usage().mappings, static_cast<std::size_t>(b.stats().mapped_pages));
}

TEST_P(VmmLayouts, AttentionThroughTheVmmViewEqualsTheContiguousBackend) {
  const std::vector<std::int64_t> lens = {37, 1, 130, 64, 91};
  ContiguousConfig cc;
  cc.model = testing::tiny_model();
  cc.capacity_bytes = 4096 * kTinyToken;
  cc.max_seq_len = 256;
  cc.policy = ReservationPolicy::oracle;
  cc.memory = &host_memory_resource();
  ContiguousBackend contiguous(cc);
  VmmBackend vmm(tiny_vmm(4 * kKiB, 1024 * kKiB, posix(1024 * kKiB), GetParam(), 256, 8));
  std::vector<SeqId> ids;
  for (std::size_t i = 0; i < lens.size(); ++i) {
    ids.push_back(static_cast<SeqId>(i));
    contiguous.admit(ids.back(), {lens[i], lens[i]}, lens[i]);
    vmm.admit(ids.back(), {1, lens[i]}, 1);
    vmm.grow(ids.back(), lens[i] - 1);  // grown, not admitted whole: pages mapped along the way
  }
  const PreparedBatch pc = contiguous.prepare_batch(ids);
  const PreparedBatch pv = vmm.prepare_batch(ids);
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (int layer = 0; layer < 2; ++layer) {
    const auto cv = as_contiguous<half_t>(contiguous.layer_view(layer));
    const auto vv = as_contiguous<half_t>(vmm.layer_view(layer));
    for (std::size_t s = 0; s < lens.size(); ++s)
      for (std::int64_t t = 0; t < lens[s]; ++t)
        for (int h = 0; h < 2; ++h)
          for (int d = 0; d < 32; ++d) {
            const half_t k = from_float<half_t>(uni(rng)), v = from_float<half_t>(uni(rng));
            cv.k(static_cast<int>(s), t, h)[d] = vv.k(static_cast<int>(s), t, h)[d] = k;
            cv.v(static_cast<int>(s), t, h)[d] = vv.v(static_cast<int>(s), t, h)[d] = v;
          }
  }
  std::vector<float> q(lens.size() * 4 * 32);
  for (auto& x : q) x = uni(rng);
  for (int layer = 0; layer < 2; ++layer) {
    AttentionParams p;
    p.batch = static_cast<int>(lens.size());
    p.num_q_heads = 4;
    p.num_kv_heads = 2;
    p.head_dim = 32;
    p.scale = 0.17677669f;
    p.q = q.data();
    std::vector<float> out_c(q.size(), NAN), out_v(q.size(), NAN);
    p.seq_lens = pc.seq_lens;
    p.out = out_c.data();
    host_attention(p, contiguous.layer_view(layer));
    p.seq_lens = pv.seq_lens;
    p.out = out_v.data();
    host_attention(p, vmm.layer_view(layer));
    std::vector<double> ref;
    reference_attention(p, as_contiguous<half_t>(vmm.layer_view(layer)), ref);
    testing::expect_matches_reference(out_c, ref, {}, "contiguous");
    testing::expect_matches_reference(out_v, ref, {}, "vmm");
    for (std::size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(out_c[i], out_v[i], 1e-6) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, VmmLayouts, ::testing::Values(VmmLayout::per_layer, VmmLayout::megacache),
                         [](const auto& info) {
                           return info.param == VmmLayout::per_layer ? "per_layer" : "megacache";
                         });

TEST(VmmBackend, MegacacheInterleavesLayersInsideAToken) {
  VmmBackend b(tiny_vmm(4 * kKiB, 512 * kKiB, posix(512 * kKiB), VmmLayout::megacache));
  EXPECT_EQ(b.num_tensors(), 2);
  EXPECT_EQ(b.token_bytes_per_tensor(), 256u);  // 2 layers x 2 heads x 32 x fp16
  b.admit(1, {3, 3}, 3);
  const SeqId one[] = {1};
  b.prepare_batch(one);
  const KvView l0 = b.layer_view(0), l1 = b.layer_view(1);
  EXPECT_EQ(l0.token_stride, 2 * 2 * 32);
  EXPECT_EQ(static_cast<const std::byte*>(l1.k_seq[0]) - static_cast<const std::byte*>(l0.k_seq[0]), 128);
  EXPECT_EQ(b.name(), "vmm-4k-mega-nodefer");  // VmmConfig's default: reclaim at release
}

TEST(VmmBackend, PagesAreReusedAfterFree) {
  auto driver = posix(64 * kKiB);
  VmmBackend b(tiny_vmm(4 * kKiB, 64 * kKiB, driver));  // 16 pages = 4 rows of 32 tokens
  EXPECT_EQ(b.num_pages(), 16);
  b.admit(1, {128, 128}, 128);  // all 16 pages
  EXPECT_EQ(b.free_pages(), 0);
  testing::write_tokens(b, 1, 1, 0, 128);
  EXPECT_FALSE(b.can_admit({1, 1}, 1));
  EXPECT_THROW(b.admit(2, {1, 1}, 1), OutOfMemory);
  b.release(1);
  EXPECT_EQ(b.free_pages(), 16);
  EXPECT_EQ(driver->usage().mappings, 0u);
  // The same physical pages serve the next sequence; no handle is ever created again.
  const std::uint64_t creates = driver->call_count(VmCall::create);
  b.admit(2, {100, 128}, 100);
  testing::write_tokens(b, 2, 2, 0, 100);
  b.grow(2, 28);
  testing::write_tokens(b, 2, 2, 100, 128);
  EXPECT_EQ(testing::count_mismatches(b, 2, 2, 128), 0);
  EXPECT_EQ(driver->call_count(VmCall::create), creates);
  EXPECT_EQ(b.free_pages(), 0);
}

TEST(VmmBackend, NothingIsLeftMappedOrReservedAtTeardown) {
  auto driver = posix(256 * kKiB);
  void* reservation = nullptr;
  std::size_t virtual_bytes = 0;
  {
    VmmConfig c = tiny_vmm(4 * kKiB, 256 * kKiB, driver);
    c.deferred_reclamation = true;
    c.eager_tokens = 40;
    VmmBackend b(c);
    virtual_bytes = b.stats().virtual_bytes;
    reservation = b.slot_base(0, 0);
    EXPECT_EQ(virtual_bytes, 4u * 8 * 512 * 128);  // tensors x slots x max_seq_len x token bytes
    b.admit(1, {50, 60}, 50);
    b.admit(2, {10, 400}, 10);
    b.fork(1, 3);
    b.grow(2, 100);
    b.release(1);  // cached (deferred reclamation)
    EXPECT_GT(driver->usage().mappings, 0u);
    EXPECT_GT(testing::maps_lines_containing("memfd:kvlab-vmm"), 0);
    EXPECT_TRUE(testing::maps_overlap(reservation, virtual_bytes));
  }
  EXPECT_TRUE(driver->usage().empty()) << driver->usage().mappings << " mappings, " << driver->usage().handles
                                       << " handles, " << driver->usage().reservations << " reservations";
  EXPECT_EQ(testing::maps_lines_containing("memfd:kvlab-vmm"), 0);
  EXPECT_FALSE(testing::maps_overlap(reservation, virtual_bytes));
}

TEST(VmmBackend, BreakdownSplitsMappedPagesByFinalTokens) {
  // Per-layer, 4 KiB pages = 32 tokens per tensor; a row of 4 tensors is 32 tokens of capacity.
  VmmConfig c = tiny_vmm(4 * kKiB, 256 * kKiB, nullptr);  // accounting only: same bookkeeping
  VmmBackend b(c);
  EXPECT_FALSE(b.has_storage());
  EXPECT_EQ(b.breakdown().capacity, 256 * kKiB);
  b.admit(1, {10, 40}, 10);  // 1 row mapped: 10 held, 22 reserved (will reach 40), 0 internal
  MemoryBreakdown m = b.breakdown();
  EXPECT_EQ(m.token_states, 10 * kTinyToken);
  EXPECT_EQ(m.reserved, 22 * kTinyToken);
  EXPECT_EQ(m.internal_fragmentation, 0u);
  b.grow(1, 30);  // 40 tokens: 2 rows, all 40 held, 24 never filled
  m = b.breakdown();
  EXPECT_EQ(m.token_states, 40 * kTinyToken);
  EXPECT_EQ(m.reserved, 0u);
  EXPECT_EQ(m.internal_fragmentation, 24 * kTinyToken);
  b.release(1);
  EXPECT_EQ(b.breakdown().allocated(), 0u);
}

TEST(VmmBackend, EagerPagesAreReservedOrInternalAndNeverCauseOutOfMemory) {
  VmmConfig c = tiny_vmm(4 * kKiB, 64 * kKiB, nullptr);  // 4 rows
  c.eager_tokens = 64;
  VmmBackend b(c);
  b.admit(1, {10, 50}, 10);  // needs 1 row, eagerly maps rows_for(74) = 3
  EXPECT_EQ(b.mapped_pages(1), 12);
  MemoryBreakdown m = b.breakdown();
  EXPECT_EQ(m.token_states, 10 * kTinyToken);
  EXPECT_EQ(m.reserved, 40 * kTinyToken);                // up to final_tokens
  EXPECT_EQ(m.internal_fragmentation, 46 * kTinyToken);  // 96 mapped - 50 eventually
  // The other 3 rows' worth of capacity are still admittable: eager pages are reclaimed on demand.
  EXPECT_TRUE(b.can_admit({96, 96}, 96));
  b.admit(2, {96, 96}, 96);  // takes the 1 free row and 2 reclaimed from sequence 1
  EXPECT_EQ(b.mapped_pages(1), 4);
  EXPECT_EQ(b.stats().reclaimed_pages, 8);
  EXPECT_FALSE(b.can_grow(1, 30));
  EXPECT_THROW(b.grow(1, 30), OutOfMemory);
  EXPECT_EQ(b.length(1), 10);
  testing::expect_consistent(b);
}

TEST(VmmBackend, DeferredReclamationKeepsPagesForTheNextSequenceAndCountsThemFree) {
  auto driver = posix(64 * kKiB);
  VmmConfig c = tiny_vmm(4 * kKiB, 64 * kKiB, driver);  // 4 rows
  c.deferred_reclamation = true;
  VmmBackend b(c);
  b.admit(1, {64, 64}, 64);  // 2 rows
  testing::write_tokens(b, 1, 1, 0, 64);
  const int slot = b.slot_of(1);
  b.release(1);
  VmmStats s = b.stats();
  EXPECT_EQ(s.cached_pages, 8);
  EXPECT_EQ(s.critical_unmaps, 0);
  EXPECT_EQ(driver->usage().mappings, 8u);
  EXPECT_EQ(b.breakdown().allocated(), 0u) << "cached pages count as free";
  // The next sequence takes the slot with the cache: no map at all.
  const std::int64_t maps = s.critical_maps;
  b.admit(2, {60, 64}, 60);
  EXPECT_EQ(b.slot_of(2), slot);
  s = b.stats();
  EXPECT_EQ(s.critical_maps, maps);
  EXPECT_EQ(s.reused_pages, 8);
  EXPECT_EQ(s.cached_pages, 0);
  b.release(2);
  // Memory pressure: a sequence in another slot needs 4 rows, so the cache is unmapped for it.
  b.admit(3, {1, 1}, 1);  // takes the cached slot (1 of its 2 rows used)
  b.admit(4, {96, 96}, 96);
  EXPECT_EQ(b.stats().reclaimed_pages, 4);  // the cached row beyond sequence 3's length
  EXPECT_EQ(b.free_pages(), 0);
  EXPECT_EQ(driver->usage().mappings, 16u);
  testing::expect_consistent(b);
}

/// Two backends given the same operations hold the same pages and count the same.
void expect_same_books(const VmmBackend& rows, const VmmBackend& pages, const std::vector<SeqId>& live) {
  ASSERT_EQ(rows.free_pages(), pages.free_pages());
  for (const SeqId id : live) ASSERT_EQ(rows.mapped_pages(id), pages.mapped_pages(id)) << "sequence " << id;
  const MemoryBreakdown a = rows.breakdown(), b = pages.breakdown();
  ASSERT_EQ(a.token_states, b.token_states);
  ASSERT_EQ(a.internal_fragmentation, b.internal_fragmentation);
  ASSERT_EQ(a.reserved, b.reserved);
  const VmmStats x = rows.stats(), y = pages.stats();
  ASSERT_EQ(x.critical_maps, y.critical_maps);
  ASSERT_EQ(x.critical_unmaps, y.critical_unmaps);
  ASSERT_EQ(x.reclaimed_pages, y.reclaimed_pages);
  ASSERT_EQ(x.reused_pages, y.reused_pages);
  ASSERT_EQ(x.cached_pages, y.cached_pages);
}

/// Without a driver the backend maps and reclaims a whole row at a time (SlotArena::map_row,
/// unmap_row); with one, page by page. The same seeded workload (admissions, growth across page
/// rows, releases, forks, memory pressure that reclaims cached rows, out of memory; with and without
/// deferred reclamation, and with background mapping, which leaves partial rows) must leave both
/// with the same books after every operation: free pages, each sequence's pages, the breakdown and
/// every counter.
TEST(VmmBackend, RowBookkeepingWithoutADriverMatchesPageByPageWithOneAlsoUnderOverlap) {
  for (const int variant : {0, 1, 2}) {
    const bool defer = variant != 1;
    VmmConfig c = tiny_vmm(4 * kKiB, 96 * kKiB, nullptr, VmmLayout::per_layer, 256, 5);  // 24 pages, 4 tensors
    c.deferred_reclamation = defer;
    // The background mapper maps (and reclaims) page by page: partial rows. Each step waits for it,
    // so both backends see the same order.
    c.overlap = variant == 2;
    c.eager_tokens = variant == 2 ? 8 : 0;
    VmmBackend rows(c);
    c.driver = posix(96 * kKiB);
    VmmBackend pages(c);
    std::mt19937 rng(11u + static_cast<unsigned>(variant));
    std::vector<SeqId> live;
    SeqId next = 1;
    int ooms = 0;
    for (int step = 0; step < 2000; ++step) {
      const unsigned op = rng() % 8;
      const auto both = [&](auto&& f) {
        bool threw_rows = false, threw_pages = false;
        try {
          f(rows);
        } catch (const OutOfMemory&) {
          threw_rows = true;
        }
        try {
          f(pages);
        } catch (const OutOfMemory&) {
          threw_pages = true;
        }
        EXPECT_EQ(threw_rows, threw_pages) << "step " << step;
        ooms += threw_rows;
        return !threw_rows;
      };
      if (op < 2 || live.empty()) {
        const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 60);
        if (both([&](VmmBackend& b) { b.admit(next, {n, n + 40}, n); })) live.push_back(next);
        ++next;
      } else if (op < 6) {
        const SeqId id = live[rng() % live.size()];
        const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 12);
        if (rows.length(id) + n <= 256) both([&](VmmBackend& b) { b.grow(id, n); });
      } else if (op == 6 && c.overlap && rng() % 2 == 0) {
        const std::int64_t growth = 1 + static_cast<std::int64_t>(rng() % 40);
        both([&](VmmBackend& b) {
          b.prefetch(live, growth);
          b.begin_step();
        });
      } else if (op == 6) {
        const SeqId id = live[rng() % live.size()];
        if (both([&](VmmBackend& b) { b.fork(id, next); })) live.push_back(next);
        ++next;
      } else {
        const std::size_t k = rng() % live.size();
        both([&](VmmBackend& b) { b.release(live[k]); });
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      }
      expect_same_books(rows, pages, live);
      ASSERT_FALSE(::testing::Test::HasFailure()) << "step " << step;
    }
    EXPECT_GT(ooms, 10) << "variant " << variant << ": the workload never ran out of memory";
    if (defer) {
      EXPECT_GT(rows.stats().reclaimed_pages, 40) << "deferred reclamation never reclaimed";
    }
    testing::expect_consistent(rows);
    testing::expect_consistent(pages);
  }
}

TEST(VmmBackend, ForkCopiesTheParentsTokens) {
  auto driver = posix(256 * kKiB);
  VmmBackend b(tiny_vmm(4 * kKiB, 256 * kKiB, driver));
  b.admit(1, {45, 90}, 45);
  testing::write_tokens(b, 1, 1, 0, 45);
  b.fork(1, 2);
  EXPECT_EQ(b.length(2), 45);
  EXPECT_NE(b.slot_of(2), b.slot_of(1));
  EXPECT_EQ(testing::count_mismatches(b, 2, 1, 45), 0);
  testing::write_tokens(b, 2, 7, 0, 45);  // the copy is independent
  EXPECT_EQ(testing::count_mismatches(b, 1, 1, 45), 0);
  EXPECT_FALSE(b.supports_swap());
  EXPECT_THROW(b.swap_out(1), InvalidArgument);
}

TEST(VmmBackend, SlotsBoundTheBatch) {
  VmmBackend b(tiny_vmm(4 * kKiB, 256 * kKiB, nullptr, VmmLayout::per_layer, 512, 2));
  b.admit(1, {1, 1}, 1);
  b.admit(2, {0, 1}, 0);
  EXPECT_FALSE(b.can_admit({1, 1}, 1));
  EXPECT_THROW(b.admit(3, {1, 1}, 1), OutOfMemory);
  EXPECT_THROW(b.fork(1, 3), OutOfMemory);
  EXPECT_FALSE(b.can_grow(1, 512));  // past max_seq_len
  EXPECT_THROW(b.grow(1, 512), OutOfMemory);
  b.release(2);
  EXPECT_TRUE(b.can_admit({1, 1}, 1));
}

TEST(VmmBackend, ConfigErrorsAreInvalidArguments) {
  EXPECT_THROW(VmmBackend(tiny_vmm(6 * kKiB, 256 * kKiB, nullptr)), InvalidArgument);   // not 4 KiB multiple
  EXPECT_THROW(VmmBackend(tiny_vmm(64 * kKiB, 128 * kKiB, nullptr)), InvalidArgument);  // < 1 page per tensor
  EXPECT_THROW(VmmBackend(tiny_vmm(0, 128 * kKiB, nullptr)), InvalidArgument);
  VmmBackend ok(tiny_vmm(64 * kKiB, 256 * kKiB, nullptr));
  EXPECT_EQ(ok.name(), "vmm-64k-nodefer");
  EXPECT_EQ(page_size_name(std::size_t{2} << 20), "2m");
  EXPECT_EQ(page_size_name(12 * kKiB), "12k");
}

TEST(VmmBackend, AccountingOnlyAtTwelveGibScale) {
  // The replayer's memory mode: OPT-13B, 12 GiB, no bytes, no reservation.
  VmmConfig c;
  c.model = model_preset("opt-13b");
  c.capacity_bytes = std::size_t{12} << 30;
  c.page_bytes = std::size_t{2} << 20;
  c.max_seq_len = 2048;
  c.deferred_reclamation = true;
  VmmBackend b(c);
  EXPECT_EQ(b.stats().virtual_bytes, 0u);
  // 2 MiB pages hold 204.8 tokens of one layer's K: 800 tokens need 4 rows of 80 pages.
  for (SeqId id = 0; id < 15; ++id) b.admit(id, {500, 900}, 500);
  for (int step = 0; step < 300; ++step)
    for (SeqId id = 0; id < 15; ++id) b.grow(id, 1);
  const MemoryBreakdown m = b.breakdown();
  EXPECT_EQ(m.token_states, 15u * 800 * c.model.kv_bytes_per_token());
  EXPECT_EQ(b.stats().mapped_pages, 15 * 4 * 80);
  testing::expect_consistent(b);
  for (SeqId id = 0; id < 15; ++id) b.release(id);
  EXPECT_EQ(b.breakdown().allocated(), 0u);
}

}  // namespace
}  // namespace kvlab
