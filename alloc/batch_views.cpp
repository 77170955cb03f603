#include "alloc/batch_views.hpp"

namespace kvlab {

void BatchViews::begin_contiguous(int batch, std::int64_t token_stride) {
  layout_ = KvLayout::contiguous;
  token_stride_ = token_stride;
  batch_ = batch;
  bases_.assign(static_cast<std::size_t>(model_.num_layers) * 2 * batch_, nullptr);
  lens_.assign(static_cast<std::size_t>(batch_), 0);
}

std::span<std::int32_t> BatchViews::begin_paged(int batch, std::int64_t table_stride, const PagedPools& pools) {
  layout_ = KvLayout::paged;
  token_stride_ = 0;
  batch_ = batch;
  table_stride_ = table_stride;
  pools_ = pools;
  tables_.assign(static_cast<std::size_t>(batch_ * table_stride_), -1);
  lens_.assign(static_cast<std::size_t>(batch_), 0);
  return tables_;
}

PreparedBatch BatchViews::finish(Device device, MemoryResource* mr) {
  device_arrays_ = nullptr;
  if (device == Device::host || mr == nullptr) return {batch_, lens_.data()};
  // Device kernels read the arrays from device memory: one upload per prepared batch.
  const auto first = layout_ == KvLayout::contiguous ? std::as_bytes(std::span(bases_)) : std::as_bytes(std::span(tables_));
  device_arrays_ = staging_.upload(*mr, first, std::as_bytes(std::span(lens_)));
  return {batch_, reinterpret_cast<const std::int32_t*>(device_arrays_ + first.size())};
}

KvView BatchViews::view(int layer) const {
  KvView v;
  v.layout = layout_;
  v.dtype = model_.kv_dtype;
  v.num_kv_heads = model_.num_kv_heads;
  v.head_dim = model_.head_dim;
  v.token_stride = token_stride_ != 0 ? token_stride_ : static_cast<std::int64_t>(model_.num_kv_heads) * model_.head_dim;
  v.head_stride = model_.head_dim;
  if (layout_ == KvLayout::contiguous) {
    void* const* bases = device_arrays_ ? reinterpret_cast<void* const*>(device_arrays_) : bases_.data();
    v.k_seq = bases + (2 * static_cast<std::size_t>(layer)) * batch_;
    v.v_seq = bases + (2 * static_cast<std::size_t>(layer) + 1) * batch_;
    return v;
  }
  v.k_pool = pools_.region + (2 * static_cast<std::size_t>(layer)) * pools_.plane_bytes;
  v.v_pool = pools_.region + (2 * static_cast<std::size_t>(layer) + 1) * pools_.plane_bytes;
  v.block_table = device_arrays_ ? reinterpret_cast<const std::int32_t*>(device_arrays_) : tables_.data();
  v.block_table_stride = table_stride_;
  v.block_size = pools_.block_size;
  v.block_stride = pools_.block_stride;
  return v;
}

}  // namespace kvlab
