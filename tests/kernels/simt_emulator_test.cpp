// Semantics of the SIMT emulator (kernels/simt/emulator.hpp): thread/block indexing, barriers,
// warp shuffles and reductions with CUDA's rules, shared memory, misuse detection. Small launches
// only, so the file is also quick under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "kernels/simt/emulator.hpp"
#include "kernels/simt/exec.hpp"

namespace kvlab::simt {
namespace {

std::vector<int> run_per_thread(Dim3 block, const std::function<int(EmulatedExec&)>& body, std::size_t shared = 0) {
  std::vector<int> out(volume(block), -1);
  launch({1, 1, 1}, block, shared, [&](EmulatedExec& ex) { out[linear_thread_idx(ex)] = body(ex); });
  return out;
}

TEST(SimtEmulator, ThreadIndicesFollowCudaLinearOrder) {
  const Dim3 block{8, 4, 3};
  std::vector<Dim3> seen(volume(block));
  launch({1, 1, 1}, block, 0, [&](EmulatedExec& ex) {
    const Dim3 t = ex.thread_idx();
    seen[t.x + 8 * (t.y + 4 * t.z)] = t;
    EXPECT_EQ(ex.block_dim().x, 8u);
    EXPECT_EQ(ex.block_dim().z, 3u);
    EXPECT_EQ(lane_id(ex), linear_thread_idx(ex) % 32);
    EXPECT_EQ(warp_id(ex), linear_thread_idx(ex) / 32);
  });
  for (unsigned i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].x, i % 8);
    EXPECT_EQ(seen[i].y, i / 8 % 4);
    EXPECT_EQ(seen[i].z, i / 32);
  }
}

TEST(SimtEmulator, EveryBlockOfTheGridRunsOnceInAnyOrder) {
  for (std::uint64_t seed : {0ull, 7ull}) {
    const Dim3 grid{3, 2, 4};
    std::vector<int> hits(volume(grid), 0);
    std::vector<unsigned> threads(volume(grid), 0);
    launch(grid, {5, 1, 1}, 0,
           [&](EmulatedExec& ex) {
             const Dim3 b = ex.block_idx();
             EXPECT_EQ(ex.grid_dim().y, 2u);
             const unsigned id = b.x + 3 * (b.y + 2 * b.z);
             // Blocks never overlap, but threads of one block do: count once per block.
             if (ex.thread_idx().x == 0) ++hits[id];
             ex.sync_threads();
             if (ex.thread_idx().x == 4) threads[id] = ex.block_dim().x;
           },
           {seed});
    for (int h : hits) EXPECT_EQ(h, 1);
    for (unsigned t : threads) EXPECT_EQ(t, 5u);
  }
}

TEST(SimtEmulator, BarrierOrdersSharedMemoryAcrossRounds) {
  const unsigned n = 70;  // three warps, the last one partial
  std::atomic<int> errors{0};
  launch({2, 1, 1}, {n, 1, 1}, n * sizeof(int), [&](EmulatedExec& ex) {
    int* s = shared_array<int>(ex, n);
    const int t = static_cast<int>(ex.thread_idx().x);
    for (int round = 0; round < 20; ++round) {
      s[t] = round * 1000 + t;
      ex.sync_threads();
      const int from = (t + round + 1) % static_cast<int>(n);
      if (s[from] != round * 1000 + from) ++errors;
      ex.sync_threads();
    }
  });
  EXPECT_EQ(errors.load(), 0);
}

TEST(SimtEmulator, BlockReductionThroughSharedMemory) {
  const unsigned n = 128;
  std::vector<long> sums(4, 0);
  launch({4, 1, 1}, {n, 1, 1}, n * sizeof(long), [&](EmulatedExec& ex) {
    long* s = shared_array<long>(ex, n);
    const unsigned t = ex.thread_idx().x;
    s[t] = static_cast<long>(t) * (ex.block_idx().x + 1);
    ex.sync_threads();
    for (unsigned half = n / 2; half > 0; half /= 2) {
      if (t < half) s[t] += s[t + half];
      ex.sync_threads();
    }
    if (t == 0) sums[ex.block_idx().x] = s[0];
  });
  for (int b = 0; b < 4; ++b) EXPECT_EQ(sums[b], (b + 1) * 127L * 128 / 2);
}

