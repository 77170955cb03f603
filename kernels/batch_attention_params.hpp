#pragma once
// The attention arguments of one batch a backend prepared: the model's heads and head dim, the
// usual 1/sqrt(head_dim) scale and the batch's lengths. Queries, outputs and (for prefill) the
// query offsets are the caller's. One place for what the replayer, the figures and the benchmarks
// all set up the same way.
#include <cmath>
#include <cstdint>

#include "alloc/backend/kv_backend.hpp"
#include "alloc/core/model_geometry.hpp"
#include "kernels/attention_params.hpp"

namespace kvlab {

/// q_indptr nullptr: decode, one query per sequence. host_q_indptr: its host copy, for kernels
/// that plan on the host (FlashInfer); the lengths' host copy comes from the batch.
[[nodiscard]] inline AttentionParams batch_attention_params(const ModelGeometry& m, const PreparedBatch& batch,
                                                            const float* q, float* out,
                                                            const std::int32_t* q_indptr = nullptr,
                                                            const std::int32_t* host_q_indptr = nullptr) {
  AttentionParams p;
  p.batch = batch.batch;
  p.num_q_heads = m.num_q_heads;
  p.num_kv_heads = m.num_kv_heads;
  p.head_dim = m.head_dim;
  p.scale = 1.f / std::sqrt(static_cast<float>(m.head_dim));
  p.q = q;
  p.out = out;
  p.q_indptr = q_indptr;
  p.seq_lens = batch.seq_lens;
  p.host_seq_lens = batch.host_seq_lens;
  p.host_q_indptr = host_q_indptr;
  return p;
}

}  // namespace kvlab
