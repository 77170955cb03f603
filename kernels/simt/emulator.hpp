#pragma once
// A SIMT emulator: runs kernels written against kernels/simt/exec.hpp on the host with CUDA's
// execution semantics, so that GPU kernels are tested on machines without a GPU.
//
//   simt::launch({grid}, {block}, shared_bytes, [&](simt::EmulatedExec& ex) { kernel(ex, args...); });
//
// Mapping
// * Threads: one host std::thread per CUDA thread of a block (block volume <= 1024). The team is
//   created per launch and runs the grid's blocks one after the other (linear order, or a
//   seeded shuffle with LaunchOptions::shuffle_seed); blocks never run concurrently, so kernels
//   that wait on other blocks are not supported. The team meets at an internal rendezvous between
//   blocks, where the shared arena is re-poisoned (0xFF bytes) for the next block.
// * sync_threads(): a real barrier of the block's non-exited threads (Volta+ semantics: a thread
//   that has returned from the kernel no longer counts). Stricter than hardware: all threads
//   waiting in one barrier episode must be at the same call site (source_location), otherwise the
//   launch fails with SimtMisuse ("divergent __syncthreads"). Call sites inside one macro
//   expansion share a location and cannot be told apart.
// * Shuffles: full-warp (__shfl_*_sync(0xffffffff, ...)) semantics with CUDA's width rules, warp
//   size 32, warps formed from consecutive linear thread indices. Every non-exited lane of the warp
//   deposits its value in a per-warp buffer (double-buffered) and meets the others at a warp
//   barrier; then each lane reads its source lane. A source lane that is outside the width segment
//   (shfl_up/down/xor past the segment) yields the caller's own value, as CUDA specifies. A source
//   lane that does not exist (partial last warp) or has exited yields the caller's own value too
//   (on hardware that value is undefined; kernels must not rely on it). Lanes of one warp at
//   different shuffle call sites fail with SimtMisuse. Values: trivially copyable, <= 8 bytes.
// * Shared memory: one arena of shared_bytes per block (16-byte aligned); shared_array() past its
//   end fails with SimtMisuse instead of corrupting memory.
// * Misuse that would hang a GPU does not hang the emulator: when every live thread of a block is
//   blocked (e.g. one lane waits in a shuffle while its warp-mates wait in sync_threads), the
//   launch fails with SimtMisuse naming the call sites. An exception thrown by kernel code ends the
//   launch and is rethrown by launch(). Infinite loops in kernel code are not detected.
// * Global loads through load_global<V>(p): a pointer not aligned to sizeof(V) fails the launch
//   with SimtMisuse (a GPU faults with cudaErrorMisalignedAddress). Shared loads through
//   load_shared<V>(p) are checked the same way and must lie inside the block's shared memory;
//   traced, they are judged by bank conflicts (LoadSite::wavefronts). With LaunchOptions::load_stats
//   set, each is also traced: the k-th execution of one load site by the lanes of one warp is one
//   request, as on a GPU where a warp issues the instruction once. Each request is judged by its
//   32-byte sectors (what L1/L2 move) against the distinct bytes its lanes asked for; the
//   per-site totals are added to *load_stats when the launch ends (an aborted launch adds
//   nothing; launches sharing one LoadStats must not run concurrently). Grouping by count
//   assumes converged SIMT code, where the lanes active at a site are at the same execution of
//   it (loops whose trip count differs by lane included). Code that reaches one site a different
//   number of times per lane before reconverging (say, a site inside an if and after it, through
//   a helper) is grouped by count, which can differ from how a GPU issues it. One source line
//   called twice through one helper (K and V loads in one function) is one site.
// * All cross-thread state is guarded by one mutex per launch (condition variables per warp and
//   per block), so kernels whose shared-memory accesses are ordered by sync_threads() are
//   race-free under ThreadSanitizer, and races in a kernel show up as real TSan reports.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <source_location>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "alloc/core/error.hpp"
#include "kernels/simt/exec.hpp"

namespace kvlab::simt {

/// A kernel broke a SIMT rule the emulator checks (divergent barrier, deadlock, shared overflow).
class SimtMisuse : public Error {
 public:
  using Error::Error;
};

enum class MemorySpace { global, shared };

/// Traced loads of one load site (file:line:column), summed over its requests.
struct LoadSite {
  std::string site;
  MemorySpace space = MemorySpace::global;
  std::uint64_t requests = 0;    ///< warp-wide executions of the load
  std::uint64_t bytes_used = 0;  ///< distinct bytes the lanes of each request asked for
  std::uint64_t sectors = 0;     ///< global: 32-byte sectors each request touched
  /// shared: passes through the 32 four-byte banks the requests took. A warp's request is served
  /// in phases (one for loads of up to 4 bytes, two for 8, four for 16: 32, 16 or 8 lanes each);
  /// a phase takes as many passes as the most distinct words any one bank must deliver.
  std::uint64_t wavefronts = 0;
  std::uint64_t ideal_wavefronts = 0;  ///< shared: one pass per phase with a lane in it
  /// global: share of the moved bytes the lanes use (1 when coalesced, 1/32 when each lane of a
  /// warp reads 1 byte of its own sector); shared: ideal over actual passes (1 without bank
  /// conflicts, 1/32 for a 32-way conflict).
  [[nodiscard]] double efficiency() const noexcept {
    if (space == MemorySpace::shared)
      return wavefronts == 0 ? 1.0 : static_cast<double>(ideal_wavefronts) / static_cast<double>(wavefronts);
    return sectors == 0 ? 1.0 : static_cast<double>(bytes_used) / (32.0 * static_cast<double>(sectors));
  }
};

/// What the traced loads of one or more launches cost, per load site (first use first).
struct LoadStats {
  static constexpr std::uint64_t kSectorBytes = 32;
  static constexpr unsigned kBanks = 32, kBankBytes = 4;
  std::vector<LoadSite> sites;
  /// The sites of one memory space, in order.
  [[nodiscard]] std::vector<LoadSite> of(MemorySpace space) const;
  /// All sites of one memory space summed.
  [[nodiscard]] LoadSite total(MemorySpace space = MemorySpace::global) const;
  /// The site whose name contains `part` (throws InvalidArgument when none or several do).
  [[nodiscard]] const LoadSite& site(std::string_view part) const;
};

namespace detail {
class Team;
struct Site {
  const char* file = nullptr;
  std::uint_least32_t line = 0, column = 0;
  static Site of(const std::source_location& l) noexcept { return {l.file_name(), l.line(), l.column()}; }
};
}  // namespace detail

/// One emulated CUDA thread's view of its launch. Created by launch(); never copied.
class EmulatedExec {
 public:
  EmulatedExec(const EmulatedExec&) = delete;
  EmulatedExec& operator=(const EmulatedExec&) = delete;