// Reference for a full warp (all 32 lanes present) shuffle with CUDA's width rules.
int expected_source(int mode, int lane, int b, int width) {
  const int seg = lane / width * width;
  switch (mode) {
    case 0:
      return seg + ((b % width) + width) % width;
    case 1:
      return lane - seg >= b ? lane - b : lane;
    case 2:
      return lane - seg + b < width ? lane + b : lane;
    default: {
      const int j = lane ^ b;
      return j < seg + width ? j : lane;  // earlier segments may be read, later ones not
    }
  }
}

TEST(SimtEmulator, ShufflesMatchCudaSemanticsForEveryWidth) {
  for (int width : {1, 2, 4, 8, 16, 32}) {
    for (int b : {0, 1, 2, 3, 5, 8, 16, 31}) {
      const auto idx =
          run_per_thread({64, 1, 1}, [&](EmulatedExec& ex) { return ex.shfl(int(linear_thread_idx(ex)), b, width); });
      const auto up = run_per_thread(
          {64, 1, 1}, [&](EmulatedExec& ex) { return ex.shfl_up(int(linear_thread_idx(ex)), b, width); });
      const auto down = run_per_thread(
          {64, 1, 1}, [&](EmulatedExec& ex) { return ex.shfl_down(int(linear_thread_idx(ex)), b, width); });
      const auto bfly = run_per_thread(
          {64, 1, 1}, [&](EmulatedExec& ex) { return ex.shfl_xor(int(linear_thread_idx(ex)), b, width); });
      for (int t = 0; t < 64; ++t) {
        const int base = t / 32 * 32, lane = t % 32;
        SCOPED_TRACE("width " + std::to_string(width) + " b " + std::to_string(b) + " thread " + std::to_string(t));
        EXPECT_EQ(idx[t], base + expected_source(0, lane, b, width));
        EXPECT_EQ(up[t], base + expected_source(1, lane, b, width));
        EXPECT_EQ(down[t], base + expected_source(2, lane, b, width));
        EXPECT_EQ(bfly[t], base + expected_source(3, lane, b, width));
      }
    }
  }
}

TEST(SimtEmulator, ShuffleSourceMatchesPtxForEdgeCases) {
  // xor with width 8: lane 9 ^ 4 = 13 is inside its segment; lane 9 ^ 16 = 25 is a later segment.
  EXPECT_EQ(shuffle_source(3, 9, 4, 8), 13);
  EXPECT_EQ(shuffle_source(3, 9, 16, 8), -1);
  EXPECT_EQ(shuffle_source(3, 25, 16, 8), 9);   // an earlier segment is readable
  EXPECT_EQ(shuffle_source(0, 13, 35, 8), 11);  // srcLane modulo width, inside the segment
  EXPECT_EQ(shuffle_source(1, 8, 1, 8), -1);
  EXPECT_EQ(shuffle_source(2, 15, 1, 8), -1);
}

TEST(SimtEmulator, MissingAndExitedLanesGiveTheCallerItsOwnValue) {
  // Block of 40: warp 1 has lanes 0..7 only.
  const auto v =
      run_per_thread({40, 1, 1}, [](EmulatedExec& ex) { return ex.shfl_xor(int(linear_thread_idx(ex)), 8); });
  for (int t = 0; t < 32; ++t) EXPECT_EQ(v[t], t ^ 8);
  for (int t = 32; t < 40; ++t) EXPECT_EQ(v[t], t) << "lane " << t - 32 << " reads a lane that does not exist";

  // Lanes 16..31 return before the shuffle: it completes without them (CUDA: non-exited lanes).
  const auto w = run_per_thread({32, 1, 1}, [](EmulatedExec& ex) {
    const int t = static_cast<int>(linear_thread_idx(ex));
    if (t >= 16) return -2;
    return ex.shfl(t, 31 - t);
  });
  for (int t = 0; t < 16; ++t) EXPECT_EQ(w[t], t);
}

