#pragma once
// Attention kernels written once against the SIMT execution interface (kernels/simt/exec.hpp):
// nvcc instantiates them with CudaExec (kernels/cuda/attention.cu), the host with EmulatedExec
// (kernels/simt/emulated_attention.cpp).
//
// attention_partial_kernel: grid (batch, num_kv_heads * row_blocks, num_partitions), 1-D blocks
// of any size. A block owns one sequence s, one KV head and one split-KV partition
// (flash-decoding): the sequence's tokens [0, len) are cut into num_partitions even pieces of
// ceil(len / P) tokens (pieces past the end are empty; their rows write m = -inf, l = 0). Its
// query rows are the GQA group times the sequence's query tokens, taken kRows at a time
// (grid-stride over row_blocks); each row keeps an fp32 online softmax (m, l, acc) in shared
// memory. KV is walked in tiles of kTile tokens:
//   1. the tile's K and V rows are staged in shared memory with 16-byte loads, consecutive threads
//      on consecutive 16-byte pieces of a row, so that a warp's load covers whole rows: every
//      32-byte sector it moves is used (judged under the emulator, tests/kernels). Meanwhile the
//      next tile's row addresses are looked up, one token per thread;                     sync
//   2. scores: one thread per (row, token), the dot product from shared memory in fp32, causal /
//      partition masking gives -inf;                                                      sync
//   3. one thread per row: new max and rescale factor;                                    sync
//      one thread per (row, token): exp weights;                                           sync
//   4. one thread per (row, dim): acc = acc * corr + sum_j w_j V_j from shared memory, and l
//      moves on (the dim-0 thread);                                                        sync
// K and V are read from global memory once per block, whatever the GQA group. Staged rows are
// padded by 16 bytes so that the lanes of a quarter warp, reading one 16-byte piece of K each from
// consecutive tokens, fall on different shared-memory banks. A row whose address is not 16-byte
// aligned (a view the allocators never produce) is staged element by element instead: slower,
// never a misaligned vector load.
// With one partition the block writes out = acc / l; otherwise it writes the normalised partial
// out and (m, l) to the workspace and attention_merge_kernel combines the partitions.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/attention_params.hpp"
#include "kernels/numeric.hpp"
#include "kernels/platform.hpp"
#include "kernels/simt/exec.hpp"

namespace kvlab::simt {

/// Query rows per block pass; 8 from head dim 256 on, so that the tiles fit 48 KiB of shared memory.
[[nodiscard]] KVLAB_HD constexpr int attention_rows_per_block(int head_dim) { return head_dim >= 256 ? 8 : 16; }

template <class T, int D>
struct AttentionTraits {
  static constexpr int kRows = attention_rows_per_block(D);
  static constexpr int kRowBytes = D * static_cast<int>(sizeof(T));  ///< one token's K (or V) of one head
  static_assert(kRowBytes % 16 == 0, "K/V rows are staged in 16-byte pieces");
  static constexpr int kVecs = kRowBytes / 16;                      ///< 16-byte pieces per row
  static constexpr int kPerVec = 16 / static_cast<int>(sizeof(T));  ///< elements per piece
  static constexpr int kStride = D + kPerVec;  ///< staged row stride in elements (16 bytes of padding)
  /// KV tokens per tile: about 8 KiB of K (and as much of V) per tile, 8..32 tokens.
  static constexpr int kTile = 8192 / kRowBytes < 8 ? 8 : (8192 / kRowBytes > 32 ? 32 : 8192 / kRowBytes);