  [[nodiscard]] Dim3 block_idx() const noexcept { return block_idx_; }
  [[nodiscard]] Dim3 thread_idx() const noexcept { return thread_idx_; }
  [[nodiscard]] Dim3 block_dim() const noexcept { return block_dim_; }
  [[nodiscard]] Dim3 grid_dim() const noexcept { return grid_dim_; }

  void sync_threads(std::source_location loc = std::source_location::current());

  template <class T>
  T shfl(T v, int src_lane, int width = kWarpSize, std::source_location loc = std::source_location::current()) {
    return exchange(v, 0, src_lane, width, loc);
  }
  template <class T>
  T shfl_up(T v, int delta, int width = kWarpSize, std::source_location loc = std::source_location::current()) {
    return exchange(v, 1, delta, width, loc);
  }
  template <class T>
  T shfl_down(T v, int delta, int width = kWarpSize, std::source_location loc = std::source_location::current()) {
    return exchange(v, 2, delta, width, loc);
  }
  template <class T>
  T shfl_xor(T v, int lane_mask, int width = kWarpSize, std::source_location loc = std::source_location::current()) {
    return exchange(v, 3, lane_mask, width, loc);
  }

  /// One global load of a V (see exec.hpp): checked for alignment, traced when the launch asks.
  template <class V>
  V load_global(const void* p, std::source_location loc = std::source_location::current()) {
    return load<V>(p, loc, MemorySpace::global);
  }
  /// One shared-memory load of a V: checked for alignment and bounds, traced when the launch asks.
  template <class V>
  V load_shared(const void* p, std::source_location loc = std::source_location::current()) {
    return load<V>(p, loc, MemorySpace::shared);
  }

  template <class T>
  T* shared(std::size_t count) {
    const std::size_t at = (shared_offset_ + alignof(T) - 1) / alignof(T) * alignof(T);
    check_shared(at, count * sizeof(T));
    shared_offset_ = at + count * sizeof(T);
    return reinterpret_cast<T*>(shared_base_ + at);
  }

 private:
  friend class detail::Team;
  EmulatedExec() = default;

  template <class V>
  V load(const void* p, const std::source_location& loc, MemorySpace space) {
    static_assert(std::is_trivially_copyable_v<V> && std::is_default_constructible_v<V>,
                  "loads move trivially copyable values");
    static_assert(sizeof(V) == 1 || sizeof(V) == 2 || sizeof(V) == 4 || sizeof(V) == 8 || sizeof(V) == 16,
                  "a GPU load moves 1, 2, 4, 8 or 16 bytes");
    note_load(p, sizeof(V), detail::Site::of(loc), space);
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }
  template <class T>
  T exchange(T v, int mode, int b, int width, const std::source_location& loc) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                  "shuffles move trivially copyable values of <= 8 bytes");
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    bits = shuffle_bits(bits, mode, b, width, detail::Site::of(loc));
    std::memcpy(&v, &bits, sizeof(T));
    return v;
  }
  std::uint64_t shuffle_bits(std::uint64_t bits, int mode, int b, int width, detail::Site site);
  void check_shared(std::size_t at, std::size_t bytes) const;
  void note_load(const void* p, std::size_t bytes, detail::Site site, MemorySpace space);

  detail::Team* team_ = nullptr;
  Dim3 block_idx_, thread_idx_, block_dim_, grid_dim_;
  unsigned linear_ = 0, lane_ = 0, warp_ = 0;
  unsigned char* shared_base_ = nullptr;
  std::size_t shared_offset_ = 0, shared_bytes_ = 0;
  std::vector<std::uint32_t> load_counts_;  ///< executions of each traced load site in this block
};

struct LaunchOptions {
  /// 0: blocks in linear order (x fastest); otherwise a permutation drawn from this seed, to catch
  /// kernels that depend on block order.
  std::uint64_t shuffle_seed = 0;
  /// Non-null: trace every load_global() and load_shared() and add the per-site totals to
  /// *load_stats (which may span several launches). Tracing serialises the loads; meant for tests.
  LoadStats* load_stats = nullptr;
};

using EmulatedKernel = std::function<void(EmulatedExec&)>;

/// Runs `kernel` for every thread of every block of `grid`, as a CUDA launch
/// kernel<<<grid, block, shared_bytes>>> would; returns when all blocks are done. Throws
/// SimtMisuse for rule violations and rethrows the first exception thrown by kernel code.
void launch(Dim3 grid, Dim3 block, std::size_t shared_bytes, const EmulatedKernel& kernel,
            const LaunchOptions& options = {});

}  // namespace kvlab::simt