TEST(SimtEmulator, WarpReductionsAreXorButterflies) {
  std::vector<int> sum(64), mx(64), seg(64);
  std::vector<double> dsum(64);
  launch({1, 1, 1}, {64, 1, 1}, 0, [&](EmulatedExec& ex) {
    const int t = static_cast<int>(linear_thread_idx(ex));
    const int v = (t * 37) % 101;
    sum[t] = warp_sum(ex, v);
    mx[t] = warp_max(ex, v);
    seg[t] = warp_sum<8>(ex, v);
    dsum[t] = warp_sum(ex, 0.5 * t);  // 8-byte values
  });
  for (int w = 0; w < 2; ++w) {
    int s = 0, m = 0;
    double d = 0;
    for (int l = 0; l < 32; ++l) {
      const int t = w * 32 + l;
      s += (t * 37) % 101;
      m = std::max(m, (t * 37) % 101);
      d += 0.5 * t;
    }
    for (int l = 0; l < 32; ++l) {
      const int t = w * 32 + l;
      EXPECT_EQ(sum[t], s);
      EXPECT_EQ(mx[t], m);
      EXPECT_EQ(dsum[t], d);
      int g = 0;
      for (int k = t / 8 * 8; k < t / 8 * 8 + 8; ++k) g += (k * 37) % 101;
      EXPECT_EQ(seg[t], g);
    }
  }
}

TEST(SimtEmulator, FloatSumIsTheButterflyOrderNotASerialSum) {
  // A butterfly adds pairs (x0+x16)+(x8+x24)...; every lane gets bit-identical results, as on a GPU.
  std::vector<float> out(32);
  launch({1, 1, 1}, {32, 1, 1}, 0, [&](EmulatedExec& ex) {
    const int t = static_cast<int>(linear_thread_idx(ex));
    out[t] = warp_sum(ex, t == 0 ? 1e8f : 1.f);
  });
  float ref[32];
  for (int l = 0; l < 32; ++l) ref[l] = l == 0 ? 1e8f : 1.f;
  for (int mask = 16; mask > 0; mask /= 2) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = ref[l] + ref[l ^ mask];
    std::memcpy(ref, next, sizeof ref);
  }
  for (int l = 0; l < 32; ++l) EXPECT_EQ(out[l], ref[l]);
}

TEST(SimtEmulator, SharedMemoryIsAlignedPoisonedAndBounded) {
  std::atomic<int> errors{0};
  launch({3, 1, 1}, {4, 1, 1}, 64, [&](EmulatedExec& ex) {
    char* c = shared_array<char>(ex, 3);
    double* d = shared_array<double>(ex, 2);
    if (reinterpret_cast<std::uintptr_t>(d) % alignof(double) != 0 || reinterpret_cast<char*>(d) - c != 8) ++errors;
    if (!std::isnan(d[1])) ++errors;  // poisoned at every block start, even after the last block wrote it
    ex.sync_threads();
    if (ex.thread_idx().x == 0) d[1] = 1.0;
    ex.sync_threads();
    if (d[1] != 1.0) ++errors;
  });
  EXPECT_EQ(errors.load(), 0);
  EXPECT_THROW(launch({1, 1, 1}, {2, 1, 1}, 16, [](EmulatedExec& ex) { (void)shared_array<float>(ex, 5); }),
               SimtMisuse);
}

TEST(SimtEmulator, ThreadsThatReturnEarlyDoNotBlockBarriers) {
  // Volta+ semantics: __syncthreads waits for the non-exited threads only.
  std::vector<int> out(64, 0);
  launch({1, 1, 1}, {64, 1, 1}, 64 * sizeof(int), [&](EmulatedExec& ex) {
    int* s = shared_array<int>(ex, 64);
    const int t = static_cast<int>(ex.thread_idx().x);
    if (t >= 40) return;
    s[t] = t;
    ex.sync_threads();
    out[t] = s[39 - t];
  });
  for (int t = 0; t < 40; ++t) EXPECT_EQ(out[t], 39 - t);
}

// Kernels are defined outside EXPECT_THROW: call sites inside one macro expansion share a
// source location, so the emulator could not tell the two barriers apart.
TEST(SimtEmulator, DivergentBarrierIsReported) {
  const EmulatedKernel kernel = [](EmulatedExec& ex) {
    if (ex.thread_idx().x % 2)
      ex.sync_threads();
    else
      ex.sync_threads();
  };
  EXPECT_THROW(launch({1, 1, 1}, {32, 1, 1}, 0, kernel), SimtMisuse);
}

