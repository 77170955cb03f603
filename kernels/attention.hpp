#pragma once
// Attention over a KV view: decode (one query per sequence) and prefill (many queries, causal,
// appended after a cached prefix) are the same entry point; AttentionParams::q_indptr tells them
// apart. The implementation is chosen by device; dtype, head dim and layout are dispatched in
// kernels/dispatch.hpp.
#include "alloc/device.hpp"
#include "kernels/attention_params.hpp"
#include "kernels/kv_view.hpp"
#include "kernels/simt/block_copy_kernel.hpp"
#include "kernels/thread_pool.hpp"

namespace kvlab {

/// Checks that params and view agree (heads, head dim, GQA ratio, pointers); throws InvalidArgument.
void validate_attention(const AttentionParams& p, const KvView& kv);

/// Checks that every sequence holds at least its own query tokens (reads q_indptr and seq_lens, so
/// host memory only); throws InvalidArgument.
void validate_host_lengths(const AttentionParams& p);

/// Host implementation: parallel over (sequence, KV head) on `pool`, vectorised over head_dim,
/// online softmax in fp32, K/V converted from their storage dtype tile by tile.
void host_attention(const AttentionParams& p, const KvView& kv, ThreadPool& pool = default_thread_pool());

/// Runs attention on `device`: the host kernels on host memory (Device::host), the CUDA kernels
/// (split-KV, 2 partitions) on device memory (Device::cuda), or the same CUDA kernels under the
/// host SIMT emulator on the emulated device's memory (Device::emulated). Asynchronous on a GPU.
void attention(Device device, const AttentionParams& p, const KvView& kv);

/// The batched block copy kernel (copy-on-write) on `device` (cuda: launched and synchronised;
/// emulated: under the SIMT emulator); every pointer in `c` is the device's. Host backends copy
/// with memmove instead: InvalidArgument for Device::host.
void block_copy(Device device, const simt::BlockCopyParams& c);

}  // namespace kvlab
