#include "kernels/simt/emulator.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace kvlab::simt {
namespace detail {
namespace {

/// Thrown inside team threads to unwind a kernel once the launch has been aborted.
struct Aborted {};

bool same_site(const Site& a, const Site& b) noexcept {
  return a.line == b.line && a.column == b.column &&
         (a.file == b.file || (a.file && b.file && std::strcmp(a.file, b.file) == 0));
}
std::string describe(const Site& s) {
  return std::string(s.file ? s.file : "?") + ":" + std::to_string(s.line) + ":" + std::to_string(s.column);
}
std::string describe(Dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

}  // namespace

/// Shared state of one launch. Every field below `mutex_` is guarded by it.
class Team {
 public:
  Team(Dim3 grid, Dim3 block, std::size_t shared_bytes, const EmulatedKernel& kernel, const LaunchOptions& options)
      : grid_(grid), block_(block), kernel_(kernel), load_stats_(options.load_stats) {
    threads_ = static_cast<unsigned>(volume(block));
    num_warps_ = (threads_ + kWarpSize - 1) / kWarpSize;
    warps_ = std::make_unique<Warp[]>(num_warps_);
    shared_bytes_ = shared_bytes;
    arena_.reset(
        static_cast<unsigned char*>(::operator new[](std::max<std::size_t>(shared_bytes, 1), std::align_val_t(64))));
    order_.resize(volume(grid));
    std::iota(order_.begin(), order_.end(), 0ull);
    if (options.shuffle_seed != 0) {
      std::mt19937_64 rng(options.shuffle_seed);
      std::shuffle(order_.begin(), order_.end(), rng);
    }
    reset_block_state();
  }

  void run() {
    std::vector<std::thread> threads;
    threads.reserve(threads_);
    try {
      for (unsigned i = 0; i < threads_; ++i) threads.emplace_back([this, i] { thread_main(i); });
    } catch (...) {
      abort(std::current_exception());
    }
    for (auto& t : threads) t.join();
    if (error_) std::rethrow_exception(error_);
    if (load_stats_) export_loads(*load_stats_);
  }

  [[nodiscard]] bool tracing_loads() const noexcept { return load_stats_ != nullptr; }

  /// Records one lane's traced load: its request is (warp, site, how often this lane has executed
  /// the site in this block), so the lanes of a warp meet in one request whatever order the host
  /// threads run in (see emulator.hpp for what that assumes).
  void record_load(EmulatedExec& me, const void* p, std::size_t bytes, Site site, MemorySpace space) {
    std::lock_guard lock(trace_mutex_);
    std::size_t id = 0;
    while (id < load_sites_.size() &&
           !(load_sites_[id].totals.space == space && same_site(load_sites_[id].where, site)))
      ++id;
    if (id == load_sites_.size()) {
      load_sites_.push_back({site, {}});
      load_sites_.back().totals.space = space;
    }
    if (me.load_counts_.size() <= id) me.load_counts_.resize(id + 1, 0);
    const std::uint32_t k = me.load_counts_[id]++;
    pending_loads_[{me.warp_, id, k}].push_back({me.lane_, reinterpret_cast<std::uintptr_t>(p), bytes});
  }

  std::uint64_t shuffle(EmulatedExec& me, std::uint64_t bits, int mode, int b, int width, Site site) {
    if (width < 1 || width > kWarpSize || (width & (width - 1)) != 0)
      misuse_from_kernel("shuffle width " + std::to_string(width) + " is not a power of two <= 32 at " +
                         describe(site));
    Warp& w = warps_[me.warp_];
    std::unique_lock lock(mutex_);
    throw_if_aborted();
    const int buf = w.parity;
    w.slots[buf][me.lane_] = bits;
    if (w.arrived_mask == 0) {
      w.site = site;
    } else if (!same_site(w.site, site)) {
      abort_locked(misuse("divergent shuffle in block " + describe(me.block_idx_) + " warp " +
                          std::to_string(me.warp_) + ": lanes at " + describe(w.site) + " and " + describe(site)));
      throw Aborted{};
    }
    w.arrived_mask |= 1u << me.lane_;
    if (std::popcount(w.arrived_mask) == std::popcount(w.live_mask)) {
      complete_warp(w, true);
      lock.unlock();
    } else {
      const std::uint64_t gen = w.generation.load(std::memory_order_relaxed);
      block_and_check(lock);
      wait_for(lock, w.cv, w.generation, gen);
    }
    // Without the lock: slots[buf] is rewritten only by the shuffle after next, which cannot
    // start before this lane arrives at the next one (double buffering).
    const int src = shuffle_source(mode, static_cast<int>(me.lane_), b, width);
    if (src < 0 || !(w.participants[buf] >> src & 1u)) return bits;
    return w.slots[buf][src];
  }

