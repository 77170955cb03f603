#pragma once
// Host launchers that run the SIMT kernels (attention_kernel.hpp, block_copy_kernel.hpp) under the
// SIMT emulator: the same kernel source the CUDA build runs, executed with one host thread per
// CUDA thread. Slow by design (every barrier and shuffle is a real rendezvous of host threads);
// meant for tests at small sizes. All pointers are host pointers.
#include <cstdint>

#include "kernels/attention_params.hpp"
#include "kernels/kv_view.hpp"
#include "kernels/simt/block_copy_kernel.hpp"

namespace kvlab {
namespace simt {
struct LoadStats;  // kernels/simt/emulator.hpp
}

struct EmulatedLaunchOptions {
  /// Threads per block (1-D), 1..1024; need not be a multiple of the warp size.
  unsigned block_threads = 64;
  /// Non-zero: run the grid's blocks in a shuffled order (see simt::LaunchOptions).
  std::uint64_t shuffle_seed = 0;
  /// Non-null: the attention kernel's K/V loads, from global memory and from its shared-memory
  /// tiles, are traced and judged per warp (see simt::LaunchOptions::load_stats); totals of every
  /// launch of the call are added here. The block copy kernel's loads are not traced.
  simt::LoadStats* load_stats = nullptr;
};

/// Attention (decode or prefill, see AttentionParams) via the emulated CUDA kernels; with
/// num_partitions > 1, split-KV partials go through a workspace and the merge kernel.
/// Throws InvalidArgument for unsupported dtype / head dim / layout or bad arguments.
void emulated_attention(const AttentionParams& p, const KvView& kv, int num_partitions = 1,
                        const EmulatedLaunchOptions& options = {});

/// Batched block copy via the emulated CUDA kernel (grid: min(num_pairs, 1024) blocks).
void emulated_block_copy(const simt::BlockCopyParams& c, const EmulatedLaunchOptions& options = {});

}  // namespace kvlab
