#pragma once
// The float64 reference every attention implementation is checked against. Deliberately naive:
// two passes (max, then exp-sum) in double, reading K/V one element at a time through the view.
// Host memory only.
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/attention_params.hpp"
#include "kernels/kv_view.hpp"
#include "kernels/numeric.hpp"

namespace kvlab {

/// Writes p.out as double-precision results into `out` ([total_q][num_q_heads][head_dim]).
template <class View>
void reference_attention(const AttentionParams& p, const View& kv, std::vector<double>& out) {
  const int total_q = p.q_end(p.batch - 1);
  out.assign(static_cast<std::size_t>(total_q) * p.num_q_heads * p.head_dim, 0.0);
  std::vector<double> scores;
  for (int s = 0; s < p.batch; ++s) {
    const int q0 = p.q_begin(s), n = p.q_end(s) - q0;
    const std::int64_t len = p.seq_lens[s];
    if (n > len) throw std::invalid_argument("reference_attention: more queries than cached tokens");
    for (int i = 0; i < n; ++i) {
      const std::int64_t visible = len - n + i + 1;  // causal: up to and including own position
      for (int qh = 0; qh < p.num_q_heads; ++qh) {
        const int kh = qh / p.group();
        const float* q = p.q + (static_cast<std::size_t>(q0 + i) * p.num_q_heads + qh) * p.head_dim;
        double* o = out.data() + (static_cast<std::size_t>(q0 + i) * p.num_q_heads + qh) * p.head_dim;
        scores.assign(static_cast<std::size_t>(visible), 0.0);
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t t = 0; t < visible; ++t) {
          const auto* k = kv.k(s, t, kh);
          double dot = 0;
          for (int d = 0; d < p.head_dim; ++d) dot += static_cast<double>(q[d]) * to_float(k[d]);
          scores[t] = dot * static_cast<double>(p.scale);
          mx = std::max(mx, scores[t]);
        }
        double denom = 0;
        for (std::int64_t t = 0; t < visible; ++t) denom += (scores[t] = std::exp(scores[t] - mx));
        for (std::int64_t t = 0; t < visible; ++t) {
          const auto* v = kv.v(s, t, kh);
          const double w = scores[t] / denom;
          for (int d = 0; d < p.head_dim; ++d) o[d] += w * to_float(v[d]);
        }
      }
    }
  }
}

}  // namespace kvlab
