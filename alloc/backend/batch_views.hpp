#pragma once
// The per-batch arrays a backend prepares for the kernels, and the views over them: per-layer
// K/V base pointers for the contiguous layout (contiguous and vmm backends), block tables for the
// paged layout; the sequence lengths; and their device copies when the KV lives on a GPU. A
// backend fills in what only it knows (where a sequence's layer starts, which blocks it holds) and
// this class builds every KvView the same way.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "alloc/core/device.hpp"
#include "alloc/transfer/device_staging.hpp"
#include "alloc/backend/kv_backend.hpp"
#include "alloc/memory/memory_resource.hpp"
#include "alloc/core/model_geometry.hpp"

namespace kvlab {

/// Where a paged backend's blocks are: plane p = 2 * layer + (0: K, 1: V) starts at
/// region + p * plane_bytes, block b of a plane at b * block_stride elements from its start.
struct PagedPools {
  std::byte* region = nullptr;
  std::size_t plane_bytes = 0;
  std::int32_t block_size = 0;
  std::int64_t block_stride = 0;  ///< elements
};

class BatchViews {
 public:
  explicit BatchViews(const ModelGeometry& model) : model_(model) {}

  /// Starts a contiguous-layout batch of `batch` sequences: every base null, every length 0.
  /// `token_stride` (elements) 0: one token's row of one layer (kv_heads x head_dim).
  void begin_contiguous(int batch, std::int64_t token_stride = 0);
  /// Sequence b's K and V bases in `layer` (contiguous layout).
  void set_bases(int b, int layer, void* k, void* v) noexcept {
    bases_[(2 * static_cast<std::size_t>(layer)) * batch_ + b] = k;
    bases_[(2 * static_cast<std::size_t>(layer) + 1) * batch_ + b] = v;
  }
  /// Starts a paged-layout batch whose tables have `table_stride` entries per sequence (filled
  /// with -1); returns the tables ([batch][table_stride]) to fill in.
  std::span<std::int32_t> begin_paged(int batch, std::int64_t table_stride, const PagedPools& pools);
  void set_length(int b, std::int64_t length) noexcept { lens_[b] = static_cast<std::int32_t>(length); }

  /// Ends the batch. On a device other than the host the arrays are uploaded to memory from `mr`
  /// (one copy per batch) and the views point there.
  PreparedBatch finish(Device device, MemoryResource* mr);
  /// One layer's view of the finished batch. A contiguous view carries the common-base form
  /// (KvView::k_base, v_base, base_granule, seq_base_index) when every sequence's K and V of each
  /// layer sit at the same element offset from one K base and one V base, offsets whose common
  /// divisor (with the token stride) indexes them in 31 bits; otherwise those fields stay null.
  [[nodiscard]] KvView view(int layer) const;

 private:
  ModelGeometry model_;
  KvLayout layout_ = KvLayout::contiguous;
  int batch_ = 0;
  std::vector<void*> bases_;          // contiguous: [layer][K|V][batch]
  std::vector<std::int32_t> tables_;  // paged: [batch][table_stride_]
  std::vector<std::int32_t> lens_;
  std::int64_t table_stride_ = 1;
  std::int64_t token_stride_ = 0;
  PagedPools pools_;
  const std::byte* device_arrays_ = nullptr;  // the uploaded copy, or null: the host vectors
  // Contiguous layout, the common-base form (KvView::k_base ...), when every layer has one:
  std::vector<std::byte*> common_bases_;  // [layer][K|V]
  std::vector<std::int32_t> base_index_;  // [layer][batch], in granules
  std::int64_t base_granule_ = 0;         // elements; 0: no common base
  std::size_t base_index_offset_ = 0;     // where base_index_ starts in device_arrays_
  void find_common_bases();
  DeviceStaging staging_;
};

}  // namespace kvlab
