#include "experiments/cost_model.hpp"

#include <algorithm>
#include <array>

#include "alloc/error.hpp"

namespace kvlab {

namespace {
// Datasheet HBM bandwidth and dense FP16/BF16 tensor throughput (no sparsity); host links at
// about 80 % of PCIe 4.0 x16 (A100) and 5.0 x16 (H100, H200) per direction.
const std::array<DeviceModel, 4> kDevices = {{
    {"a100-40gb", 1.555e12, 312e12, 25e9},
    {"a100-80gb", 2.039e12, 312e12, 25e9},
    {"h100-sxm", 3.35e12, 989e12, 50e9},
    {"h200", 4.8e12, 989e12, 50e9},
}};
}  // namespace

DeviceModel device_model_preset(std::string_view name) {
  for (const auto& d : kDevices)
    if (d.name == name) return d;
  std::string known;
  for (const auto& d : kDevices) known += (known.empty() ? "" : ", ") + d.name;
  KVLAB_THROW(InvalidArgument, "unknown device model '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<std::string> device_model_names() {
  std::vector<std::string> names;
  for (const auto& d : kDevices) names.push_back(d.name);
  return names;
}

double step_seconds(const ModelGeometry& model, const DeviceModel& device, const StepWork& work) {
  const double tokens = static_cast<double>(work.prefill_tokens + work.decode_tokens);
  if (tokens == 0) return 0;
  const double bytes = static_cast<double>(model.weight_bytes()) +
                       static_cast<double>(work.kv_tokens_read) * static_cast<double>(model.kv_bytes_per_token()) +
                       tokens * static_cast<double>(model.kv_bytes_per_token());
  const double flops = 2.0 * static_cast<double>(model.num_parameters) * tokens +
                       4.0 * model.num_layers * model.num_q_heads * model.head_dim *
                           static_cast<double>(work.attention_pairs);
  return std::max(bytes / device.memory_bandwidth, flops / device.peak_flops);
}

}  // namespace kvlab
