// Host attention. A task is (sequence, run of KV heads). Its query rows (query tokens times the
// GQA group, per KV head) are cut into row blocks of up to 16 rows of one head, and blocks into
// chunks whose fp32 state (scaled queries, V accumulators, running max and sum) stays in L1. A
// chunk walks the sequence's KV once, in tiles of 16 tokens, and visits every block per tile,
// head by head:
//   * scores: 16 dot products at a time (rows x keys = 16), K converted from its storage dtype in
//     registers straight into the FMAs, each converted chunk used by every row of the block (the
//     whole GQA group in decode), then one transposed reduction for all 16;
//   * online softmax on the tile's 16 scores of a row as one vector (vectorised exp);
//   * V converted in registers and accumulated into registers, 16 accumulators at a time;
// software-pipelined: a block's scores and softmax are issued before the previous block's V pass,
// so the V pass never waits on the softmax's chain of dependent operations. The next head's K and
// V lines are requested into L2 while one head computes, spread over its computation. No fp32 copy
// of K or V is ever made. From memory the kernel is limited by how many cache lines a core keeps
// in flight, not by its arithmetic (docs/kernels.md).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers seed conversions with _mm512_undefined_ps(), which -Wmaybe-uninitialized
// reports at every inlined call (GCC bug 105593); nothing here is uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "alloc/core/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/dispatch.hpp"
#include "kernels/host_simd.hpp"

