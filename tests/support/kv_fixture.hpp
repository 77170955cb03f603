#pragma once
// Random KV caches for kernel tests: the same token data laid out both contiguously and in a
// shuffled block pool, so one test can run a kernel through either view and compare with the
// float64 reference. Values are fresh random numbers (never zeros); outputs start poisoned (NaN).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_params.hpp"
#include "kernels/kv_view.hpp"
#include "kernels/reference_attention.hpp"

namespace kvlab::testing {

struct KvShape {
  std::vector<std::int32_t> seq_lens;  ///< cache tokens per sequence (including new queries)
  std::vector<std::int32_t> q_lens;    ///< query tokens per sequence; empty = decode (1 each)
  int num_q_heads = 4;
  int num_kv_heads = 1;
  int head_dim = 64;
  int block_size = 16;  ///< for the paged layout
  std::uint64_t seed = 1;
};

template <class T>
class KvFixture {
 public:
  explicit KvFixture(const KvShape& shape) : shape_(shape) {
    const int batch = static_cast<int>(shape.seq_lens.size());
    const std::int64_t row = static_cast<std::int64_t>(shape.num_kv_heads) * shape.head_dim;
    std::mt19937_64 rng(shape.seed);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    std::normal_distribution<float> normal(0.f, 1.f);

    // Contiguous: one buffer per sequence, [token][kv_head][head_dim].
    k_.resize(batch);
    v_.resize(batch);
    for (int s = 0; s < batch; ++s) {
      k_[s].resize(static_cast<std::size_t>(shape.seq_lens[s]) * row);
      v_[s].resize(k_[s].size());
      for (auto& x : k_[s]) x = from_float<T>(uni(rng));
      for (auto& x : v_[s]) x = from_float<T>(uni(rng));
      k_ptr_.push_back(k_[s].data());
      v_ptr_.push_back(v_[s].data());
    }

    // Paged: the same rows in blocks handed out in a random order.
    const int bs = shape.block_size;
    int max_blocks = 0, total_blocks = 0;
    for (int len : shape.seq_lens) {
      max_blocks = std::max(max_blocks, (len + bs - 1) / bs);
      total_blocks += (len + bs - 1) / bs;
    }
    total_blocks += 3;  // unused blocks in the pool, poisoned, so a bad lookup reads garbage
    std::vector<std::int32_t> order(static_cast<std::size_t>(total_blocks));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    block_table_.assign(static_cast<std::size_t>(batch) * std::max(max_blocks, 1), -1);
    block_table_stride_ = std::max(max_blocks, 1);
    const std::int64_t block_elems = bs * row;
    k_pool_.assign(static_cast<std::size_t>(total_blocks) * block_elems, from_float<T>(NAN));
    v_pool_.assign(k_pool_.size(), from_float<T>(NAN));
    int next = 0;
    for (int s = 0; s < batch; ++s) {
      const int nb = (shape.seq_lens[s] + bs - 1) / bs;
      for (int b = 0; b < nb; ++b) block_table_[s * block_table_stride_ + b] = order[next++];
      for (int t = 0; t < shape.seq_lens[s]; ++t) {
        const std::int64_t dst = block_table_[s * block_table_stride_ + t / bs] * block_elems + (t % bs) * row;
        std::copy_n(&k_[s][t * row], row, &k_pool_[dst]);
        std::copy_n(&v_[s][t * row], row, &v_pool_[dst]);
      }
    }

    // Queries and poisoned outputs.
    q_indptr_.push_back(0);
    for (int s = 0; s < batch; ++s)
      q_indptr_.push_back(q_indptr_.back() + (shape.q_lens.empty() ? 1 : shape.q_lens[s]));
    q_.resize(static_cast<std::size_t>(q_indptr_.back()) * shape.num_q_heads * shape.head_dim);
    for (auto& x : q_) x = normal(rng);
    out_.assign(q_.size(), NAN);
  }

  // The views point into this object's own buffers: a copy would dangle.
  KvFixture(const KvFixture&) = delete;
  KvFixture& operator=(const KvFixture&) = delete;

