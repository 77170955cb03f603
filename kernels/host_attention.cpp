// Host attention: one task per (sequence, KV head). A task walks the sequence's KV once per group
// of up to kRowBlock query rows (the GQA group times the query tokens), in tiles of up to kTile
// tokens that never cross a run (a block of the paged view), keeping an fp32 online softmax per
// row. Every K/V element is converted from its storage dtype once per row group, so for decode the
// whole GQA group shares one pass over the cache: the kernel is memory-bound by design.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers seed conversions with _mm512_undefined_ps(), which -Wmaybe-uninitialized
// reports at every inlined call (GCC bug 105593); nothing here is uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "alloc/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/dispatch.hpp"

namespace kvlab {
namespace {

constexpr int kTile = 16;      // tokens per tile
constexpr int kRowBlock = 32;  // query rows sharing one pass over K/V

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

/// One K or V row as fp32: f32 rows are used in place, 16-bit rows converted into `buf` with the
/// widest conversion the CPU has (scalar conversion calls would make the kernel compute-bound).
template <class T, int D>
inline const float* load_row(const T* src, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return src;
  } else if constexpr (std::is_same_v<T, half_t>) {
#if defined(__AVX512F__)
    for (int d = 0; d < D; d += 16)
      _mm512_storeu_ps(buf + d, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + d))));
#elif defined(__F16C__)
    for (int d = 0; d < D; d += 8)
      _mm256_storeu_ps(buf + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + d))));
#else
    for (int d = 0; d < D; ++d) buf[d] = to_float(src[d]);
#endif
    return buf;
  } else {
    // bfloat16 is the top half of a float: widen and shift, which vectorises.
    const auto* bits = reinterpret_cast<const std::uint16_t*>(src);
    auto* out = reinterpret_cast<std::uint32_t*>(buf);
#pragma omp simd
    for (int d = 0; d < D; ++d) out[d] = static_cast<std::uint32_t>(bits[d]) << 16;
    return buf;
  }
}

// Portable SIMD through GCC/Clang vector extensions: 16 fp32 lanes (one AVX-512 register; the
// compiler splits it on narrower machines). Every supported head dim is a multiple of 16.
constexpr int kLanes = 16;
using vec = float __attribute__((vector_size(kLanes * sizeof(float))));

