#pragma once
// The one KV interface every attention kernel is written against: small, non-owning, trivially
// copyable views passed by value (as FlashInfer's paged_kv_t and cuCollections' *_ref). Strides
// are runtime fields in elements. A view covers one layer of a batch; K and V are separate.
//
// Kernels walk a sequence's tokens in *runs*: a run is a stretch of tokens whose K (and V) rows
// sit at a constant token stride. A contiguous view has one run per sequence; a paged view has one
// run per block. Both views expose the same three accessors, so one kernel body serves both and
// the paged view's block-table lookup happens once per block, not once per token. The erased
// form backends hand out (KvView) is in alloc/core/kv_view.hpp; as_contiguous/as_paged and erase()
// convert between the two.
#include <cstdint>
#include <type_traits>

#include "alloc/core/dtype.hpp"
#include "alloc/core/kv_view.hpp"
#include "kernels/numeric.hpp"
#include "kernels/platform.hpp"

namespace kvlab {

/// Per-sequence base addresses: sequence s's token t, head h lives at
/// k_seq[s] + t * token_stride + h * head_stride (same for V). Contiguous and vmm backends.
template <class T>
struct ContiguousKv {
  T* const* k_seq = nullptr;  ///< [batch] this layer's K base of each sequence
  T* const* v_seq = nullptr;  ///< [batch] this layer's V base of each sequence
  std::int64_t token_stride = 0;
  std::int64_t head_stride = 0;

  KVLAB_HD T* k(int s, std::int64_t t, int h) const { return k_seq[s] + t * token_stride + h * head_stride; }
  KVLAB_HD T* v(int s, std::int64_t t, int h) const { return v_seq[s] + t * token_stride + h * head_stride; }
  /// Tokens from t on that are contiguous at token_stride, given the sequence holds `len` tokens.
  KVLAB_HD std::int64_t run(int, std::int64_t t, std::int64_t len) const { return len - t; }
};

/// A block pool plus block tables (vLLM's PagedAttention): sequence s's token t lives in block
/// block_table[s * block_table_stride + t / block_size], slot t % block_size. Paged backend.
template <class T>
struct PagedKv {
  T* k_pool = nullptr;  ///< this layer's K blocks: block b starts at k_pool + b * block_stride
  T* v_pool = nullptr;
  const std::int32_t* block_table = nullptr;  ///< [batch][block_table_stride]
  std::int64_t block_table_stride = 0;
  std::int32_t block_size = 0;  ///< tokens per block: any value >= 1
  std::int64_t block_stride = 0;
  std::int64_t token_stride = 0;
  std::int64_t head_stride = 0;

  // In-block arithmetic in 32 bits (sequence lengths are int32): 64-bit division is a slow
  // subroutine on GPUs and made ptxas spill.
  KVLAB_HD std::int64_t offset(int s, std::int64_t t, int h) const {
    const auto tt = static_cast<std::int32_t>(t);
    const std::int32_t block = block_table[s * block_table_stride + tt / block_size];
    return block * block_stride + (tt % block_size) * token_stride + h * head_stride;
  }
  KVLAB_HD T* k(int s, std::int64_t t, int h) const { return k_pool + offset(s, t, h); }
  KVLAB_HD T* v(int s, std::int64_t t, int h) const { return v_pool + offset(s, t, h); }
  KVLAB_HD std::int64_t run(int, std::int64_t t, std::int64_t len) const {
    const std::int64_t to_block_end = block_size - static_cast<std::int32_t>(t) % block_size;
    return len - t < to_block_end ? len - t : to_block_end;
  }
};

static_assert(std::is_trivially_copyable_v<ContiguousKv<half_t>>);
static_assert(std::is_trivially_copyable_v<PagedKv<half_t>>);

template <class T>
ContiguousKv<T> as_contiguous(const KvView& v) {
  return {reinterpret_cast<T* const*>(v.k_seq), reinterpret_cast<T* const*>(v.v_seq), v.token_stride, v.head_stride};
}
template <class T>
PagedKv<T> as_paged(const KvView& v) {
  return {static_cast<T*>(v.k_pool),
          static_cast<T*>(v.v_pool),
          v.block_table,
          v.block_table_stride,
          v.block_size,
          v.block_stride,
          v.token_stride,
          v.head_stride};
}

template <class T>
KvView erase(const ContiguousKv<T>& v, int num_kv_heads, int head_dim) {
  KvView e;
  e.layout = KvLayout::contiguous;
  e.dtype = dtype_of<T>;
  e.num_kv_heads = num_kv_heads;
  e.head_dim = head_dim;
  e.token_stride = v.token_stride;
  e.head_stride = v.head_stride;
  e.k_seq = reinterpret_cast<void* const*>(v.k_seq);
  e.v_seq = reinterpret_cast<void* const*>(v.v_seq);
  return e;
}
template <class T>
KvView erase(const PagedKv<T>& v, int num_kv_heads, int head_dim) {
  KvView e;
  e.layout = KvLayout::paged;
  e.dtype = dtype_of<T>;
  e.num_kv_heads = num_kv_heads;
  e.head_dim = head_dim;
  e.token_stride = v.token_stride;
  e.head_stride = v.head_stride;
  e.k_pool = v.k_pool;
  e.v_pool = v.v_pool;
  e.block_table = v.block_table;
  e.block_table_stride = v.block_table_stride;
  e.block_size = v.block_size;
  e.block_stride = v.block_stride;
  return e;
}

}  // namespace kvlab