TEST(SimtEmulator, DivergentShuffleIsReported) {
  const EmulatedKernel kernel = [](EmulatedExec& ex) {
    int v = 1;
    if (ex.thread_idx().x < 16)
      v = ex.shfl_xor(v, 1);
    else
      v = ex.shfl_xor(v, 2);
    (void)v;
  };
  EXPECT_THROW(launch({1, 1, 1}, {32, 1, 1}, 0, kernel), SimtMisuse);
}

TEST(SimtEmulator, DeadlockIsReportedNotHung) {
  // Lane 0 waits in a shuffle for lanes that wait at __syncthreads for lane 0: hangs on a GPU.
  try {
    launch({2, 1, 1}, {64, 1, 1}, 0, [](EmulatedExec& ex) {
      if (ex.thread_idx().x == 0) (void)ex.shfl_xor(1, 1);
      ex.sync_threads();
    });
    FAIL() << "expected SimtMisuse";
  } catch (const SimtMisuse& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
  }
}

TEST(SimtEmulator, KernelExceptionsPropagate) {
  EXPECT_THROW(launch({4, 1, 1}, {33, 1, 1}, 0,
                      [](EmulatedExec& ex) {
                        ex.sync_threads();
                        if (ex.block_idx().x == 2 && ex.thread_idx().x == 32) throw std::runtime_error("boom");
                        ex.sync_threads();
                      }),
               std::runtime_error);
}

/// 16 KiB at a 256-byte boundary, so that sector counts do not depend on where malloc put it.
struct alignas(256) GlobalBuffer {
  unsigned char bytes[16384];
};

/// Traces one launch of `body` (each thread's loads) and returns the per-site judgement.
LoadStats trace(Dim3 block, const std::function<void(EmulatedExec&)>& body, unsigned blocks = 1) {
  LoadStats stats;
  LaunchOptions o;
  o.load_stats = &stats;
  launch({blocks, 1, 1}, block, 0, body, o);
  return stats;
}

TEST(SimtEmulator, GlobalLoadsAreJudgedPerWarpRequestBySector) {
  auto buf = std::make_unique<GlobalBuffer>();
  for (std::size_t i = 0; i < sizeof buf->bytes; ++i) buf->bytes[i] = static_cast<unsigned char>(i * 7 + 3);
  const unsigned char* g = buf->bytes;

  // Consecutive 4-byte words: one request per warp, 128 bytes in 4 full sectors.
  LoadStats words = trace({64, 1, 1}, [&](EmulatedExec& ex) {
    const unsigned t = linear_thread_idx(ex);
    const auto v = ex.load_global<std::uint32_t>(g + 4 * t);
    std::uint32_t want;
    std::memcpy(&want, g + 4 * t, 4);
    EXPECT_EQ(v, want);  // the load returns the memory's value
  });
  ASSERT_EQ(words.sites.size(), 1u);
  EXPECT_EQ(words.sites[0].requests, 2u);
  EXPECT_EQ(words.sites[0].bytes_used, 256u);
  EXPECT_EQ(words.sites[0].sectors, 8u);
  EXPECT_DOUBLE_EQ(words.sites[0].efficiency(), 1.0);

  // 2 bytes per lane, lanes 64 bytes apart (each in its own sector): 1/16 of what moves is used.
  // The same kernel's 16-byte loads of consecutive pieces use everything. Two sites, two blocks.
  LoadStats mixed = trace(
      {32, 1, 1},
      [&](EmulatedExec& ex) {
        const unsigned t = linear_thread_idx(ex);
        (void)ex.load_global<std::uint16_t>(g + 64 * t);
        (void)ex.load_global<Vec16>(g + 16 * t);
      },
      2);
  ASSERT_EQ(mixed.sites.size(), 2u);
  EXPECT_EQ(mixed.sites[0].requests, 2u);
  EXPECT_EQ(mixed.sites[0].sectors, 64u);
  EXPECT_EQ(mixed.sites[0].bytes_used, 128u);
  EXPECT_DOUBLE_EQ(mixed.sites[0].efficiency(), 1.0 / 16);
  EXPECT_EQ(mixed.sites[1].sectors, 32u);
  EXPECT_DOUBLE_EQ(mixed.sites[1].efficiency(), 1.0);
  EXPECT_EQ(mixed.total().bytes_used, 128u + 1024u);
  // Sites are named file:line:column; site() finds exactly one or throws.
  EXPECT_NE(mixed.sites[0].site.find("simt_emulator_test.cpp:"), std::string::npos) << mixed.sites[0].site;
  EXPECT_EQ(&mixed.site(mixed.sites[1].site), &mixed.sites[1]);
  EXPECT_THROW((void)mixed.site("simt_emulator_test"), InvalidArgument);
  EXPECT_THROW((void)mixed.site("no such file"), InvalidArgument);

  // A broadcast (every lane the same word) moves one sector for 4 distinct bytes; a loop makes one
  // request per iteration, and a partial warp (40 threads: 32 + 8 lanes) still one per warp.
  LoadStats looped = trace({40, 1, 1}, [&](EmulatedExec& ex) {
    for (int i = 0; i < 3; ++i) (void)ex.load_global<float>(g + 32 * i);
  });
  ASSERT_EQ(looped.sites.size(), 1u);
  EXPECT_EQ(looped.sites[0].requests, 6u);
  EXPECT_EQ(looped.sites[0].sectors, 6u);
  EXPECT_EQ(looped.sites[0].bytes_used, 24u);
  EXPECT_DOUBLE_EQ(looped.sites[0].efficiency(), 0.125);

  // Lanes that reach the site in a different order (odd lanes first, via a barrier) still meet in
  // one request per execution.
  LoadStats reordered = trace({32, 1, 1}, [&](EmulatedExec& ex) {
    const unsigned t = linear_thread_idx(ex);
    const auto load = [&] { (void)ex.load_global<std::uint32_t>(g + 4 * t); };
    if (t % 2) load();
    ex.sync_threads();
    if (t % 2 == 0) load();
  });
  ASSERT_EQ(reordered.sites.size(), 1u);
  EXPECT_EQ(reordered.sites[0].requests, 1u);
  EXPECT_EQ(reordered.sites[0].sectors, 4u);
}