inline vec loadv(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storev(float* p, vec v) { std::memcpy(p, &v, sizeof v); }
inline float hsum(vec v) {
  // Pairwise halving (log2(16) = 4 vector adds) rather than 15 dependent scalar adds.
  using v8 = float __attribute__((vector_size(8 * sizeof(float))));
  using v4 = float __attribute__((vector_size(4 * sizeof(float))));
  v8 a, b;
  std::memcpy(&a, &v, sizeof a);
  std::memcpy(&b, reinterpret_cast<const char*>(&v) + sizeof a, sizeof b);
  const v8 s8 = a + b;
  v4 c, d;
  std::memcpy(&c, &s8, sizeof c);
  std::memcpy(&d, reinterpret_cast<const char*>(&s8) + sizeof c, sizeof d);
  const v4 s4 = c + d;
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

struct Scratch {
  std::vector<float> kbuf, vbuf, acc, scores;
};

template <class T, int D, class View>
void attend(const AttentionParams& p, const View& kv, int s, int kh0, int nh, Scratch& scratch) {
  static_assert(D % kLanes == 0, "head dim must be a multiple of the SIMD width");
  constexpr int kChunks = D / kLanes;
  const int q0 = p.q_begin(s);
  const int n = p.q_end(s) - q0;
  const int group = p.group();
  const std::int64_t len = p.seq_lens[s];
  const int rows_per_head = n * group;
  const int rows = rows_per_head * nh;  // row r: head kh0 + r / rows_per_head, query token, group member
  scratch.kbuf.resize(static_cast<std::size_t>(kTile) * kRowBlock * D);
  scratch.vbuf.resize(scratch.kbuf.size());
  scratch.acc.resize(kRowBlock * D);
  scratch.scores.resize(kRowBlock * kTile);
  float* kbuf = scratch.kbuf.data();
  float* vbuf = scratch.vbuf.data();
  float* acc = scratch.acc.data();
  float* sc = scratch.scores.data();

  for (int r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int nr = std::min(kRowBlock, rows - r0);
    const int h_lo = (r0) / rows_per_head, h_hi = (r0 + nr - 1) / rows_per_head;  // relative heads
    const int nhb = h_hi - h_lo + 1;
    const float* qrow[kRowBlock];
    float* orow[kRowBlock];
    int rhead[kRowBlock];  // head of the row, relative to h_lo
    std::int64_t visible[kRowBlock];
    float m[kRowBlock], l[kRowBlock], corrs[kRowBlock];
    std::int64_t max_visible = 0;
    for (int r = 0; r < nr; ++r) {
      const int hh = (r0 + r) / rows_per_head, within = (r0 + r) % rows_per_head;
      const int i = within / group, g = within % group;
      const std::size_t off = (static_cast<std::size_t>(q0 + i) * p.num_q_heads + (kh0 + hh) * group + g) * D;
      qrow[r] = p.q + off;
      orow[r] = p.out + off;
      rhead[r] = hh - h_lo;
      visible[r] = len - n + i + 1;
      max_visible = std::max(max_visible, visible[r]);
      m[r] = -std::numeric_limits<float>::infinity();
      l[r] = 0.f;
      std::fill_n(acc + r * D, D, 0.f);
    }

    for (std::int64_t t = 0; t < max_visible;) {
      const std::int64_t run = kv.run(s, t, max_visible);
      for (std::int64_t j0 = 0; j0 < run; j0 += kTile) {
        const int nt = static_cast<int>(std::min<std::int64_t>(kTile, run - j0));
        const std::int64_t tbase = t + j0;
        // fp32 K and V rows of the tile, token-major and head-minor so that the cache is read in
        // address order (one head alone would read 2 of every 16 rows and starve the prefetcher).
        // Converted once per row block, shared by every query row of the same head.
        const float* krows[kTile][kRowBlock];
        const float* vrows[kTile][kRowBlock];
        for (int j = 0; j < nt; ++j)
          for (int hb = 0; hb < nhb; ++hb) {
            const int h = kh0 + h_lo + hb;
            float* kb = kbuf + (static_cast<std::size_t>(j) * nhb + hb) * D;
            float* vb = vbuf + (static_cast<std::size_t>(j) * nhb + hb) * D;
            krows[j][hb] = load_row<T, D>(kv.k(s, tbase + j, h), kb);
            vrows[j][hb] = load_row<T, D>(kv.v(s, tbase + j, h), vb);
          }
        // Scores: the query row stays in registers while the tile's keys stream past it.
        for (int r = 0; r < nr; ++r) {
          vec q[kChunks];
          for (int c = 0; c < kChunks; ++c) q[c] = loadv(qrow[r] + c * kLanes);
          const int hb = rhead[r];
          int j = 0;
          for (; j + 4 <= nt; j += 4) {  // four keys at once: four independent FMA chains
            const float *k0 = krows[j][hb], *k1 = krows[j + 1][hb], *k2 = krows[j + 2][hb], *k3 = krows[j + 3][hb];
            vec a0 = q[0] * loadv(k0), a1 = q[0] * loadv(k1), a2 = q[0] * loadv(k2), a3 = q[0] * loadv(k3);
            for (int c = 1; c < kChunks; ++c) {
              a0 += q[c] * loadv(k0 + c * kLanes);
              a1 += q[c] * loadv(k1 + c * kLanes);
              a2 += q[c] * loadv(k2 + c * kLanes);
              a3 += q[c] * loadv(k3 + c * kLanes);
            }
            sc[r * kTile + j] = hsum(a0) * p.scale;
            sc[r * kTile + j + 1] = hsum(a1) * p.scale;
            sc[r * kTile + j + 2] = hsum(a2) * p.scale;
            sc[r * kTile + j + 3] = hsum(a3) * p.scale;
          }
          for (; j < nt; ++j) {
            const float* k0 = krows[j][hb];
            vec a = q[0] * loadv(k0);
            for (int c = 1; c < kChunks; ++c) a += q[c] * loadv(k0 + c * kLanes);
            sc[r * kTile + j] = hsum(a) * p.scale;
          }
        }
        // Online softmax update per row; masked tokens weigh exactly zero.
        for (int r = 0; r < nr; ++r) {
          const int live = static_cast<int>(std::clamp<std::int64_t>(visible[r] - tbase, 0, nt));
          float* srow = sc + r * kTile;
          corrs[r] = 1.f;
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
          corrs[r] = corr;
        }
        // Weighted V: the row's accumulator stays in registers across the tile.
        for (int r = 0; r < nr; ++r) {
          float* a = acc + r * D;
          const float* w = sc + r * kTile;
          const int hb = rhead[r];
          vec o[kChunks];
          for (int c = 0; c < kChunks; ++c) o[c] = loadv(a + c * kLanes) * corrs[r];
          for (int j = 0; j < nt; ++j)
            for (int c = 0; c < kChunks; ++c) o[c] += w[j] * loadv(vrows[j][hb] + c * kLanes);
          for (int c = 0; c < kChunks; ++c) storev(a + c * kLanes, o[c]);
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
  validate_host_lengths(p);
  visit_kv_view(kv, [&](auto view, auto dim) {
    using View = decltype(view);
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(view.k(0, 0, 0))>>;
    constexpr int D = decltype(dim)::value;
    // Tasks are (sequence, run of consecutive KV heads): as few heads per task as keep every
    // thread busy, as many as make each task read whole tokens (all its heads) in address order.
    const int threads = static_cast<int>(pool.size());
    int groups = 1;
    while (groups < p.num_kv_heads && static_cast<std::int64_t>(p.batch) * groups < 4 * threads) ++groups;
    while (p.num_kv_heads % groups != 0) ++groups;
    const int heads_per_task = p.num_kv_heads / groups;
    const std::int64_t tasks = static_cast<std::int64_t>(p.batch) * groups;
    pool.parallel_for(tasks, [&](std::int64_t task) {
      thread_local Scratch scratch;
      const int s = static_cast<int>(task / groups);
      const int kh0 = static_cast<int>(task % groups) * heads_per_task;
      if (p.q_end(s) > p.q_begin(s)) attend<T, D, View>(p, view, s, kh0, heads_per_task, scratch);
    });
  });
}

}  // namespace kvlab