namespace kvlab {
namespace {

using simd::kLanes;
using simd::vec;

constexpr int kTile = kLanes;  // tokens per tile: one row's tile scores are one vector
constexpr int kMaxBlockRows = kLanes;

/// The lines to request while a block computes: rows [0, nt) of head `head_off` (an element
/// offset) of a tile, whole cache lines. A tile reads 16 rows a token stride apart per head, which
/// the hardware prefetchers follow poorly, so attend() asks host_prefetch_lead_heads() heads ahead
/// of the computation (wrapping into the next tile's first heads during this tile's last ones), and
/// score_block() and v_block() spread the requests over the computation: that head's K rows a few
/// per group of scores, its V rows one per token of the V pass. The requests bring lines into L2,
/// not L1: the loads then hit L2, and a request held in one of L1's few line-fill buffers until
/// memory answers no longer limits how many lines are in flight. Measured on the benchmark geometry
/// (docs/kernels.md): spreading them beat issuing the head's 128 requests at once by 10 % (a burst
/// fills the line-fill buffers and stalls the loop behind it); into L2 beat into L1 by 4-6 % from
/// memory (contiguous; paged-16 1 %) and cost 2-5 % with the KV already in L2; whole tiles ahead
/// into L1 or L2 cost 3-25 %. How far ahead depends on the CPU (host_prefetch_lead_heads()).
template <class T>
struct PrefetchPlan {
  const T* const* k = nullptr;  // nullptr: nothing to request
  const T* const* v = nullptr;
  int nt = 0;
  std::int64_t head_off = 0;
};

template <class T, int D>
inline void prefetch_rows(const T* const* rows, int j0, int j1, std::int64_t head_off) {
  constexpr int kRowBytes = D * static_cast<int>(sizeof(T));
  for (int j = j0; j < j1; ++j) {
    const char* r = reinterpret_cast<const char*>(rows[j] + head_off);
    for (int off = 0; off < kRowBytes; off += 64) __builtin_prefetch(r + off, 0, 2);  // prefetcht1: into L2
  }
}

/// Row slots per chunk: the chunk's queries and accumulators (2 x slots x D floats) fit in L1.
template <int D>
constexpr int kChunkSlots = std::clamp(8192 / D, kMaxBlockRows, 64);

/// K and V addresses (head 0) of tokens t .. t+nt-1; entries nt..15 repeat the last token so that
/// full-width loads stay inside the cache (their scores are masked).
template <class T>
void tile_tokens(const ContiguousKv<T>& kv, int s, std::int64_t t, int nt, const T** k, const T** v) {
  const T* kb = kv.k_seq[s] + t * kv.token_stride;
  const T* vb = kv.v_seq[s] + t * kv.token_stride;
  for (int j = 0; j < kTile; ++j) {
    const std::int64_t off = std::min(j, nt - 1) * kv.token_stride;
    k[j] = kb + off;
    v[j] = vb + off;
  }
}

/// The paged form walks the block table with a counter: one division per tile, none per token.
template <class T>
void tile_tokens(const PagedKv<T>& kv, int s, std::int64_t t, int nt, const T** k, const T** v) {
  const auto tt = static_cast<std::int32_t>(t);
  const std::int32_t* table = kv.block_table + s * kv.block_table_stride;
  std::int32_t index = tt / kv.block_size;
  std::int32_t slot = tt - index * kv.block_size;
  std::int64_t base = static_cast<std::int64_t>(table[index]) * kv.block_stride;
  for (int j = 0; j < nt; ++j) {
    const std::int64_t off = base + slot * kv.token_stride;
    k[j] = kv.k_pool + off;
    v[j] = kv.v_pool + off;
    if (++slot == kv.block_size && j + 1 < nt) {
      slot = 0;
      base = static_cast<std::int64_t>(table[++index]) * kv.block_stride;
    }
  }
  for (int j = nt; j < kTile; ++j) {
    k[j] = k[nt - 1];
    v[j] = v[nt - 1];
  }
}

/// A block of RB row slots of one KV head within a chunk; slots past `rows` are padding (copies of
/// the last row, computed and never written out).
struct RowBlock {
  int head;                  ///< KV head, absolute
  int first_slot;            ///< into the chunk's slot arrays
  int rows;                  ///< real rows, 1 .. RB
  int rb;                    ///< slots: 1, 2, 4, 8 or 16
  int first_row;             ///< the head's row index (query token * group + member) of slot 0
  std::int64_t max_visible;  ///< tokens the block's last row sees
};

/// The fp32 state of a chunk's row slots.
struct ChunkState {
  std::vector<float> q, acc;  // [slot][D]: scaled queries, V accumulators
  std::vector<float> m;       // running max of each slot's softmax
  std::vector<float> l;       // [slot][16]: each slot's running sum, as per-lane partial sums
  std::vector<std::int64_t> visible;
  std::vector<int> heads;               // the chunk's KV heads in order
  std::vector<std::size_t> head_index;  // [block]: its head's place in `heads`
};

/// Weighted V of one tile into a block's accumulators, CP chunks of every row at a time in
/// registers. Ragged tiles (on the causal diagonal: rows see different numbers of the tile's tokens)
/// skip each row's invisible tokens instead of weighting them 0, so nothing a row must not see
/// (not even a NaN) reaches it.
template <class T, int D, int RB, bool kRagged>
void accumulate_v(float* acc, const float (*w)[kTile], const float* corr, const int* live, int jv, const T* const* vt,
                  std::int64_t head_off, const PrefetchPlan<T>& pf) {
  constexpr int kChunks = D / kLanes;
  constexpr int CP = std::min(kChunks, kLanes / RB);
  for (int c0 = 0; c0 < kChunks; c0 += CP) {
    vec o[RB][CP];
    for (int r = 0; r < RB; ++r)
      for (int cc = 0; cc < CP; ++cc) o[r][cc] = simd::loadv(acc + r * D + (c0 + cc) * kLanes) * corr[r];
    for (int j = 0; j < jv; ++j) {
      if (c0 == 0 && pf.v != nullptr && j < pf.nt) prefetch_rows<T, D>(pf.v, j, j + 1, pf.head_off);
      for (int cc = 0; cc < CP; ++cc) {
        const vec v = simd::load_as_float(vt[j] + head_off + (c0 + cc) * kLanes);
        for (int r = 0; r < RB; ++r)
          if (!kRagged || j < live[r]) o[r][cc] += w[r][j] * v;
      }
    }
    if (c0 == 0 && pf.v != nullptr && jv < pf.nt) prefetch_rows<T, D>(pf.v, jv, pf.nt, pf.head_off);
    for (int r = 0; r < RB; ++r)
      for (int cc = 0; cc < CP; ++cc) simd::storev(acc + r * D + (c0 + cc) * kLanes, o[r][cc]);
  }
}

/// Each row's largest tile score: four rows at a time where RB allows.
template <int RB>
void row_maxima(const vec (&s)[RB], float (&out)[RB]) {
  if constexpr (RB % 4 == 0) {
    for (int r = 0; r < RB; r += 4) {
      const vec four[4] = {s[r], s[r + 1], s[r + 2], s[r + 3]};
      float m4[4];
      simd::hmax4(four, m4);
      std::copy_n(m4, 4, out + r);
    }
  } else {
    for (int r = 0; r < RB; ++r) out[r] = simd::hmax(s[r]);
  }
}

/// One row block's weights for one tile, from its score pass to its V pass: the softmax
/// numerators, each row's rescaling of its accumulators and how many of the tile's tokens it sees.
struct TileWeights {
  alignas(64) float w[kMaxBlockRows][kTile];
  float corr[kMaxBlockRows];
  int live[kMaxBlockRows];
  int jv;  ///< tokens any row of the block sees in this tile
  bool ragged;
};

/// The score pass and online softmax of one tile of `nt` tokens (from tbase) for one row block of
/// RB slots: updates the rows' running max and sum and leaves the weights in `tw` for v_block.
template <class T, int D, int RB>
void score_block(ChunkState& st, const RowBlock& b, const T* const* kt, std::int64_t head_off, int nt,
                 std::int64_t tbase, const PrefetchPlan<T>& pf, TileWeights& tw) {
  constexpr int kChunks = D / kLanes;
  constexpr int KB = kLanes / RB;  // keys per group of 16 dot products
  const float* q = st.q.data() + static_cast<std::size_t>(b.first_slot) * D;
  float* m = st.m.data() + b.first_slot;
  float* l = st.l.data() + static_cast<std::size_t>(b.first_slot) * kLanes;
  const std::int64_t* visible = st.visible.data() + b.first_slot;
  float(*w)[kTile] = tw.w;

  // Scores: accumulator r * KB + k is row r against key j0 + k.
  for (int j0 = 0; j0 < nt; j0 += KB) {
    if (pf.k != nullptr && j0 < pf.nt) prefetch_rows<T, D>(pf.k, j0, std::min(j0 + KB, pf.nt), pf.head_off);
    vec a[kLanes] = {};
    for (int c = 0; c < kChunks; ++c) {
      vec kc[KB];
      for (int k = 0; k < KB; ++k) kc[k] = simd::load_as_float(kt[j0 + k] + head_off + c * kLanes);
      for (int r = 0; r < RB; ++r) {
        const vec qv = simd::loadv(q + r * D + c * kLanes);
        for (int k = 0; k < KB; ++k) a[r * KB + k] += qv * kc[k];
      }
    }
    alignas(64) float sums[kLanes];
    simd::storev(sums, simd::transpose_sum(a));
    for (int r = 0; r < RB; ++r)
      for (int k = 0; k < KB; ++k) w[r][j0 + k] = sums[r * KB + k];
  }
  if (pf.k != nullptr && nt < pf.nt) prefetch_rows<T, D>(pf.k, nt, pf.nt, pf.head_off);

  // Online softmax, one vector per row; masked (not yet visible) tokens weigh exactly zero.
  vec lane;
  for (int i = 0; i < kLanes; ++i) lane[i] = static_cast<float>(i);
  tw.jv = 0;
  tw.ragged = false;
  vec s[RB];
  for (int r = 0; r < RB; ++r) {
    tw.live[r] = static_cast<int>(std::clamp<std::int64_t>(visible[r] - tbase, 0, nt));
    tw.ragged = tw.ragged || tw.live[r] != tw.live[0];
    tw.jv = std::max(tw.jv, tw.live[r]);
    s[r] = lane < static_cast<float>(tw.live[r]) ? simd::loadv(w[r])
                                                 : simd::splat(-std::numeric_limits<float>::infinity());
  }
  float tile_max[RB];
  row_maxima<RB>(s, tile_max);
  for (int r = 0; r < RB; ++r) {
    if (tw.live[r] == 0) {
      simd::storev(w[r], simd::splat(0.f));
      tw.corr[r] = 1.f;
      continue;
    }
    const auto is_live = lane < static_cast<float>(tw.live[r]);
    const float mx = std::max(m[r], tile_max[r]);
    const vec e = is_live ? simd::exp(s[r] - mx) : simd::splat(0.f);
    // Once the running max settles (most tiles), nothing needs rescaling. A NaN score never
    // becomes the max (std::max keeps m, vmax keeps the other lane); it reaches the output
    // through e = exp(NaN - mx) below.
    tw.corr[r] = mx == m[r] ? 1.f : std::exp(m[r] - mx);
    // The sum stays a vector of per-lane partial sums, reduced once when the chunk finishes.
    simd::storev(l + r * kLanes, simd::loadv(l + r * kLanes) * tw.corr[r] + e);
    m[r] = mx;
    simd::storev(w[r], e);
  }
}

/// The V pass of one tile for one row block, with the weights its score pass left.
template <class T, int D, int RB>
void v_block(ChunkState& st, const RowBlock& b, const T* const* vt, std::int64_t head_off, const TileWeights& tw,
             const PrefetchPlan<T>& pf) {
  float* acc = st.acc.data() + static_cast<std::size_t>(b.first_slot) * D;
  if (tw.ragged) {
    accumulate_v<T, D, RB, true>(acc, tw.w, tw.corr, tw.live, tw.jv, vt, head_off, pf);
  } else {
    accumulate_v<T, D, RB, false>(acc, tw.w, tw.corr, tw.live, tw.jv, vt, head_off, pf);
  }
}

template <class T, int D>
void dispatch_score(ChunkState& st, const RowBlock& b, const T* const* kt, std::int64_t head_off, int nt,
                    std::int64_t tbase, const PrefetchPlan<T>& pf, TileWeights& tw) {
  switch (b.rb) {
    case 1:
      return score_block<T, D, 1>(st, b, kt, head_off, nt, tbase, pf, tw);
    case 2:
      return score_block<T, D, 2>(st, b, kt, head_off, nt, tbase, pf, tw);
    case 4:
      return score_block<T, D, 4>(st, b, kt, head_off, nt, tbase, pf, tw);
    case 8:
      return score_block<T, D, 8>(st, b, kt, head_off, nt, tbase, pf, tw);
    default:
      return score_block<T, D, 16>(st, b, kt, head_off, nt, tbase, pf, tw);
  }
}

template <class T, int D>
void dispatch_v(ChunkState& st, const RowBlock& b, const T* const* vt, std::int64_t head_off, const TileWeights& tw,
                const PrefetchPlan<T>& pf) {
  switch (b.rb) {
    case 1:
      return v_block<T, D, 1>(st, b, vt, head_off, tw, pf);
    case 2:
      return v_block<T, D, 2>(st, b, vt, head_off, tw, pf);
    case 4:
      return v_block<T, D, 4>(st, b, vt, head_off, tw, pf);
    case 8:
      return v_block<T, D, 8>(st, b, vt, head_off, tw, pf);
    default:
      return v_block<T, D, 16>(st, b, vt, head_off, tw, pf);
  }
}

/// A block's V pass waiting for the next block's score pass to be issued ahead of it.
template <class T>
struct PendingV {
  const RowBlock* block = nullptr;  // nullptr: none
  const T* const* vt = nullptr;
  std::int64_t head_off = 0;
  PrefetchPlan<T> pf;
  const TileWeights* tw = nullptr;
};

/// Where a task's rows go: every head's rows cut into blocks of up to 16.
std::vector<RowBlock> row_blocks(int kh0, int nh, int rows_per_head, std::int64_t len, int n, int group) {
  std::vector<RowBlock> blocks;
  for (int hh = 0; hh < nh; ++hh)
    for (int r0 = 0; r0 < rows_per_head; r0 += kMaxBlockRows) {
      const int rows = std::min(kMaxBlockRows, rows_per_head - r0);
      const int last_token = (r0 + rows - 1) / group;
      blocks.push_back({kh0 + hh, 0, rows, static_cast<int>(std::bit_ceil(static_cast<unsigned>(rows))), r0,
                        len - n + last_token + 1});
    }
  return blocks;
}

/// Gives the chunk's blocks their slots and fills them: scaled queries, masks, fresh softmax state.
template <int D>
void start_chunk(const AttentionParams& p, int s, std::span<RowBlock> blocks, ChunkState& st) {
  const int q0 = p.q_begin(s), n = p.q_end(s) - q0, group = p.group();
  const std::int64_t len = p.seq_lens[s];
  int slot = 0;
  for (RowBlock& b : blocks) {
    b.first_slot = slot;
    for (int i = 0; i < b.rb; ++i, ++slot) {
      const int row = b.first_row + std::min(i, b.rows - 1);
      const int tok = row / group, g = row % group;
      const float* q = p.q + (static_cast<std::size_t>(q0 + tok) * p.num_q_heads + b.head * group + g) * D;
      float* dst = st.q.data() + static_cast<std::size_t>(slot) * D;
      for (int d = 0; d < D; ++d) dst[d] = q[d] * p.scale;
      std::fill_n(st.acc.data() + static_cast<std::size_t>(slot) * D, D, 0.f);
      st.m[slot] = -std::numeric_limits<float>::infinity();
      std::fill_n(st.l.data() + static_cast<std::size_t>(slot) * kLanes, kLanes, 0.f);
      st.visible[slot] = len - n + tok + 1;
    }
  }
}

template <int D>
void finish_chunk(const AttentionParams& p, int s, std::span<const RowBlock> blocks, const ChunkState& st) {
  const int q0 = p.q_begin(s), group = p.group();
  for (const RowBlock& b : blocks)
    for (int i = 0; i < b.rows; ++i) {
      const int row = b.first_row + i, tok = row / group, g = row % group;
      float* out = p.out + (static_cast<std::size_t>(q0 + tok) * p.num_q_heads + b.head * group + g) * D;
      const float* a = st.acc.data() + static_cast<std::size_t>(b.first_slot + i) * D;
      const float inv =
          1.f / simd::hsum(simd::loadv(st.l.data() + static_cast<std::size_t>(b.first_slot + i) * kLanes));
      for (int d = 0; d < D; ++d) out[d] = a[d] * inv;
    }
}

template <class T, int D, class View>
void attend(const AttentionParams& p, const View& kv, int s, int kh0, int nh, std::size_t lead_heads, ChunkState& st) {
  constexpr int kSlots = kChunkSlots<D>;
  const int n = p.q_end(s) - p.q_begin(s);
  std::vector<RowBlock> blocks = row_blocks(kh0, nh, n * p.group(), p.seq_lens[s], n, p.group());
  st.q.resize(static_cast<std::size_t>(kSlots) * D);
  st.acc.resize(st.q.size());
  st.m.resize(kSlots);
  st.l.resize(static_cast<std::size_t>(kSlots) * kLanes);
  st.visible.resize(kSlots);
  // Three tiles' addresses: the one computing, the next (requested ahead), and the previous one,
  // whose last block's V pass may still be pending.
  const T* ks[3][kTile];
  const T* vs[3][kTile];
  TileWeights weights[2];  // the pending block's and the one being scored
  for (std::size_t first = 0; first < blocks.size();) {
    std::size_t last = first;
    for (int slots = 0; last < blocks.size() && slots + blocks[last].rb <= kSlots; ++last) slots += blocks[last].rb;
    const std::span<RowBlock> chunk(blocks.data() + first, last - first);
    start_chunk<D>(p, s, chunk, st);
    std::int64_t max_visible = 0;
    for (const RowBlock& b : chunk) max_visible = std::max(max_visible, b.max_visible);
    const auto token_bytes = static_cast<std::uintptr_t>(kv.token_stride) * sizeof(T);
    const int touch_step =
        static_cast<int>(std::max<std::uintptr_t>(1, 4096 / std::max<std::uintptr_t>(1, token_bytes)));
    // The chunk's heads in order, and each block's place among them: a head's lines are requested
    // while the last block of the head `lead` places earlier computes.
    std::vector<int>& heads = st.heads;
    std::vector<std::size_t>& head_index = st.head_index;
    heads.clear();
    head_index.resize(chunk.size());
    for (std::size_t i = 0; i < chunk.size(); ++i) {
      if (i == 0 || chunk[i].head != chunk[i - 1].head) heads.push_back(chunk[i].head);
      head_index[i] = heads.size() - 1;
    }
    const std::size_t lead = std::min(lead_heads, heads.size());
    // With a chunk of one head (the lead is one), the next tile's lines are requested only during
    // this tile's last block. The L2 hardware streamer follows a run of lines within one 4 KiB page
    // and starts afresh on each page, so one line of each of the next tile's pages is requested
    // into L2 while the second-to-last block computes, a block earlier. Measured in one process
    // (docs/kernels.md): contiguous +2-3 % (one thread +2.6-4.3 %) against no such requests,
    // paged-16 +2-3 % against the same requests at the tile's start. A chunk of one block (one KV
    // head per task) has no second-to-last block: there the requests go out at the tile's start
    // and only where the next tile lies elsewhere; for contiguous tiles that timing cost 4 %.
    // A longer lead requests the next tile's first heads early enough (these requests measured no
    // gain with lead 3: 0.99-1.01x), so none are made.
    const bool touch_tiles = lead == 1;
    const std::size_t touch_at = chunk.size() >= 2 ? chunk.size() - 2 : 0;
    const bool touch_every_tile = chunk.size() >= 2;
    int cur = 0;
    int nt = static_cast<int>(std::min<std::int64_t>(kTile, max_visible));
    tile_tokens(kv, s, 0, nt, ks[cur], vs[cur]);
    for (std::size_t h = 0; h < lead; ++h) {
      prefetch_rows<T, D>(ks[cur], 0, nt, heads[h] * kv.head_stride);
      prefetch_rows<T, D>(vs[cur], 0, nt, heads[h] * kv.head_stride);
    }
    // Each block's score pass and softmax are issued before the previous block's V pass, so that
    // the V pass's FMAs never wait on the softmax's chain of dependent operations and the next
    // block's score pass never waits behind them (software pipelining, docs/kernels.md).
    PendingV<T> pending;
    int next_weights = 0;
    for (std::int64_t t = 0; t < max_visible; t += kTile) {
      const T* const* kt = ks[cur];
      const T* const* vt = vs[cur];
      const int nxt = (cur + 1) % 3;
      const T** nkt = ks[nxt];
      const T** nvt = vs[nxt];
      const std::int64_t next = t + kTile;
      const int next_nt = next < max_visible ? static_cast<int>(std::min<std::int64_t>(kTile, max_visible - next)) : 0;
      if (next_nt > 0) tile_tokens(kv, s, next, next_nt, nkt, nvt);
      // Where the next tile lies somewhere else (the paged view at a block boundary), the early
      // requests also translate each of its pages' addresses.
      const bool touch = touch_tiles && next_nt > 0 &&
                         (touch_every_tile || reinterpret_cast<std::uintptr_t>(nkt[0]) !=
                                                  reinterpret_cast<std::uintptr_t>(kt[nt - 1]) + token_bytes);
      for (std::size_t i = 0; i < chunk.size(); ++i) {
        const RowBlock& b = chunk[i];
        if (touch && i == touch_at)
          for (int j = 0; j < next_nt; j += touch_step) {
            __builtin_prefetch(nkt[j], 0, 1);
            __builtin_prefetch(nvt[j], 0, 1);
          }
        PrefetchPlan<T> pf;  // the lines of the head `lead` places on, while this head's last block computes
        if (i + 1 == chunk.size() || chunk[i + 1].head != b.head) {
          const std::size_t target = head_index[i] + lead;
          if (target < heads.size()) {
            pf = {kt, vt, nt, heads[target] * kv.head_stride};
          } else if (next_nt > 0) {  // lead <= heads.size(): one of the next tile's first heads
            pf = {nkt, nvt, next_nt, heads[target - heads.size()] * kv.head_stride};
          }
        }
        if (b.max_visible > t) {
          TileWeights& tw = weights[next_weights];
          const std::int64_t head_off = b.head * kv.head_stride;
          dispatch_score<T, D>(st, b, kt, head_off, nt, t, pf, tw);
          if (pending.block != nullptr)
            dispatch_v<T, D>(st, *pending.block, pending.vt, pending.head_off, *pending.tw, pending.pf);
          pending = {&b, vt, head_off, pf, &tw};
          next_weights ^= 1;
        } else if (pf.k != nullptr) {  // nothing to compute here (causal): request them at once
          prefetch_rows<T, D>(pf.k, 0, pf.nt, pf.head_off);
          prefetch_rows<T, D>(pf.v, 0, pf.nt, pf.head_off);
        }
      }
      if (next_nt == 0) break;
      cur = nxt;
      nt = next_nt;
    }
    if (pending.block != nullptr)
      dispatch_v<T, D>(st, *pending.block, pending.vt, pending.head_off, *pending.tw, pending.pf);
    finish_chunk<D>(p, s, chunk, st);
    first = last;
  }
}

}  // namespace

int host_prefetch_lead_heads(std::string_view cpu_vendor) { return cpu_vendor == "GenuineIntel" ? 1 : 3; }

int host_prefetch_lead_heads() {
  char vendor[13] = {};
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) != 0) {
    std::memcpy(vendor, &ebx, 4);  // cpuid leaf 0: the vendor string in ebx, edx, ecx
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
  }
#endif
  return host_prefetch_lead_heads(vendor);
}

void host_attention(const AttentionParams& p, const KvView& kv, ThreadPool& pool) {
  static const int lead = host_prefetch_lead_heads();
  host_attention(p, kv, pool, lead);
}

void host_attention(const AttentionParams& p, const KvView& kv, ThreadPool& pool, int prefetch_lead_heads) {
  if (prefetch_lead_heads < 1)
    throw InvalidArgument("host_attention: prefetch_lead_heads must be at least 1, got " +
                          std::to_string(prefetch_lead_heads));
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
    const auto lead = static_cast<std::size_t>(prefetch_lead_heads);
    pool.parallel_for(tasks, [&](std::int64_t task) {
      thread_local ChunkState state;
      const int s = static_cast<int>(task / groups);
      const int kh0 = static_cast<int>(task % groups) * heads_per_task;
      if (p.q_end(s) > p.q_begin(s)) attend<T, D, View>(p, view, s, kh0, heads_per_task, lead, state);
    });
  });
}

}  // namespace kvlab
