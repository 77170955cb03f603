#pragma once
// CUDA launchers for the SIMT kernels (kernels/simt/*_kernel.hpp instantiated with CudaExec).
// Only in builds with KVLAB_HAS_CUDA. Every pointer in the params and views is a device pointer;
// launches are asynchronous on `stream` unless noted.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention_params.hpp"
#include "kernels/kv_view.hpp"
#include "kernels/simt/block_copy_kernel.hpp"

namespace kvlab {

struct CudaAttentionOptions {
  /// Split-KV partitions per sequence (flash-decoding); 1 = no merge pass; 0 = one full wave of
  /// the GPU's SMs at the kernel's occupancy, capped by the longest sequence (split_kv_partitions,
  /// kernels/split_kv.hpp; the longest sequence is read from AttentionParams::host_seq_lens when set).
  int num_partitions = 0;
  /// Prefill only: the largest query count of a sequence and q_indptr[batch]. Left at -1, the
  /// launcher reads q_indptr back (one small synchronous copy on the stream).
  int max_q_len = -1;
  std::int64_t total_q = -1;
  /// Split-KV workspace in device memory of at least cuda_attention_workspace_bytes(); nullptr:
  /// allocated and freed with cudaMallocAsync / cudaFreeAsync on the stream.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  unsigned block_threads = 128;  ///< multiple of 32
};

/// Bytes of split-KV workspace for total_q query tokens (0 when num_partitions == 1);
/// num_partitions is a resolved count (cuda_attention_partitions()), never 0.
[[nodiscard]] std::size_t cuda_attention_workspace_bytes(std::int64_t total_q, int num_q_heads, int head_dim,
                                                         int num_partitions);

void cuda_attention(const AttentionParams& p, const KvView& kv, const CudaAttentionOptions& options,
                    cudaStream_t stream = nullptr);
/// The partitions cuda_attention() launches with these options on the current device: resolves 0
/// with the kernel's occupancy on this GPU (cached per device, kernel instance and block size).
/// Prefill gets 1. With q_indptr set but neither options.max_q_len nor p.host_q_indptr, the query
/// counts are unknown here and the answer is 1, where cuda_attention() reads them back first.
[[nodiscard]] int cuda_attention_partitions(const AttentionParams& p, const KvView& kv,
                                            const CudaAttentionOptions& options);

inline void cuda_attention(const AttentionParams& p, const KvView& kv, int num_partitions = 0,
                           cudaStream_t stream = nullptr) {
  CudaAttentionOptions o;
  o.num_partitions = num_partitions;
  cuda_attention(p, kv, o, stream);
}

/// Batched block copy (copy-on-write / swap); pools and block lists in device memory (pools may
/// be mapped host memory for swaps).
void cuda_block_copy(const simt::BlockCopyParams& c, cudaStream_t stream = nullptr, unsigned block_threads = 128);

}  // namespace kvlab