  [[nodiscard]] static constexpr std::size_t shared_bytes() {
    SharedLayout l;
    l.template add<float>(kRows * D).template add<float>(kRows * D).template add<float>(kRows * kTile);
    l.template add<float>(kRows).template add<float>(kRows).template add<float>(kRows);
    l.template add<Vec16>(kTile * kStride / kPerVec).template add<Vec16>(kTile * kStride / kPerVec);
    l.template add<const T*>(2 * kTile).template add<const T*>(2 * kTile);
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

/// Copies one 16-byte piece of a K or V row from global to shared memory: one vector load when
/// the source is 16-byte aligned, element loads otherwise (shared `dst` is always aligned).
template <class T, class Exec>
KVLAB_HD KVLAB_FORCEINLINE void stage_piece(Exec& ex, T* dst, const T* src) {
  if ((reinterpret_cast<std::uintptr_t>(src) & 15u) == 0) {
    store_aligned(dst, ex.template load_global<Vec16>(src));
  } else {
    for (int e = 0; e < 16 / static_cast<int>(sizeof(T)); ++e) dst[e] = ex.template load_global<T>(src + e);
  }
}
}  // namespace detail

template <class T, int D, class View, class Exec>
KVLAB_HD void attention_partial_kernel(Exec& ex, const AttentionKernelArgs<View>& a) {
  using Tr = AttentionTraits<T, D>;
  constexpr int R = Tr::kRows, TILE = Tr::kTile, VECS = Tr::kVecs, PER = Tr::kPerVec, KS = Tr::kStride;
  using detail::imin;
  const AttentionParams& p = a.p;
  const Dim3 bi = ex.block_idx();
  const int s = static_cast<int>(bi.x);
  const int kh = static_cast<int>(bi.y) % p.num_kv_heads;
  const int rb = static_cast<int>(bi.y) / p.num_kv_heads;
  const int part = static_cast<int>(bi.z);
  const int tid = static_cast<int>(ex.thread_idx().x);
  const int nthreads = static_cast<int>(ex.block_dim().x);

  float* q_s = shared_array<float>(ex, R * D);
  float* acc_s = shared_array<float>(ex, R * D);
  float* sc_s = shared_array<float>(ex, R * TILE);
  float* m_s = shared_array<float>(ex, R);
  float* l_s = shared_array<float>(ex, R);
  float* corr_s = shared_array<float>(ex, R);
  T* k_s = reinterpret_cast<T*>(shared_array<Vec16>(ex, TILE * KS / PER));
  T* v_s = reinterpret_cast<T*>(shared_array<Vec16>(ex, TILE * KS / PER));
  // Row addresses of a tile, double-buffered: tile i's in half i % 2, the next tile's looked up
  // while this one is staged.
  const T** tok_k = shared_array<const T*>(ex, 2 * TILE);
  const T** tok_v = shared_array<const T*>(ex, 2 * TILE);

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

  for (int r0 = rb * R; r0 < rows; r0 += a.row_blocks * R) {
    const int nr = imin(R, rows - r0);
    // Query i of n sees cache tokens [0, len - n + i]; the chunk's last row sees the most.
    const int t_end = imin(p_end, len - n + (r0 + nr - 1) / group + 1);
    // Tile [t0, t0 + TILE) clipped to t_end: its row addresses into half `half` of tok_k / tok_v.
    const auto look_up = [&](int t0, int half) {
      for (int j = tid; j < imin(TILE, t_end - t0); j += nthreads) {
        tok_k[half * TILE + j] = a.kv.k(s, t0 + j, kh);
        tok_v[half * TILE + j] = a.kv.v(s, t0 + j, kh);
      }
    };
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
    look_up(p_begin, 0);
    ex.sync_threads();

    int half = 0;
    for (int t0 = p_begin; t0 < t_end; t0 += TILE, half ^= 1) {
      const int nt = imin(TILE, t_end - t0);
      // 1. Stage K and V: piece c is piece c % VECS of token c / VECS, so a warp reads whole rows.
      const T* const* rk = tok_k + half * TILE;
      const T* const* rv = tok_v + half * TILE;
      for (int c = tid; c < nt * VECS; c += nthreads) {
        const int j = c / VECS, x = c % VECS;
        detail::stage_piece(ex, k_s + j * KS + x * PER, rk[j] + x * PER);
        detail::stage_piece(ex, v_s + j * KS + x * PER, rv[j] + x * PER);
      }
      if (t0 + TILE < t_end) look_up(t0 + TILE, half ^ 1);
      ex.sync_threads();

      // 2. Scores, one thread per (row, token); consecutive threads take consecutive tokens of one
      // row, so the row's query values are broadcast and the K pieces spread over the banks.
      for (int pair = tid; pair < nr * nt; pair += nthreads) {
        const int r = pair / nt, j = pair % nt;
        const T* k = k_s + j * KS;
        const float* q = q_s + r * D;
        float dot = 0.f;
#if defined(__CUDA_ARCH__)
#pragma unroll 4
#endif
        for (int x = 0; x < VECS; ++x) {
          T e[PER];
          const Vec16 piece = ex.template load_shared<Vec16>(k + x * PER);
          memcpy(e, &piece, sizeof piece);
          for (int i = 0; i < PER; ++i) dot += q[x * PER + i] * to_float(e[i]);
        }
        const int visible = len - n + (r0 + r) / group + 1;
        sc_s[r * TILE + j] = t0 + j < visible ? dot * p.scale : detail::kNegInf;
      }
      ex.sync_threads();

      // 3a. Online softmax, one thread per row: the new max and the accumulator's rescale factor
      // (compares only; the exps are spread over the block in 3b).
      for (int r = tid; r < nr; r += nthreads) {
        const float* srow = sc_s + r * TILE;
        const float m_old = m_s[r];
        float mx = m_old;
        for (int j = 0; j < nt; ++j) mx = detail::fmax2(mx, srow[j]);
        m_s[r] = mx;
        corr_s[r] = mx == detail::kNegInf ? 1.f : detail::fexp(m_old - mx);
      }
      ex.sync_threads();

      // 3b. Weights, one thread per (row, token). Masked scores (-inf) weigh exactly zero.
      for (int pair = tid; pair < nr * nt; pair += nthreads) {
        const int r = pair / nt, j = pair % nt;
        const float mx = m_s[r];
        float* w = sc_s + r * TILE + j;
        *w = mx == detail::kNegInf ? 0.f : detail::fexp(*w - mx);
      }
      ex.sync_threads();

      // 4. acc = acc * corr + P V, one thread per (row, dim): consecutive threads, consecutive dims.
      // The thread of dim 0 also moves the row's sum l on.
      for (int idx = tid; idx < nr * D; idx += nthreads) {
        const int r = idx / D, d = idx % D;
        const float* w = sc_s + r * TILE;
        float acc = acc_s[idx] * corr_s[r];
        for (int j = 0; j < nt; ++j) acc += w[j] * to_float(ex.template load_shared<T>(v_s + j * KS + d));
        acc_s[idx] = acc;
        if (d == 0) {
          float sum = 0.f;
          for (int j = 0; j < nt; ++j) sum += w[j];
          l_s[r] = l_s[r] * corr_s[r] + sum;
        }
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