  void sync_threads(EmulatedExec& me, Site site) {
    std::unique_lock lock(mutex_);
    throw_if_aborted();
    if (block_arrived_ == 0) {
      block_site_ = site;
    } else if (!same_site(block_site_, site)) {
      abort_locked(misuse("divergent __syncthreads in block " + describe(me.block_idx_) + ": threads at " +
                          describe(block_site_) + " and " + describe(site)));
      throw Aborted{};
    }
    if (++block_arrived_ == live_) {
      complete_block(true);
    } else {
      const std::uint64_t gen = block_generation_.load(std::memory_order_relaxed);
      block_and_check(lock);
      wait_for(lock, block_cv_, block_generation_, gen);
    }
  }

  [[noreturn]] void misuse_from_kernel(const std::string& what) {
    std::unique_lock lock(mutex_);
    abort_locked(misuse(what));
    throw Aborted{};
  }

 private:
  struct Warp {
    std::uint32_t live_mask = 0;     // lanes that exist and have not exited
    std::uint32_t arrived_mask = 0;  // lanes waiting in the current shuffle
    std::uint32_t participants[2] = {0, 0};
    int parity = 0;
    std::atomic<std::uint64_t> generation{0};
    Site site;
    std::uint64_t slots[2][kWarpSize] = {};
    std::condition_variable cv;
  };

  static std::exception_ptr misuse(const std::string& what) {
    return std::make_exception_ptr(SimtMisuse(::kvlab::detail::located(__FILE__, __LINE__, "simt emulator: " + what)));
  }

  void thread_main(unsigned linear) {
    EmulatedExec ex;
    ex.team_ = this;
    ex.block_dim_ = block_;
    ex.grid_dim_ = grid_;
    ex.linear_ = linear;
    ex.lane_ = linear % kWarpSize;
    ex.warp_ = linear / kWarpSize;
    ex.thread_idx_ = {linear % block_.x, linear / block_.x % block_.y, linear / (block_.x * block_.y)};
    ex.shared_base_ = arena_.get();
    ex.shared_bytes_ = shared_bytes_;
    for (unsigned long long b : order_) {
      ex.block_idx_ = {static_cast<unsigned>(b % grid_.x), static_cast<unsigned>(b / grid_.x % grid_.y),
                       static_cast<unsigned>(b / (static_cast<unsigned long long>(grid_.x) * grid_.y))};
      ex.shared_offset_ = 0;
      ex.load_counts_.clear();
      try {
        kernel_(ex);
      } catch (const Aborted&) {
      } catch (...) {
        abort(std::current_exception());
      }
      if (!exit_thread(ex)) return;
    }
  }

  /// The thread returned from the kernel for this block: it stops counting for barriers and
  /// shuffles, then waits for the rest of the team before the next block. False: launch aborted.
  bool exit_thread(EmulatedExec& me) {
    std::unique_lock lock(mutex_);
    if (aborted_) return false;
    Warp& w = warps_[me.warp_];
    w.live_mask &= ~(1u << me.lane_);
    --live_;
    if (w.arrived_mask != 0 && std::popcount(w.arrived_mask) == std::popcount(w.live_mask)) complete_warp(w, false);
    if (block_arrived_ > 0 && block_arrived_ == live_) complete_block(false);
    if (live_ > 0 && blocked_ == live_) {
      abort_locked(deadlock_error());
      return false;
    }
    // Rendezvous of the whole team before the next block.
    if (++team_arrived_ == threads_) {
      reset_block_state();
      team_generation_.fetch_add(1, std::memory_order_release);
      team_cv_.notify_all();
      return true;
    }
    try {
      wait_for(lock, team_cv_, team_generation_, team_generation_.load(std::memory_order_relaxed));
    } catch (const Aborted&) {
      return false;
    }
    return true;
  }