  [[nodiscard]] AttentionParams params() {
    AttentionParams p;
    p.batch = static_cast<int>(shape_.seq_lens.size());
    p.num_q_heads = shape_.num_q_heads;
    p.num_kv_heads = shape_.num_kv_heads;
    p.head_dim = shape_.head_dim;
    p.scale = 1.f / std::sqrt(static_cast<float>(shape_.head_dim));
    p.q = q_.data();
    p.out = out_.data();
    p.q_indptr = shape_.q_lens.empty() ? nullptr : q_indptr_.data();
    p.seq_lens = shape_.seq_lens.data();
    return p;
  }
  [[nodiscard]] ContiguousKv<T> contiguous() const {
    const std::int64_t row = static_cast<std::int64_t>(shape_.num_kv_heads) * shape_.head_dim;
    return {k_ptr_.data(), v_ptr_.data(), row, shape_.head_dim};
  }
  [[nodiscard]] PagedKv<T> paged() {
    const std::int64_t row = static_cast<std::int64_t>(shape_.num_kv_heads) * shape_.head_dim;
    return {k_pool_.data(),
            v_pool_.data(),
            block_table_.data(),
            block_table_stride_,
            shape_.block_size,
            shape_.block_size * row,
            row,
            shape_.head_dim};
  }
  [[nodiscard]] std::vector<float>& out() { return out_; }
  void poison_output() { std::fill(out_.begin(), out_.end(), NAN); }
  [[nodiscard]] std::vector<double> reference() {
    std::vector<double> ref;
    reference_attention(params(), contiguous(), ref);
    return ref;
  }
  [[nodiscard]] const KvShape& shape() const { return shape_; }
  // Raw storage, for copying the same cache to a device.
  [[nodiscard]] const std::vector<T>& k_seq_data(int s) const { return k_[s]; }
  [[nodiscard]] const std::vector<T>& v_seq_data(int s) const { return v_[s]; }
  [[nodiscard]] const std::vector<T>& k_pool_data() const { return k_pool_; }
  [[nodiscard]] const std::vector<T>& v_pool_data() const { return v_pool_; }
  [[nodiscard]] const std::vector<std::int32_t>& block_table_data() const { return block_table_; }
  [[nodiscard]] const std::vector<float>& q_data() const { return q_; }
  [[nodiscard]] const std::vector<std::int32_t>& q_indptr_data() const { return q_indptr_; }

 private:
  KvShape shape_;
  std::vector<std::vector<T>> k_, v_;
  std::vector<T*> k_ptr_, v_ptr_;
  std::vector<T> k_pool_, v_pool_;
  std::vector<std::int32_t> block_table_;
  std::int64_t block_table_stride_ = 0;
  std::vector<float> q_, out_;
  std::vector<std::int32_t> q_indptr_;
};

/// Per-dtype error bounds against the float64 reference. The reference reads the same stored
/// (already rounded) K/V values, so the bound covers only fp32 accumulation and the exp
/// approximation, and is the same for every storage dtype: |out - ref| <= atol + rtol * |ref|.
struct Tolerance {
  double atol = 2e-5;
  double rtol = 2e-4;
};

/// Whether one output element passes: finite (NaN or Inf never passes) and within tolerance.
inline bool element_matches(float out, double ref, Tolerance tol) {
  return std::isfinite(out) && std::abs(static_cast<double>(out) - ref) <= tol.atol + tol.rtol * std::abs(ref);
}

/// Checks every element; NaN or Inf anywhere fails. Returns the number of mismatches.
inline int expect_matches_reference(const std::vector<float>& out, const std::vector<double>& ref, Tolerance tol = {},
                                    const std::string& what = "") {
  EXPECT_EQ(out.size(), ref.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < std::min(out.size(), ref.size()); ++i) {
    if (!element_matches(out[i], ref[i], tol)) {
      if (++bad <= 5) ADD_FAILURE() << what << " element " << i << ": got " << out[i] << ", reference " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << out.size() << " elements out of tolerance";
  return bad;
}

}  // namespace kvlab::testing
