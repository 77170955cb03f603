#include "serving/replay/kv_fill.hpp"

#include <algorithm>

#include "alloc/core/error.hpp"
#include "alloc/faults/fault_injection.hpp"
#include "kernels/dispatch.hpp"
#include "serving/replay/kv_rows.hpp"

namespace kvlab {

namespace {
constexpr std::size_t kPeriod = 15;
}  // namespace

KvFill::KvFill(KvBackend& backend, int layers) : b_(backend), layers_(std::min(layers, backend.model().num_layers)) {
  KVLAB_EXPECTS(backend.has_storage(), "filling KV needs a backend with KV storage");
  KVLAB_EXPECTS(backend.device() == Device::host, "KV is filled on the host only");
  KVLAB_EXPECTS(layers_ >= 1, "at least one layer to fill");
}

void KvFill::write(std::span<const ComputedTokens> tokens) {
  if (tokens.empty()) return;
  ids_.clear();
  for (const ComputedTokens& c : tokens) ids_.push_back(c.id);
  const ModelGeometry& m = b_.model();
  const ScopedFaultPause observer;  // staging the step's views again is not one of its operations
  b_.prepare_batch(ids_);
  for (int layer = 0; layer < layers_; ++layer) {
    const HostMetadata host(b_.layer_view(layer), static_cast<int>(ids_.size()), Device::host);
    visit_kv_view(host.view, [&](auto typed, auto) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(typed.k(0, 0, 0))>>;
      // Small values in [-0.875, 0.875] varying with token and element, never a row of zeros: row
      // (i + t) % 15 - 7 eighths, so 15 rows serve every token.
      const std::size_t width = static_cast<std::size_t>(m.num_kv_heads) * m.head_dim;
      std::vector<T> rows(kPeriod * width);
      for (std::size_t r = 0; r < kPeriod; ++r)
        for (std::size_t i = 0; i < width; ++i)
          rows[r * width + i] = from_float<T>(static_cast<float>(static_cast<int>((i + r) % kPeriod) - 7) * 0.125f);
      for (std::size_t s = 0; s < tokens.size(); ++s)
        for (std::int64_t t = tokens[s].from; t < tokens[s].from + tokens[s].count; ++t) {
          T* row = rows.data() + static_cast<std::size_t>(t % static_cast<std::int64_t>(kPeriod)) * width;
          for (int kv = 0; kv < 2; ++kv)
            move_row(Device::host, typed, static_cast<int>(s), t, kv, m.num_kv_heads, m.head_dim, row, false);
          rows_ += 2;
        }
    });
  }
}

}  // namespace kvlab
