#pragma once
// The shape of a model as far as its KV cache is concerned. Presets carry the published
// architecture of each model; everything kvlab measures in tokens is converted to bytes here.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "alloc/core/dtype.hpp"

namespace kvlab {

struct ModelGeometry {
  std::string name;
  int num_layers = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;  ///< num_q_heads is a multiple of this (grouped-query attention)
  int head_dim = 0;
  DType kv_dtype = DType::f16;
  std::int64_t num_parameters = 0;  ///< for the weight-bytes term of the cost model
  int max_context = 0;              ///< the model's trained context length (default max_seq_len)

  /// K and V of one token in one layer.
  [[nodiscard]] std::size_t kv_bytes_per_token_per_layer() const noexcept {
    return 2 * static_cast<std::size_t>(num_kv_heads) * static_cast<std::size_t>(head_dim) * size_of(kv_dtype);
  }
  /// K and V of one token in every layer (vLLM's "800 KB per token" for OPT-13B at fp16).
  [[nodiscard]] std::size_t kv_bytes_per_token() const noexcept {
    return kv_bytes_per_token_per_layer() * static_cast<std::size_t>(num_layers);
  }
  [[nodiscard]] std::size_t weight_bytes() const noexcept {
    return static_cast<std::size_t>(num_parameters) * size_of(kv_dtype);
  }
  [[nodiscard]] int gqa_group() const noexcept { return num_q_heads / num_kv_heads; }

  /// Throws InvalidArgument naming the first bad field.
  void validate() const;
};

/// Preset by name: opt-13b, opt-66b, opt-175b, llama-2-7b, llama-3-8b, yi-6b, yi-34b, llama-3-70b.
/// Throws InvalidArgument listing the known names on an unknown one.
[[nodiscard]] ModelGeometry model_preset(std::string_view name);
[[nodiscard]] std::vector<std::string> model_preset_names();

}  // namespace kvlab