  void reset_block_state() {
    fold_pending_loads();
    live_ = threads_;
    blocked_ = 0;
    block_arrived_ = 0;
    team_arrived_ = 0;
    for (unsigned i = 0; i < num_warps_; ++i) {
      const unsigned lanes = std::min<unsigned>(kWarpSize, threads_ - i * kWarpSize);
      warps_[i].live_mask = lanes == kWarpSize ? 0xffffffffu : (1u << lanes) - 1u;
      warps_[i].arrived_mask = 0;
    }
    std::memset(arena_.get(), 0xff, shared_bytes_);
  }

  /// `by_arrival`: the completing thread is one of the arrivals (and never blocked).
  void complete_warp(Warp& w, bool by_arrival) {
    blocked_ -= static_cast<unsigned>(std::popcount(w.arrived_mask)) - (by_arrival ? 1 : 0);
    w.participants[w.parity] = w.arrived_mask;
    w.parity ^= 1;
    w.arrived_mask = 0;
    w.generation.fetch_add(1, std::memory_order_release);
    w.cv.notify_all();
  }
  void complete_block(bool by_arrival) {
    blocked_ -= block_arrived_ - (by_arrival ? 1 : 0);
    block_arrived_ = 0;
    block_generation_.fetch_add(1, std::memory_order_release);
    block_cv_.notify_all();
  }
  /// Called by a thread about to wait: if every live thread is now waiting, nothing can release
  /// them (completions happen on arrival), so the kernel would hang on a GPU.
  void block_and_check(std::unique_lock<std::mutex>& lock) {
    (void)lock;
    ++blocked_;
    if (blocked_ == live_) {
      abort_locked(deadlock_error());
      throw Aborted{};
    }
  }
  std::exception_ptr deadlock_error() {
    std::string what = "deadlock: every live thread of the block waits";
    if (block_arrived_ > 0)
      what += "; " + std::to_string(block_arrived_) + " of " + std::to_string(live_) + " at __syncthreads " +
              describe(block_site_);
    for (unsigned i = 0; i < num_warps_; ++i)
      if (warps_[i].arrived_mask)
        what += "; warp " + std::to_string(i) + " lanes " + std::to_string(std::popcount(warps_[i].arrived_mask)) +
                " of " + std::to_string(std::popcount(warps_[i].live_mask)) + " at shuffle " + describe(warps_[i].site);
    return misuse(what);
  }

  void throw_if_aborted() const {
    if (aborted_.load(std::memory_order_acquire)) throw Aborted{};
  }

  /// Waits (lock held on entry, released on return) until `generation` moves past `old`: first
  /// spins yielding the CPU (a barrier episode needs every thread of the team to be scheduled, and
  /// futex sleeps per thread cost far more), then sleeps on `cv`. Throws Aborted on abort.
  void wait_for(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                const std::atomic<std::uint64_t>& generation, std::uint64_t old) {
    lock.unlock();
    for (int i = 0; i < kSpins; ++i) {
      if (generation.load(std::memory_order_acquire) != old) return;
      if (aborted_.load(std::memory_order_acquire)) throw Aborted{};
      std::this_thread::yield();
    }
    lock.lock();
    ++sleepers_;
    cv.wait(lock, [&] {
      return generation.load(std::memory_order_acquire) != old || aborted_.load(std::memory_order_relaxed);
    });
    --sleepers_;
    lock.unlock();
    throw_if_aborted();
  }
  static constexpr int kSpins = 256;
  void abort(std::exception_ptr e) {
    std::lock_guard lock(mutex_);
    abort_locked(std::move(e));
  }
  void abort_locked(std::exception_ptr e) {
    if (!error_) error_ = std::move(e);
    aborted_.store(true, std::memory_order_release);
    block_cv_.notify_all();
    team_cv_.notify_all();
    for (unsigned i = 0; i < num_warps_; ++i) warps_[i].cv.notify_all();
  }

  struct Access {
    unsigned lane;
    std::uintptr_t at;
    std::size_t bytes;
  };