TEST(SimtEmulator, MisalignedGlobalLoadIsReportedAsAGpuWouldFault) {
  auto buf = std::make_unique<GlobalBuffer>();
  std::memset(buf->bytes, 0, sizeof buf->bytes);
  try {
    launch({1, 1, 1}, {32, 1, 1}, 0, [&](EmulatedExec& ex) {
      (void)ex.load_global<Vec16>(buf->bytes + 16 * linear_thread_idx(ex) + (ex.thread_idx().x == 5 ? 8 : 0));
    });
    FAIL() << "expected SimtMisuse";
  } catch (const SimtMisuse& e) {
    EXPECT_NE(std::string(e.what()).find("misaligned global load of 16 bytes"), std::string::npos) << e.what();
  }
  // Untraced launches check alignment too; element-aligned scalar loads are fine anywhere.
  EXPECT_THROW(launch({1, 1, 1}, {1, 1, 1}, 0, [&](EmulatedExec& ex) { (void)ex.load_global<float>(buf->bytes + 2); }),
               SimtMisuse);
  launch({1, 1, 1}, {4, 1, 1}, 0, [&](EmulatedExec& ex) {
    EXPECT_EQ(ex.load_global<std::uint16_t>(buf->bytes + 2 * linear_thread_idx(ex) + 6), 0u);
  });
}

/// Traces one single-block launch with `shared` bytes of shared memory.
LoadStats trace_shared(unsigned threads, std::size_t shared, const std::function<void(EmulatedExec&)>& body) {
  LoadStats stats;
  LaunchOptions o;
  o.load_stats = &stats;
  launch({1, 1, 1}, {threads, 1, 1}, shared, body, o);
  return stats;
}

