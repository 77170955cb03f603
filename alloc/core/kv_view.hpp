#pragma once
// The type-erased KV view a backend hands out for one layer of a prepared batch. It names only
// element types and addresses, so the backend side (alloc/, paged/, vmm/) needs nothing from
// kernels/; the typed views the kernels are written against (ContiguousKv, PagedKv) and the one
// dispatch site that turns this struct into them live in kernels/kv_view.hpp, which includes this
// header (kernels/ depends on alloc/, never the other way round).
#include <cstdint>

#include "alloc/core/dtype.hpp"

namespace kvlab {

enum class KvLayout { contiguous, paged };

/// Strides are in elements. Fields of the other layout are ignored.
///  contiguous: sequence s's token t, head h lives at k_seq[s] + t * token_stride + h * head_stride.
///  paged:      block_table[s * block_table_stride + t / block_size] names the block, which starts
///              at k_pool + block * block_stride; inside it, slot t % block_size as above.
struct KvView {
  KvLayout layout = KvLayout::contiguous;
  DType dtype = DType::f16;
  int num_kv_heads = 0;
  int head_dim = 0;
  std::int64_t token_stride = 0;
  std::int64_t head_stride = 0;
  // contiguous
  void* const* k_seq = nullptr;
  void* const* v_seq = nullptr;
  // contiguous, common-base form (optional; FlashInfer's kernels need it, BatchViews fills it
  // when it holds): sequence s's K rows start seq_base_index[s] * base_granule elements after
  // k_base, and its V rows as many after v_base. base_granule divides token_stride.
  void* k_base = nullptr;
  void* v_base = nullptr;
  std::int64_t base_granule = 0;
  const std::int32_t* seq_base_index = nullptr;       ///< [batch], in the same memory as k_seq
  const std::int32_t* host_seq_base_index = nullptr;  ///< the same in host memory (kernels that plan on the host)
  // paged
  void* k_pool = nullptr;
  void* v_pool = nullptr;
  const std::int32_t* block_table = nullptr;
  std::int64_t block_table_stride = 0;
  std::int32_t block_size = 0;
  std::int64_t block_stride = 0;
};

}  // namespace kvlab