  /// Distinct bytes the lanes of one request asked for: the union of their spans.
  static std::uint64_t bytes_used(const std::vector<Access>& lanes) {
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> spans;
    for (const Access& a : lanes) spans.emplace_back(a.at, a.at + a.bytes);
    std::sort(spans.begin(), spans.end());
    std::uint64_t used = 0;
    std::uintptr_t covered = 0;
    for (const auto& [b, e] : spans) {
      const std::uintptr_t from = std::max(b, covered);
      if (e > from) used += e - from;
      covered = std::max(covered, e);
    }
    return used;
  }
  /// Global: the 32-byte sectors the request touches.
  static std::uint64_t sectors(const std::vector<Access>& lanes) {
    std::vector<std::uintptr_t> touched;
    for (const Access& a : lanes)
      for (std::uintptr_t s = a.at / LoadStats::kSectorBytes; s <= (a.at + a.bytes - 1) / LoadStats::kSectorBytes; ++s)
        touched.push_back(s);
    std::sort(touched.begin(), touched.end());
    return static_cast<std::uint64_t>(std::unique(touched.begin(), touched.end()) - touched.begin());
  }
  /// Shared: (passes, passes without conflicts). Lanes are served in phases of 32 / (bytes / 4)
  /// lanes; within a phase a bank delivers one word per pass, the same word to any number of lanes.
  static std::pair<std::uint64_t, std::uint64_t> wavefronts(const std::vector<Access>& lanes) {
    std::size_t widest = 0;
    for (const Access& a : lanes) widest = std::max(widest, a.bytes);
    const unsigned phases = widest <= LoadStats::kBankBytes ? 1 : static_cast<unsigned>(widest / LoadStats::kBankBytes);
    const unsigned lanes_per_phase = kWarpSize / phases;
    std::uint64_t passes = 0, ideal = 0;
    std::vector<std::pair<unsigned, std::uintptr_t>> words;  // (bank, word)
    for (unsigned ph = 0; ph < phases; ++ph) {
      words.clear();
      for (const Access& a : lanes) {
        if (a.lane / lanes_per_phase != ph) continue;
        for (std::uintptr_t w = a.at / LoadStats::kBankBytes; w <= (a.at + a.bytes - 1) / LoadStats::kBankBytes; ++w)
          words.emplace_back(static_cast<unsigned>(w % LoadStats::kBanks), w);
      }
      if (words.empty()) continue;
      std::sort(words.begin(), words.end());
      words.erase(std::unique(words.begin(), words.end()), words.end());
      std::uint64_t most = 0, run = 0;
      for (std::size_t i = 0; i < words.size(); ++i) {
        run = i > 0 && words[i].first == words[i - 1].first ? run + 1 : 1;
        most = std::max(most, run);
      }
      passes += most;
      ++ideal;
    }
    return {passes, ideal};
  }

  /// Judges the block's finished requests (called between blocks, when no thread records).
  void fold_pending_loads() {
    std::lock_guard lock(trace_mutex_);
    for (auto& [key, lanes] : pending_loads_) {
      LoadSite& totals = load_sites_[std::get<1>(key)].totals;
      ++totals.requests;
      totals.bytes_used += bytes_used(lanes);
      if (totals.space == MemorySpace::global) {
        totals.sectors += sectors(lanes);
      } else {
        const auto [passes, ideal] = wavefronts(lanes);
        totals.wavefronts += passes;
        totals.ideal_wavefronts += ideal;
      }
    }
    pending_loads_.clear();
  }
  void export_loads(LoadStats& out) {
    std::lock_guard lock(trace_mutex_);
    for (auto& s : load_sites_) {
      const std::string name = describe(s.where);
      auto it = std::find_if(out.sites.begin(), out.sites.end(),
                             [&](const LoadSite& o) { return o.site == name && o.space == s.totals.space; });
      if (it == out.sites.end()) {
        out.sites.push_back(s.totals);
        out.sites.back().site = name;
      } else {
        it->requests += s.totals.requests;
        it->bytes_used += s.totals.bytes_used;
        it->sectors += s.totals.sectors;
        it->wavefronts += s.totals.wavefronts;
        it->ideal_wavefronts += s.totals.ideal_wavefronts;
      }
    }
  }