TEST(SimtEmulator, SharedLoadsAreJudgedByBankConflicts) {
  // Each kernel fills its shared memory first, so the loads read defined values.
  const auto strided = [](int stride_words) {
    return trace_shared(32, 32 * 33 * 4 + 16, [=](EmulatedExec& ex) {
      float* s = shared_array<float>(ex, 32 * 33 + 4);
      const unsigned t = linear_thread_idx(ex);
      for (int i = static_cast<int>(t); i < 32 * 33 + 4; i += 32) s[i] = static_cast<float>(i);
      ex.sync_threads();
      EXPECT_EQ(ex.load_shared<float>(s + stride_words * t), static_cast<float>(stride_words * t));
    });
  };
  const auto one_site = [](const LoadStats& st) {
    EXPECT_EQ(st.of(MemorySpace::global).size(), 0u);
    return st.total(MemorySpace::shared);
  };
  const LoadSite consecutive = one_site(strided(1));
  EXPECT_EQ(consecutive.wavefronts, 1u);
  EXPECT_DOUBLE_EQ(consecutive.efficiency(), 1.0);
  const LoadSite same_bank = one_site(strided(32));  // every lane its own word of bank 0
  EXPECT_EQ(same_bank.wavefronts, 32u);
  EXPECT_DOUBLE_EQ(same_bank.efficiency(), 1.0 / 32);
  EXPECT_EQ(one_site(strided(33)).wavefronts, 1u);  // padded by a word: every lane its own bank
  EXPECT_EQ(one_site(strided(0)).wavefronts, 1u);   // one word for all: a broadcast
  EXPECT_EQ(one_site(strided(2)).wavefronts, 2u);   // two words per bank

  // 16-byte loads are served a quarter warp (8 lanes) at a time: rows of 256 bytes put a quarter's
  // 8 pieces in the same 4 banks (8 passes per phase); 16 bytes of padding per row spread them.
  for (const auto& [row_bytes, passes] : {std::pair{256, 32u}, std::pair{272, 4u}}) {
    const LoadSite vec = trace_shared(32, 32 * 272, [row_bytes = row_bytes](EmulatedExec& ex) {
                           unsigned char* s = shared_array<unsigned char>(ex, 32 * 272);
                           const unsigned t = linear_thread_idx(ex);
                           for (unsigned i = t; i < 32 * 272; i += 32) s[i] = static_cast<unsigned char>(i);
                           ex.sync_threads();
                           (void)ex.load_shared<Vec16>(s + row_bytes * t);
                         }).total(MemorySpace::shared);
    EXPECT_EQ(vec.ideal_wavefronts, 4u);
    EXPECT_EQ(vec.wavefronts, passes) << row_bytes;
  }

  // 2-byte loads of consecutive elements: two lanes share each word, one pass.
  const LoadSite halves = trace_shared(32, 64, [](EmulatedExec& ex) {
                            auto* s = shared_array<std::uint16_t>(ex, 32);
                            s[linear_thread_idx(ex)] = 7;
                            ex.sync_threads();
                            EXPECT_EQ(ex.load_shared<std::uint16_t>(s + linear_thread_idx(ex)), 7u);
                          }).total(MemorySpace::shared);
  EXPECT_EQ(halves.wavefronts, 1u);
  EXPECT_EQ(halves.bytes_used, 64u);
}

TEST(SimtEmulator, SharedLoadsOutsideTheArenaOrMisalignedAreReported) {
  for (int offset : {-4, 64, 2}) {
    try {
      launch({1, 1, 1}, {1, 1, 1}, 64, [&](EmulatedExec& ex) {
        unsigned char* s = shared_array<unsigned char>(ex, 64);
        std::memset(s, 0, 64);
        (void)ex.load_shared<float>(s + offset);
      });
      FAIL() << "expected SimtMisuse at offset " << offset;
    } catch (const SimtMisuse& e) {
      EXPECT_NE(std::string(e.what()).find(offset == 2 ? "misaligned shared load" : "outside the block's 64 bytes"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(SimtEmulator, RejectsBadLaunches) {
  EXPECT_THROW(launch({1, 1, 1}, {1025, 1, 1}, 0, [](EmulatedExec&) {}), InvalidArgument);
  EXPECT_THROW(launch({1, 1, 1}, {32, 1, 1}, 0, [](EmulatedExec& ex) { (void)ex.shfl(1, 0, 3); }), SimtMisuse);
  launch({0, 1, 1}, {32, 1, 1}, 0, [](EmulatedExec&) { FAIL() << "an empty grid runs nothing"; });
}

}  // namespace
}  // namespace kvlab::simt
