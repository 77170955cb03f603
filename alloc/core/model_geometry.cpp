#include "alloc/core/model_geometry.hpp"

#include <array>

#include "alloc/core/error.hpp"

namespace kvlab {

namespace {
// Published architectures (config.json of each model). Parameters are the usual rounded counts.
const std::array<ModelGeometry, 8> kPresets = {{
    {"opt-13b", 40, 40, 40, 128, DType::f16, 12'850'000'000, 2048},
    {"opt-66b", 64, 72, 72, 128, DType::f16, 65'700'000'000, 2048},
    {"opt-175b", 96, 96, 96, 128, DType::f16, 175'000'000'000, 2048},
    {"llama-2-7b", 32, 32, 32, 128, DType::f16, 6'740'000'000, 4096},
    {"llama-3-8b", 32, 32, 8, 128, DType::f16, 8'030'000'000, 8192},
    {"yi-6b", 32, 32, 4, 128, DType::f16, 6'060'000'000, 4096},
    {"yi-34b", 60, 56, 8, 128, DType::f16, 34'390'000'000, 4096},
    {"llama-3-70b", 80, 64, 8, 128, DType::f16, 70'550'000'000, 8192},
}};
}  // namespace

void ModelGeometry::validate() const {
  KVLAB_EXPECTS(num_layers > 0, "model '" + name + "': layers must be positive");
  KVLAB_EXPECTS(num_q_heads > 0, "model '" + name + "': query heads must be positive");
  KVLAB_EXPECTS(num_kv_heads > 0, "model '" + name + "': KV heads must be positive");
  KVLAB_EXPECTS(num_q_heads % num_kv_heads == 0, "model '" + name + "': query heads must be a multiple of KV heads");
  KVLAB_EXPECTS(head_dim > 0, "model '" + name + "': head dim must be positive");
  KVLAB_EXPECTS(num_parameters >= 0, "model '" + name + "': parameter count must not be negative");
  KVLAB_EXPECTS(max_context > 0, "model '" + name + "': max context must be positive");
}

ModelGeometry model_preset(std::string_view name) {
  for (const auto& m : kPresets)
    if (m.name == name) return m;
  std::string known;
  for (const auto& m : kPresets) known += (known.empty() ? "" : ", ") + m.name;
  KVLAB_THROW(InvalidArgument, "unknown model '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& m : kPresets) names.push_back(m.name);
  return names;
}

}  // namespace kvlab
