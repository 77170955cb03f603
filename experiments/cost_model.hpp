#pragma once
// Memory mode's clock: a declared roofline per step, max(bytes / bandwidth, flops / peak), over the
// weights and the KV bytes the step reads and writes. Presets carry vendor datasheet numbers;
// results say they are modelled, never measured.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "alloc/model_geometry.hpp"

namespace kvlab {

struct DeviceModel {
  std::string name;
  double memory_bandwidth = 0;  ///< bytes/s
  double peak_flops = 0;        ///< dense fp16 FLOP/s
  double host_bandwidth = 25e9;  ///< bytes/s between host and device memory (PCIe), one direction
};

/// a100-40gb, a100-80gb, h100-sxm, h200. Throws InvalidArgument listing them on an unknown name.
[[nodiscard]] DeviceModel device_model_preset(std::string_view name);
[[nodiscard]] std::vector<std::string> device_model_names();

struct StepWork {
  std::int64_t prefill_tokens = 0;   ///< new prompt tokens computed this step
  std::int64_t decode_tokens = 0;    ///< sequences decoding one token
  std::int64_t kv_tokens_read = 0;   ///< cache tokens attended to (summed over query tokens' sequences)
  std::int64_t attention_pairs = 0;  ///< query-token x key-token products
};

/// Modelled seconds for one step of `model` on `device`.
[[nodiscard]] double step_seconds(const ModelGeometry& model, const DeviceModel& device, const StepWork& work);

}  // namespace kvlab
