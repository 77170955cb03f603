// The SIMT attention and block-copy kernels (the source the CUDA build ships) run under the SIMT
// emulator and checked against the float64 reference: fresh random KV per case, output poisoned
// first, every element checked, NaN fails. Sizes stay small: the emulator runs one host thread
// per CUDA thread and every barrier or shuffle is a real rendezvous.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "alloc/core/error.hpp"
#include "kernels/simt/emulated_attention.hpp"
#include "kernels/simt/emulator.hpp"
#include "tests/support/kv_fixture.hpp"

namespace kvlab {
namespace {

using testing::KvFixture;
using testing::KvShape;

struct Case {
  KvShape shape;
  KvLayout layout = KvLayout::contiguous;
  int partitions = 1;
  EmulatedLaunchOptions launch;
};

template <class T>
const char* dtype_name() {
  return std::is_same_v<T, float> ? "f32" : std::is_same_v<T, half_t> ? "f16" : "bf16";
}

std::string describe(const Case& c, const char* dtype) {
  std::string s = std::string(dtype) +
                  (c.layout == KvLayout::paged ? " paged bs=" + std::to_string(c.shape.block_size) : " contiguous") +
                  " D=" + std::to_string(c.shape.head_dim) + " heads=" + std::to_string(c.shape.num_q_heads) + "/" +
                  std::to_string(c.shape.num_kv_heads) + " P=" + std::to_string(c.partitions) +
                  " threads=" + std::to_string(c.launch.block_threads) +
                  (c.shape.q_lens.empty() ? " decode" : " prefill") + " lens=";
  for (std::size_t i = 0; i < c.shape.seq_lens.size(); ++i)
    s += std::to_string(c.shape.seq_lens[i]) + (c.shape.q_lens.empty() ? "" : "/" + std::to_string(c.shape.q_lens[i])) +
         ",";
  return s;
}

template <class T>
void run_case(const Case& c) {
  KvFixture<T> f(c.shape);
  const std::string what = describe(c, dtype_name<T>());
  SCOPED_TRACE(what);
  const KvView view = c.layout == KvLayout::paged ? erase(f.paged(), c.shape.num_kv_heads, c.shape.head_dim)
                                                  : erase(f.contiguous(), c.shape.num_kv_heads, c.shape.head_dim);
  f.poison_output();
  emulated_attention(f.params(), view, c.partitions, c.launch);
  testing::expect_matches_reference(f.out(), f.reference(), {}, what);
}

void run_case_any(DType dtype, const Case& c) {
  switch (dtype) {
    case DType::f16:
      return run_case<half_t>(c);
    case DType::bf16:
      return run_case<bfloat16_t>(c);
    case DType::f32:
      return run_case<float>(c);
  }
}

constexpr DType kDtypes[] = {DType::f16, DType::bf16, DType::f32};

/// Random lengths in [lo, hi] for a prime batch, from the case's seed.
std::vector<std::int32_t> random_lens(int batch, int lo, int hi, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len(lo, hi);
  std::vector<std::int32_t> v(batch);
  for (auto& x : v) x = len(rng);
  return v;
}

TEST(EmulatedAttention, DecodeEveryDtypeGqaRatioAndHeadDim) {
  std::uint64_t seed = 100;
  int i = 0;
  for (DType dt : kDtypes)
    for (int ratio : {1, 4, 8})
      for (int dim : {32, 64, 128, 256})
        for (KvLayout layout : {KvLayout::contiguous, KvLayout::paged}) {
          Case c;
          c.shape.seq_lens = random_lens(5, 1, 45, ++seed);
          c.shape.num_kv_heads = ratio == 1 ? 2 : 1;
          c.shape.num_q_heads = c.shape.num_kv_heads * ratio;
          c.shape.head_dim = dim;
          c.shape.block_size = 7;
          c.shape.seed = seed;
          c.layout = layout;
          c.partitions = std::array{1, 2, 3, 5}[(i + i / 4) % 4];
          ++i;
          run_case_any(dt, c);
        }
}

TEST(EmulatedAttention, PrefillEveryDtypeGqaRatioAndHeadDim) {
  std::uint64_t seed = 200;
  int i = 0;
  for (DType dt : kDtypes)
    for (int ratio : {1, 4, 8})
      for (int dim : {32, 64, 128, 256})
        for (KvLayout layout : {KvLayout::contiguous, KvLayout::paged}) {
          Case c;
          c.shape.q_lens = random_lens(3, 0, 5, ++seed);  // a sequence may have no new queries
          c.shape.q_lens[0] = std::max(c.shape.q_lens[0], 1);
          c.shape.seq_lens = random_lens(3, 0, 30, ++seed);
          for (int s = 0; s < 3; ++s) c.shape.seq_lens[s] += c.shape.q_lens[s];  // cached prefix + queries
          c.shape.num_kv_heads = 1;
          c.shape.num_q_heads = ratio;
          c.shape.head_dim = dim;
          c.shape.block_size = 3;
          c.shape.seed = seed;
          c.layout = layout;
          c.partitions = std::array{1, 3, 2, 5}[(i + i / 4) % 4];
          ++i;
          run_case_any(dt, c);
        }
}

TEST(EmulatedAttention, PagedBlockSizesDecodeAndPrefill) {
  std::uint64_t seed = 300;
  int i = 0;
  for (int bs : {1, 3, 7, 17})
    for (bool prefill : {false, true})
      for (int partitions : {1, 3}) {
        Case c;
        const int batch = prefill ? 3 : 7;
        c.shape.seq_lens = random_lens(batch, 1, 40, ++seed);
        if (prefill) {
          c.shape.q_lens = random_lens(batch, 1, 4, ++seed);
          for (int s = 0; s < batch; ++s) c.shape.seq_lens[s] += c.shape.q_lens[s] - 1;
        }
        c.shape.num_kv_heads = 2;
        c.shape.num_q_heads = 8;
        c.shape.head_dim = 64;
        c.shape.block_size = bs;
        c.shape.seed = seed;
        c.layout = KvLayout::paged;
        c.partitions = partitions;
        run_case_any(kDtypes[i++ % 3], c);
      }
}

TEST(EmulatedAttention, SplitKvPartitionsIncludingLongerThanTheSequence) {
  std::uint64_t seed = 400;
  int i = 0;
  for (int partitions : {1, 2, 3, 5})
    for (KvLayout layout : {KvLayout::contiguous, KvLayout::paged}) {
      Case c;
      // Short sequences: with 5 partitions of a 1..4-token sequence most partitions are empty.
      c.shape.seq_lens = {1, 2, 4, 70, 33};
      c.shape.num_kv_heads = 1;
      c.shape.num_q_heads = 4;
      c.shape.head_dim = 64;
      c.shape.block_size = 17;
      c.shape.seed = ++seed;
      c.layout = layout;
      c.partitions = partitions;
      run_case_any(kDtypes[i++ % 3], c);
    }
  // Prefill with more partitions than cached tokens, causal rows seeing few of them.
  Case c;
  c.shape.q_lens = {2, 3};
  c.shape.seq_lens = {2, 4};
  c.shape.num_kv_heads = 2;
  c.shape.num_q_heads = 4;
  c.shape.head_dim = 32;
  c.shape.block_size = 1;
  c.shape.seed = ++seed;
  c.layout = KvLayout::paged;
  c.partitions = 5;
  run_case<half_t>(c);
}

TEST(EmulatedAttention, OddThreadBlocksAndShuffledBlockOrder) {
  std::uint64_t seed = 500;
  for (unsigned threads : {2u, 48u, 96u, 128u}) {
    Case c;
    c.shape.seq_lens = random_lens(3, 5, 50, ++seed);
    c.shape.q_lens = {2, 1, 3};
    for (auto& l : c.shape.seq_lens) l += 3;
    c.shape.num_kv_heads = 2;
    c.shape.num_q_heads = 8;
    c.shape.head_dim = 64;
    c.shape.block_size = 7;
    c.shape.seed = seed;
    c.layout = KvLayout::paged;
    c.partitions = 2;
    c.launch.block_threads = threads;
    c.launch.shuffle_seed = seed;
    run_case<bfloat16_t>(c);
  }
}

TEST(EmulatedAttention, HeadDim256AndLongPrefillRows) {
  Case c;
  c.shape.seq_lens = {40, 9};
  c.shape.q_lens = {20, 9};  // 20 queries x GQA 4 = 80 rows: ten row blocks of 8 at head dim 256
  c.shape.num_kv_heads = 1;
  c.shape.num_q_heads = 4;
  c.shape.head_dim = 256;
  c.shape.block_size = 16;
  c.shape.seed = 601;
  c.partitions = 2;
  c.launch.block_threads = 128;
  run_case<half_t>(c);
  c.layout = KvLayout::paged;
  c.partitions = 1;
  run_case<float>(c);
}

TEST(EmulatedAttention, RejectsUnsupportedArguments) {
  KvShape shape;
  shape.seq_lens = {4};
  shape.head_dim = 96;
  KvFixture<half_t> f(shape);
  EXPECT_THROW(emulated_attention(f.params(), erase(f.contiguous(), 1, 96)), InvalidArgument);

  KvShape s128;
  s128.seq_lens = {4};
  s128.head_dim = 128;
  KvFixture<half_t> g(s128);
  EXPECT_THROW(emulated_attention(g.params(), erase(g.contiguous(), 1, 128), 1, {.block_threads = 0}), InvalidArgument);
  EXPECT_THROW(emulated_attention(g.params(), erase(g.contiguous(), 1, 128), 1, {.block_threads = 1025}),
               InvalidArgument);
  EXPECT_THROW(emulated_attention(g.params(), erase(g.contiguous(), 1, 128), 0), InvalidArgument);
}

/// The fixture's K and V copied to 256-byte-aligned storage, as the backends' pools and buffers
/// are, then moved `shift` elements on: sector counts then depend on the kernel alone.
template <class T>
class AlignedKv {
 public:
  AlignedKv(KvFixture<T>& f, const KvShape& shape, int shift) : shape_(shape) {
    const int batch = static_cast<int>(shape.seq_lens.size());
    std::size_t need = 2 * (f.k_pool_data().size() + 256);
    for (int s = 0; s < batch; ++s) need += 2 * (f.k_seq_data(s).size() + 256);
    storage_.resize((need + static_cast<std::size_t>(shift)) * sizeof(T) + 512);
    cursor_ = reinterpret_cast<std::uintptr_t>(storage_.data());
    for (int s = 0; s < batch; ++s) {
      k_seq_.push_back(place(f.k_seq_data(s), shift));
      v_seq_.push_back(place(f.v_seq_data(s), shift));
    }
    k_pool_ = place(f.k_pool_data(), shift);
    v_pool_ = place(f.v_pool_data(), shift);
    paged_ = f.paged();
    paged_.k_pool = k_pool_;
    paged_.v_pool = v_pool_;
  }
  [[nodiscard]] KvView view(KvLayout layout) const {
    if (layout == KvLayout::paged) return erase(paged_, shape_.num_kv_heads, shape_.head_dim);
    const std::int64_t row = static_cast<std::int64_t>(shape_.num_kv_heads) * shape_.head_dim;
    return erase(ContiguousKv<T>{k_seq_.data(), v_seq_.data(), row, shape_.head_dim}, shape_.num_kv_heads,
                 shape_.head_dim);
  }