  const Dim3 grid_, block_;
  const EmulatedKernel& kernel_;
  LoadStats* const load_stats_;
  struct TracedSite {
    Site where;
    LoadSite totals;
  };
  std::mutex trace_mutex_;  // guards the three below; taken inside mutex_, never the other way
  std::vector<TracedSite> load_sites_;
  std::map<std::tuple<unsigned, std::size_t, std::uint32_t>, std::vector<Access>> pending_loads_;
  unsigned threads_ = 0, num_warps_ = 0;
  std::size_t shared_bytes_ = 0;
  // Over-aligned like CUDA's shared memory; freed with the matching aligned delete.
  struct AlignedDelete {
    void operator()(unsigned char* p) const noexcept { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<unsigned char[], AlignedDelete> arena_;
  std::vector<unsigned long long> order_;

  std::mutex mutex_;
  std::unique_ptr<Warp[]> warps_;
  unsigned live_ = 0;     // threads of the current block that have not exited
  unsigned blocked_ = 0;  // live threads waiting in sync_threads or a shuffle
  unsigned block_arrived_ = 0;
  std::atomic<std::uint64_t> block_generation_{0};
  Site block_site_;
  std::condition_variable block_cv_;
  unsigned sleepers_ = 0;  // threads in a condition-variable wait (diagnostics only)
  unsigned team_arrived_ = 0;
  std::atomic<std::uint64_t> team_generation_{0};
  std::condition_variable team_cv_;
  std::atomic<bool> aborted_{false};
  std::exception_ptr error_;
};

}  // namespace detail

void EmulatedExec::sync_threads(std::source_location loc) { team_->sync_threads(*this, detail::Site::of(loc)); }

std::uint64_t EmulatedExec::shuffle_bits(std::uint64_t bits, int mode, int b, int width, detail::Site site) {
  return team_->shuffle(*this, bits, mode, b, width, site);
}

void EmulatedExec::check_shared(std::size_t at, std::size_t bytes) const {
  if (at + bytes > shared_bytes_)
    team_->misuse_from_kernel("shared memory overflow in block (" + std::to_string(block_idx_.x) + "," +
                              std::to_string(block_idx_.y) + "," + std::to_string(block_idx_.z) +
                              "): " + std::to_string(at + bytes) + " bytes needed, launch passed " +
                              std::to_string(shared_bytes_));
}

void EmulatedExec::note_load(const void* p, std::size_t bytes, detail::Site site, MemorySpace space) {
  const bool shared = space == MemorySpace::shared;
  const auto where = [&] {
    char at[32];
    std::snprintf(at, sizeof at, "%p", p);
    return std::string(at) + " (" + detail::describe(site) + ", block " + detail::describe(block_idx_) + ")";
  };
  if (shared && (static_cast<const unsigned char*>(p) < shared_base_ ||
                 static_cast<const unsigned char*>(p) + bytes > shared_base_ + shared_bytes_))
    team_->misuse_from_kernel("shared load of " + std::to_string(bytes) + " bytes at " + where() +
                              " outside the block's " + std::to_string(shared_bytes_) + " bytes of shared memory");
  if (reinterpret_cast<std::uintptr_t>(p) % bytes != 0)
    team_->misuse_from_kernel("misaligned " + std::string(shared ? "shared" : "global") + " load of " +
                              std::to_string(bytes) + " bytes at " + where() +
                              ": a GPU faults with cudaErrorMisalignedAddress");
  if (team_->tracing_loads()) team_->record_load(*this, p, bytes, site, space);
}

std::vector<LoadSite> LoadStats::of(MemorySpace space) const {
  std::vector<LoadSite> v;
  for (const auto& s : sites)
    if (s.space == space) v.push_back(s);
  return v;
}

LoadSite LoadStats::total(MemorySpace space) const {
  LoadSite t;
  t.site = "all traced loads";
  t.space = space;
  for (const auto& s : of(space)) {
    t.requests += s.requests;
    t.bytes_used += s.bytes_used;
    t.sectors += s.sectors;
    t.wavefronts += s.wavefronts;
    t.ideal_wavefronts += s.ideal_wavefronts;
  }
  return t;
}

const LoadSite& LoadStats::site(std::string_view part) const {
  const LoadSite* found = nullptr;
  for (const auto& s : sites) {
    if (s.site.find(part) == std::string::npos) continue;
    KVLAB_EXPECTS(found == nullptr, "several traced load sites match '" + std::string(part) + "'");
    found = &s;
  }
  KVLAB_EXPECTS(found != nullptr, "no traced load site matches '" + std::string(part) + "'");
  return *found;
}

void launch(Dim3 grid, Dim3 block, std::size_t shared_bytes, const EmulatedKernel& kernel,
            const LaunchOptions& options) {
  KVLAB_EXPECTS(volume(block) >= 1 && volume(block) <= 1024, "block must hold 1..1024 threads");
  KVLAB_EXPECTS(grid.y <= 65535 && grid.z <= 65535, "grid.y and grid.z must be <= 65535");
  KVLAB_EXPECTS(kernel != nullptr, "kernel must be callable");
  if (volume(grid) == 0) return;
  detail::Team team(grid, block, shared_bytes, kernel, options);
  team.run();
}

}  // namespace kvlab::simt
