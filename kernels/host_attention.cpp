// Host attention: one task per (sequence, KV head). A task walks the sequence's KV once per group
// of up to kRowBlock query rows (the GQA group times the query tokens), in tiles of up to kTile
// tokens that never cross a run (a block of the paged view), keeping an fp32 online softmax per
// row. Every K/V element is converted from its storage dtype once per row group, so for decode the
// whole GQA group shares one pass over the cache: the kernel is memory-bound by design.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "alloc/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/dispatch.hpp"

namespace kvlab {
namespace {

constexpr int kTile = 32;      // tokens per tile
constexpr int kRowBlock = 16;  // query rows sharing one pass over K/V

/// exp(x) for x <= 0-ish arguments of the softmax, vectorisable (Cephes expf polynomial,
/// relative error ~2e-7). NaN in, NaN out.
inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int ni = static_cast<int>(n == n ? n : 0.f);
  return p * std::bit_cast<float>(static_cast<std::uint32_t>(ni + 127) << 23);
}

template <class T, int D>
inline const float* load_row(const T* src, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return src;
  } else {
#pragma omp simd
    for (int d = 0; d < D; ++d) buf[d] = to_float(src[d]);
    return buf;
  }
}

struct Scratch {
  std::vector<float> kbuf, vbuf, acc, scores;
};

template <class T, int D, class View>
void attend(const AttentionParams& p, const View& kv, int s, int kh, Scratch& scratch) {
  const int q0 = p.q_begin(s);
  const int n = p.q_end(s) - q0;
  const int group = p.group();
  const std::int64_t len = p.seq_lens[s];
  const int rows = n * group;
  scratch.kbuf.resize(kTile * D);
  scratch.vbuf.resize(kTile * D);
  scratch.acc.resize(kRowBlock * D);
  scratch.scores.resize(kRowBlock * kTile);
  float* kbuf = scratch.kbuf.data();
  float* vbuf = scratch.vbuf.data();
  float* acc = scratch.acc.data();
  float* sc = scratch.scores.data();

  for (int r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int nr = std::min(kRowBlock, rows - r0);
    const float* qrow[kRowBlock];
    float* orow[kRowBlock];
    std::int64_t visible[kRowBlock];
    float m[kRowBlock], l[kRowBlock];
    std::int64_t max_visible = 0;
    for (int r = 0; r < nr; ++r) {
      const int i = (r0 + r) / group, g = (r0 + r) % group;
      const std::size_t off = (static_cast<std::size_t>(q0 + i) * p.num_q_heads + kh * group + g) * D;
      qrow[r] = p.q + off;
      orow[r] = p.out + off;
      visible[r] = len - n + i + 1;
      max_visible = std::max(max_visible, visible[r]);
      m[r] = -std::numeric_limits<float>::infinity();
      l[r] = 0.f;
      std::fill_n(acc + r * D, D, 0.f);
    }

    for (std::int64_t t = 0; t < max_visible;) {
      const std::int64_t run = kv.run(s, t, max_visible);
      const T* krow0 = kv.k(s, t, kh);
      const T* vrow0 = kv.v(s, t, kh);
      const std::int64_t stride = kv.token_stride;
      for (std::int64_t j0 = 0; j0 < run; j0 += kTile) {
        const int nt = static_cast<int>(std::min<std::int64_t>(kTile, run - j0));
        const std::int64_t tbase = t + j0;
        // Scores for every row of the group against this tile.
        for (int j = 0; j < nt; ++j) {
          const float* kr = load_row<T, D>(krow0 + (j0 + j) * stride, kbuf + j * D);
          for (int r = 0; r < nr; ++r) {
            const float* q = qrow[r];
            float dot = 0.f;
#pragma omp simd reduction(+ : dot)
            for (int d = 0; d < D; ++d) dot += q[d] * kr[d];
            sc[r * kTile + j] = dot * p.scale;
          }
        }
        // Online softmax update per row; masked tokens weigh exactly zero.
        for (int r = 0; r < nr; ++r) {
          const int live = static_cast<int>(std::clamp<std::int64_t>(visible[r] - tbase, 0, nt));
          float* srow = sc + r * kTile;
          if (live == 0) {
            std::fill_n(srow, nt, 0.f);
            continue;
          }
          float mx = m[r];
          for (int j = 0; j < live; ++j) mx = std::max(mx, srow[j]);
          const float corr = fast_exp(m[r] - mx);
          float sum = 0.f;
#pragma omp simd reduction(+ : sum)
          for (int j = 0; j < nt; ++j) {
            const float e = j < live ? fast_exp(srow[j] - mx) : 0.f;
            srow[j] = e;
            sum += e;
          }
          l[r] = l[r] * corr + sum;
          m[r] = mx;
          float* a = acc + r * D;
          if (corr != 1.f) {
#pragma omp simd
            for (int d = 0; d < D; ++d) a[d] *= corr;
          }
        }
        // Weighted V.
        for (int j = 0; j < nt; ++j) {
          const float* vr = load_row<T, D>(vrow0 + (j0 + j) * stride, vbuf + j * D);
          for (int r = 0; r < nr; ++r) {
            const float w = sc[r * kTile + j];
            float* a = acc + r * D;
#pragma omp simd
            for (int d = 0; d < D; ++d) a[d] += w * vr[d];
          }
        }
      }
      t += run;
    }

    for (int r = 0; r < nr; ++r) {
      const float inv = 1.f / l[r];
      const float* a = acc + r * D;
      float* o = orow[r];
#pragma omp simd
      for (int d = 0; d < D; ++d) o[d] = a[d] * inv;
    }
  }
}

}  // namespace

void host_attention(const AttentionParams& p, const KvView& kv, ThreadPool& pool) {
  validate_attention(p, kv);
  if (p.batch == 0) return;
  visit_kv_view(kv, [&](auto view, auto dim) {
    using View = decltype(view);
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(view.k(0, 0, 0))>>;
    constexpr int D = decltype(dim)::value;
    const std::int64_t tasks = static_cast<std::int64_t>(p.batch) * p.num_kv_heads;
    pool.parallel_for(tasks, [&](std::int64_t task) {
      thread_local Scratch scratch;
      const int s = static_cast<int>(task / p.num_kv_heads);
      const int kh = static_cast<int>(task % p.num_kv_heads);
      if (p.q_end(s) > p.q_begin(s)) attend<T, D, View>(p, view, s, kh, scratch);
    });
  });
}

}  // namespace kvlab