 private:
  T* place(const std::vector<T>& from, int shift) {
    cursor_ = (cursor_ + 255) / 256 * 256;
    T* at = reinterpret_cast<T*>(cursor_) + shift;
    std::memcpy(at, from.data(), from.size() * sizeof(T));
    cursor_ = reinterpret_cast<std::uintptr_t>(at + from.size());
    return at;
  }
  KvShape shape_;
  std::vector<unsigned char> storage_;
  std::uintptr_t cursor_ = 0;
  std::vector<T*> k_seq_, v_seq_;
  T* k_pool_ = nullptr;
  T* v_pool_ = nullptr;
  PagedKv<T> paged_;
};

/// Runs one case with its K/V loads traced; checks the output against the float64 reference.
template <class T>
simt::LoadStats traced_case(const Case& c, int shift) {
  KvFixture<T> f(c.shape);
  const std::string what = describe(c, dtype_name<T>()) + " shift=" + std::to_string(shift);
  SCOPED_TRACE(what);
  AlignedKv<T> kv(f, c.shape, shift);
  simt::LoadStats stats;
  EmulatedLaunchOptions launch = c.launch;
  launch.load_stats = &stats;
  f.poison_output();
  emulated_attention(f.params(), kv.view(c.layout), c.partitions, launch);
  testing::expect_matches_reference(f.out(), f.reference(), {}, what);
  return stats;
}

template <class T>
void expect_coalesced(const Case& c) {
  const simt::LoadStats stats = traced_case<T>(c, 0);
  SCOPED_TRACE(describe(c, dtype_name<T>()));
  // Every K and V load is one 16-byte vector from one site, and every sector it moves is used.
  ASSERT_EQ(stats.of(simt::MemorySpace::global).size(), 1u);
  const simt::LoadSite all = stats.total();
  EXPECT_EQ(all.bytes_used, all.sectors * simt::LoadStats::kSectorBytes);
  if (c.shape.q_lens.empty()) {
    // Decode: each block reads its partition's K and V rows once, whatever the GQA group.
    std::uint64_t tokens = 0;
    for (int len : c.shape.seq_lens) tokens += static_cast<std::uint64_t>(len);
    const std::uint64_t row_bytes = static_cast<std::uint64_t>(c.shape.head_dim) * sizeof(T);
    EXPECT_EQ(all.bytes_used, 2 * tokens * static_cast<std::uint64_t>(c.shape.num_kv_heads) * row_bytes);
  }
}

// The GPU kernel is only as fast as its loads are coalesced (on the H200 of 2026-11-27 its old
// 2-byte-per-lane K loads held it at 2.5-7 % of HBM bandwidth). Judged here, without a GPU, by the
// sectors each warp's loads move against the bytes they use.
TEST(EmulatedAttention, KvLoadsUseEverySectorTheyMove) {
  std::uint64_t seed = 700;
  int i = 0;
  for (DType dt : kDtypes)
    for (int dim : {32, 64, 128, 256})
      for (int block_size : {0, 1, 3, 16}) {
        Case c;
        c.shape.seq_lens = random_lens(3, 5, 70, ++seed);
        c.shape.num_kv_heads = 2;
        c.shape.num_q_heads = 8;
        c.shape.head_dim = dim;
        c.shape.block_size = block_size == 0 ? 16 : block_size;
        c.shape.seed = seed;
        c.layout = block_size == 0 ? KvLayout::contiguous : KvLayout::paged;
        c.partitions = std::array{1, 3}[(i + i / 4) % 2];  // every view both split and not
        c.launch.block_threads = i % 3 == 0 ? 96 : 128;    // whole warps, not always a power of two
        ++i;
        switch (dt) {
          case DType::f16:
            expect_coalesced<half_t>(c);
            break;
          case DType::bf16:
            expect_coalesced<bfloat16_t>(c);
            break;
          case DType::f32:
            expect_coalesced<float>(c);
            break;
        }
      }
}

TEST(EmulatedAttention, PrefillLoadsAreCoalescedToo) {
  Case c;
  c.shape.q_lens = {9, 1, 6};  // 9 queries x GQA 4 = 36 rows: three row blocks, each reads K/V once
  c.shape.seq_lens = {40, 13, 29};
  c.shape.num_kv_heads = 1;
  c.shape.num_q_heads = 4;
  c.shape.head_dim = 128;
  c.shape.block_size = 7;
  c.shape.seed = 790;
  c.launch.block_threads = 64;
  for (KvLayout layout : {KvLayout::contiguous, KvLayout::paged}) {
    c.layout = layout;
    expect_coalesced<half_t>(c);
  }
}

// The staged K rows are padded by 16 bytes so that the 8 lanes of a quarter warp, each reading a
// 16-byte piece of its own token's K, fall on different banks; V is read along the head dim.
// With whole tiles (lengths a multiple of every tile size: 32) neither read has a bank conflict.
TEST(EmulatedAttention, StagedTilesAreReadWithoutBankConflicts) {
  std::uint64_t seed = 800;
  for (DType dt : kDtypes)
    for (int dim : {32, 64, 128, 256}) {
      Case c;
      c.shape.seq_lens = {64, 32, 96};
      c.shape.num_kv_heads = 2;
      c.shape.num_q_heads = 8;
      c.shape.head_dim = dim;
      c.shape.block_size = 16;
      c.shape.seed = ++seed;
      c.layout = KvLayout::paged;
      c.launch.block_threads = 128;
      simt::LoadStats stats;
      switch (dt) {
        case DType::f16:
          stats = traced_case<half_t>(c, 0);
          break;
        case DType::bf16:
          stats = traced_case<bfloat16_t>(c, 0);
          break;
        case DType::f32:
          stats = traced_case<float>(c, 0);
          break;
      }
      const std::vector<simt::LoadSite> shared = stats.of(simt::MemorySpace::shared);
      ASSERT_EQ(shared.size(), 2u) << "the K and the V reads";
      for (const simt::LoadSite& site : shared) {
        EXPECT_GT(site.requests, 0u);
        EXPECT_EQ(site.wavefronts, site.ideal_wavefronts) << to_string(dt) << " D=" << dim << " " << site.site;
      }
    }
}

TEST(EmulatedAttention, RowsNotOn16BytesAreStagedElementByElement) {
  // A view one element off 16-byte alignment: a vector load would fault on a GPU (and fails the
  // emulated launch); the kernel stages such rows with element loads and stays exact.
  Case c;
  c.shape.seq_lens = {23, 5, 31};
  c.shape.num_kv_heads = 2;
  c.shape.num_q_heads = 8;
  c.shape.head_dim = 64;
  c.shape.block_size = 3;
  c.shape.seed = 795;
  c.partitions = 2;
  for (KvLayout layout : {KvLayout::contiguous, KvLayout::paged}) {
    c.layout = layout;
    const std::vector<simt::LoadSite> h = traced_case<half_t>(c, 1).of(simt::MemorySpace::global);
    ASSERT_EQ(h.size(), 1u);
    EXPECT_LT(h[0].efficiency(), 1.0);
    const std::vector<simt::LoadSite> f = traced_case<float>(c, 3).of(simt::MemorySpace::global);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_LT(f[0].efficiency(), 1.0);
    EXPECT_NE(h[0].site, traced_case<float>(c, 0).of(simt::MemorySpace::global)[0].site)
        << "the element loads are another site";
  }
}

TEST(EmulatedBlockCopy, CopyOnWriteAndSwapCopyExactlyTheListedBlocks) {
  std::mt19937_64 rng(77);
  for (std::int64_t block_bytes : {std::int64_t{4096}, std::int64_t{48}, std::int64_t{37}, std::int64_t{6}}) {
    SCOPED_TRACE("block_bytes " + std::to_string(block_bytes));
    const int blocks = 11;
    std::vector<unsigned char> a(blocks * block_bytes + 16), b(a.size());
    for (auto& x : a) x = static_cast<unsigned char>(rng());
    for (auto& x : b) x = static_cast<unsigned char>(rng());
    const std::vector<unsigned char> a0 = a, b0 = b;

    // Copy-on-write inside pool a: blocks 1, 4, 9 -> 2, 10, 0.
    const std::vector<std::int32_t> src{1, 4, 9}, dst{2, 10, 0};
    simt::BlockCopyParams cow{a.data(), a.data(), src.data(), dst.data(), 3, block_bytes, 0, 0};
    emulated_block_copy(cow, {.block_threads = 33});
    for (int blk = 0; blk < blocks; ++blk) {
      int from = blk;
      for (int i = 0; i < 3; ++i)
        if (dst[i] == blk) from = src[i];
      EXPECT_EQ(0, std::memcmp(&a[blk * block_bytes], &a0[from * block_bytes], block_bytes)) << "block " << blk;
    }
    EXPECT_EQ(0, std::memcmp(&a[blocks * block_bytes], &a0[blocks * block_bytes], 16));

    // Swap out: every block of a to the reverse position in b.
    std::vector<std::int32_t> all(blocks), rev(blocks);
    std::iota(all.begin(), all.end(), 0);
    for (int i = 0; i < blocks; ++i) rev[i] = blocks - 1 - i;
    simt::BlockCopyParams swap{a.data(), b.data(), all.data(), rev.data(), blocks, block_bytes, 0, 0};
    emulated_block_copy(swap);
    for (int blk = 0; blk < blocks; ++blk)
      EXPECT_EQ(0, std::memcmp(&b[(blocks - 1 - blk) * block_bytes], &a[blk * block_bytes], block_bytes));
    EXPECT_EQ(0, std::memcmp(&b[blocks * block_bytes], &b0[blocks * block_bytes], 16));
  }
}

TEST(EmulatedBlockCopy, StridedPoolsCopyOnlyTheBlockBytes) {
  // Pools whose blocks are 64 bytes apart, copying the first 24 bytes of each.
  std::vector<unsigned char> src(5 * 64), dst(3 * 64, 0xAB);
  std::iota(src.begin(), src.end(), 0);
  const std::vector<std::int32_t> s{4, 0}, d{1, 2};
  emulated_block_copy({src.data(), dst.data(), s.data(), d.data(), 2, 24, 64, 64});
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(dst[i], 0xAB);
    EXPECT_EQ(dst[64 + i], i < 24 ? src[4 * 64 + i] : 0xAB);
    EXPECT_EQ(dst[128 + i], i < 24 ? src[i] : 0xAB);
  }
}

}  // namespace
}  // namespace kvlab
