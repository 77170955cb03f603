#pragma once
// Attention kernels written once against the SIMT execution interface (kernels/simt/exec.hpp):
// nvcc instantiates them with CudaExec (kernels/cuda/attention.cu), the host with EmulatedExec
// (kernels/simt/emulated_attention.cpp).
//
// attention_partial_kernel: grid (batch, num_kv_heads * row_blocks, num_partitions), 1-D blocks
// whose size is a multiple of kDotLanes. A block owns one sequence s, one KV head and one split-KV
// partition (flash-decoding): the sequence's tokens [0, len) are cut into num_partitions even
// pieces of ceil(len / P) tokens (pieces past the end are empty; their rows write m = -inf, l = 0).
// Its query rows are the GQA group times the sequence's query tokens, taken kRows at a time
// (grid-stride over row_blocks); each row keeps an fp32 online softmax (m, l, acc) in shared
// memory. KV is walked in tiles of up to kTile tokens gathered run by run (view.run()), so a paged
// view's block table is read once per KV block, and tiles are full whatever the page size:
//   1. thread 0 gathers the tile's K/V row pointers, run by run;          sync
//   2. scores: kDotLanes lanes per (row, token) dot product, fp32, reduced with xor shuffles
//      (segment_reduce); causal / partition masking gives -inf;         sync
//   3. one thread per row: new max, rescale factor, exp weights, l;      sync
//   4. one thread per (row, dim): acc = acc * corr + sum_j w_j V_j;       sync
// With one partition the block writes out = acc / l; otherwise it writes the normalised partial
// out and (m, l) to the workspace and attention_merge_kernel combines the partitions.
#include <cmath>
#include <cstdint>

#include "kernels/attention_params.hpp"
#include "kernels/numeric.hpp"
#include "kernels/platform.hpp"
#include "kernels/simt/exec.hpp"

namespace kvlab::simt {

template <class T, int D>
struct AttentionTraits {
  static constexpr int kRows = 16;  ///< query rows per block pass
  static constexpr int kTile = 32;  ///< KV tokens per tile
  /// Lanes cooperating on one dot product (power of two, <= 8): 32 head-dim elements per lane.
  static constexpr int kDotLanes = D / 32 < 1 ? 1 : (D / 32 > 8 ? 8 : D / 32);
  static constexpr int kPerLane = D / kDotLanes;
  static_assert(D % kDotLanes == 0);

