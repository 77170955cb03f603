#pragma once
// A small model whose numbers are easy to compute by hand: 2 layers, 4 query / 2 KV heads,
// head dim 32, fp16 -> 256 KV bytes per token per layer, 512 per token.
#include "alloc/core/model_geometry.hpp"

namespace kvlab::testing {

inline ModelGeometry tiny_model(DType dtype = DType::f16) {
  ModelGeometry m;
  m.name = "tiny";
  m.num_layers = 2;
  m.num_q_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 32;
  m.kv_dtype = dtype;
  m.num_parameters = 1'000'000;
  m.max_context = 128;
  return m;
}

}  // namespace kvlab::testing
