#pragma once
// Arguments of the attention kernels, shared by every implementation (host, CUDA, emulated CUDA,
// float64 reference). Queries and outputs are fp32, [token][q_head][head_dim], row-major.
#include <cstdint>

#include "kernels/platform.hpp"

namespace kvlab {

/// Prefill (and decode, its one-query case): sequence s contributes the query tokens
/// q_indptr[s] .. q_indptr[s+1]-1. Its cache already holds seq_lens[s] tokens *including* these
/// queries' own K/V, so query i of n attends causally to cache tokens 0 .. seq_lens[s]-n+i.
struct AttentionParams {
  int batch = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;  ///< num_q_heads % num_kv_heads == 0 (GQA group = ratio)
  int head_dim = 0;
  float scale = 0.f;  ///< usually 1/sqrt(head_dim)
  const float* q = nullptr;
  float* out = nullptr;
  const std::int32_t* q_indptr = nullptr;  ///< [batch+1]; nullptr means one query per sequence (decode)
  const std::int32_t* seq_lens = nullptr;  ///< [batch]
  /// Optional host copies of seq_lens and q_indptr for kernels that plan on the host (FlashInfer);
  /// left null, such a kernel reads them back (one synchronous copy per call).
  const std::int32_t* host_seq_lens = nullptr;
  const std::int32_t* host_q_indptr = nullptr;

  [[nodiscard]] KVLAB_HD constexpr int group() const noexcept { return num_q_heads / num_kv_heads; }
  [[nodiscard]] KVLAB_HD constexpr int q_begin(int s) const noexcept { return q_indptr ? q_indptr[s] : s; }
  [[nodiscard]] KVLAB_HD constexpr int q_end(int s) const noexcept { return q_indptr ? q_indptr[s + 1] : s + 1; }
};

}  // namespace kvlab