  [[nodiscard]] static constexpr std::size_t shared_bytes() {
    SharedLayout l;
    l.template add<float>(kRows * D).template add<float>(kRows * D).template add<float>(kRows * kTile);
    l.template add<float>(kRows).template add<float>(kRows).template add<float>(kRows);
    l.template add<const T*>(kTile).template add<const T*>(kTile);
    return l.bytes;
  }
};

template <class View>
struct AttentionKernelArgs {
  AttentionParams p;
  View kv;
  int num_partitions = 1;
  int row_blocks = 1;         ///< grid.y == num_kv_heads * row_blocks
  float* part_out = nullptr;  ///< [total_q][num_q_heads][P][head_dim] when P > 1
  float* part_ml = nullptr;   ///< [total_q][num_q_heads][P][2] = (max, sum) when P > 1
};

struct AttentionMergeArgs {
  AttentionParams p;
  int num_partitions = 1;
  const float* part_out = nullptr;
  const float* part_ml = nullptr;
};

namespace detail {
KVLAB_HD KVLAB_FORCEINLINE float fexp(float x) {
#if defined(__CUDA_ARCH__)
  return ::expf(x);
#else
  return std::exp(x);
#endif
}
template <class I>
KVLAB_HD KVLAB_FORCEINLINE I imin(I a, I b) {
  return b < a ? b : a;
}
KVLAB_HD KVLAB_FORCEINLINE float fmax2(float a, float b) { return a < b ? b : a; }
inline constexpr float kNegInf = -INFINITY;
}  // namespace detail

template <class T, int D, class View, class Exec>
KVLAB_HD void attention_partial_kernel(Exec& ex, const AttentionKernelArgs<View>& a) {
  using Tr = AttentionTraits<T, D>;
  constexpr int R = Tr::kRows, TILE = Tr::kTile, G = Tr::kDotLanes, PER = Tr::kPerLane;
  using detail::imin;
  const AttentionParams& p = a.p;
  const Dim3 bi = ex.block_idx();
  const int s = static_cast<int>(bi.x);
  const int kh = static_cast<int>(bi.y) % p.num_kv_heads;
  const int rb = static_cast<int>(bi.y) / p.num_kv_heads;
  const int part = static_cast<int>(bi.z);
  const int tid = static_cast<int>(ex.thread_idx().x);
  const int nthreads = static_cast<int>(ex.block_dim().x);
  const int lane_in = tid % G, dot_group = tid / G, dot_groups = nthreads / G;

  float* q_s = shared_array<float>(ex, R * D);
  float* acc_s = shared_array<float>(ex, R * D);
  float* sc_s = shared_array<float>(ex, R * TILE);
  float* m_s = shared_array<float>(ex, R);
  float* l_s = shared_array<float>(ex, R);
  float* corr_s = shared_array<float>(ex, R);
  const T** tok_k = shared_array<const T*>(ex, TILE);
  const T** tok_v = shared_array<const T*>(ex, TILE);

  const int group = p.group();
  const int q0 = p.q_begin(s), n = p.q_end(s) - q0;
  const int rows = n * group;
  // Token positions fit in int32 (seq_lens are int32): 32-bit math here avoids 64-bit division
  // subroutines on the GPU; the view is still addressed with 64-bit offsets.
  const int len = p.seq_lens[s];
  const int P = a.num_partitions;
  const int chunk = (len + P - 1) / P;
  const int p_begin = imin(len, part * chunk);
  const int p_end = imin(len, p_begin + chunk);
  const std::int64_t Hq = p.num_q_heads;
  const std::int64_t stride = a.kv.token_stride;

  for (int r0 = rb * R; r0 < rows; r0 += a.row_blocks * R) {
    const int nr = imin(R, rows - r0);
    for (int idx = tid; idx < nr * D; idx += nthreads) {
      const int row = r0 + idx / D;
      const std::int64_t qi = q0 + row / group;
      const int h = kh * group + row % group;
      q_s[idx] = p.q[(qi * Hq + h) * D + idx % D];
      acc_s[idx] = 0.f;
    }
    for (int r = tid; r < nr; r += nthreads) {
      m_s[r] = detail::kNegInf;
      l_s[r] = 0.f;
    }
    // Query i of n sees cache tokens [0, len - n + i]; the chunk's last row sees the most.
    const int t_end = imin(p_end, len - n + (r0 + nr - 1) / group + 1);
    ex.sync_threads();

    for (int t0 = p_begin; t0 < t_end; t0 += TILE) {
      const int nt = imin(TILE, t_end - t0);
      // 1. Row pointers of the tile, one view lookup per run (KV block).
      if (tid == 0) {
        for (int t = t0; t < t0 + nt;) {
          const int run = static_cast<int>(a.kv.run(s, t, t0 + nt));
          const T* kp = a.kv.k(s, t, kh);
          const T* vp = a.kv.v(s, t, kh);
          for (int j = 0; j < run; ++j) {
            tok_k[t - t0 + j] = kp + j * stride;
            tok_v[t - t0 + j] = vp + j * stride;
          }
          t += run;
        }
      }
      ex.sync_threads();

      // 2. Scores. The trip count is uniform across the block so every lane reaches the shuffles.
      const int pairs = nr * nt;
      for (int base = 0; base < pairs; base += dot_groups) {
        const int pair = base + dot_group;
        const bool valid = pair < pairs;
        const int r = valid ? pair / nt : 0, j = valid ? pair % nt : 0;
        float dot = 0.f;
        if (valid) {
          const T* k = tok_k[j] + lane_in * PER;
          const float* q = q_s + r * D + lane_in * PER;
#if defined(__CUDA_ARCH__)
#pragma unroll 8
#endif
          for (int e = 0; e < PER; ++e) dot += q[e] * to_float(k[e]);
        }
        dot = warp_sum<G>(ex, dot);
        if (valid && lane_in == 0) {
          const int visible = len - n + (r0 + r) / group + 1;
          sc_s[r * TILE + j] = t0 + j < visible ? dot * p.scale : detail::kNegInf;
        }
      }
      ex.sync_threads();

      // 3. Online softmax, one thread per row. Masked scores (-inf) weigh exactly zero.
      for (int r = tid; r < nr; r += nthreads) {
        float* srow = sc_s + r * TILE;
        const float m_old = m_s[r];
        float mx = m_old;
        for (int j = 0; j < nt; ++j) mx = detail::fmax2(mx, srow[j]);
        float corr = 1.f, sum = 0.f;
        if (mx == detail::kNegInf) {
          for (int j = 0; j < nt; ++j) srow[j] = 0.f;
        } else {
          corr = detail::fexp(m_old - mx);
          for (int j = 0; j < nt; ++j) {
            const float e = detail::fexp(srow[j] - mx);
            srow[j] = e;
            sum += e;
          }
        }
        l_s[r] = l_s[r] * corr + sum;
        m_s[r] = mx;
        corr_s[r] = corr;
      }
      ex.sync_threads();

      // 4. acc = acc * corr + P V, one thread per (row, dim): V rows read coalesced along dim.
      for (int idx = tid; idx < nr * D; idx += nthreads) {
        const int r = idx / D, d = idx % D;
        const float* w = sc_s + r * TILE;
        float acc = acc_s[idx] * corr_s[r];
        for (int j = 0; j < nt; ++j) acc += w[j] * to_float(tok_v[j][d]);
        acc_s[idx] = acc;
      }
      ex.sync_threads();
    }

    for (int idx = tid; idx < nr * D; idx += nthreads) {
      const int r = idx / D, d = idx % D;
      const int row = r0 + r;
      const std::int64_t qi = q0 + row / group;
      const int h = kh * group + row % group;
      const float l = l_s[r];
      if (P == 1) {
        p.out[(qi * Hq + h) * D + d] = acc_s[idx] / l;
      } else {
        const std::int64_t slot = (qi * Hq + h) * P + part;
        a.part_out[slot * D + d] = l > 0.f ? acc_s[idx] / l : 0.f;
        if (d == 0) {
          a.part_ml[slot * 2] = m_s[r];
          a.part_ml[slot * 2 + 1] = l;
        }
      }
    }
    ex.sync_threads();  // the next row chunk overwrites q_s, acc_s, m_s, l_s
  }
}

/// Combines split-KV partials: grid (batch, num_q_heads), any 1-D block. Partition p of a row
/// weighs l_p * exp(m_p - max_p m_p); empty partitions (l = 0) weigh zero.
template <int D, class Exec>
KVLAB_HD void attention_merge_kernel(Exec& ex, const AttentionMergeArgs& a) {
  const AttentionParams& p = a.p;
  const int s = static_cast<int>(ex.block_idx().x);
  const std::int64_t h = ex.block_idx().y;
  const std::int64_t Hq = p.num_q_heads;
  const int P = a.num_partitions;
  const int tid = static_cast<int>(ex.thread_idx().x);
  const int nthreads = static_cast<int>(ex.block_dim().x);
  for (std::int64_t qi = p.q_begin(s); qi < p.q_end(s); ++qi) {
    const std::int64_t slot0 = (qi * Hq + h) * P;
    float mx = detail::kNegInf;
    for (int i = 0; i < P; ++i) mx = detail::fmax2(mx, a.part_ml[(slot0 + i) * 2]);
    for (int d = tid; d < D; d += nthreads) {
      float num = 0.f, den = 0.f;
      for (int i = 0; i < P; ++i) {
        const float l = a.part_ml[(slot0 + i) * 2 + 1];
        if (!(l > 0.f)) continue;
        const float w = l * detail::fexp(a.part_ml[(slot0 + i) * 2] - mx);
        num += w * a.part_out[(slot0 + i) * D + d];
        den += w;
      }
      p.out[(qi * Hq + h) * D + d] = num / den;
    }
  }
}

}  // namespace kvlab::simt
