#include "alloc/backend/batch_views.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

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
  if (layout_ == KvLayout::contiguous) find_common_bases();
  if (device == Device::host || mr == nullptr) return {batch_, lens_.data(), lens_.data()};
  // Device kernels read the arrays from device memory: one upload per prepared batch.
  const auto first =
      layout_ == KvLayout::contiguous ? std::as_bytes(std::span(bases_)) : std::as_bytes(std::span(tables_));
  const auto index = std::as_bytes(std::span(base_index_));
  device_arrays_ = staging_.upload(*mr, {first, index, std::as_bytes(std::span(lens_))});
  base_index_offset_ = first.size();
  return {batch_, reinterpret_cast<const std::int32_t*>(device_arrays_ + first.size() + index.size()), lens_.data()};
}

void BatchViews::find_common_bases() {
  base_granule_ = 0;
  base_index_.clear();
  common_bases_.clear();
  if (batch_ == 0) return;
  const auto elem = static_cast<std::ptrdiff_t>(size_of(model_.kv_dtype));
  const std::int64_t token_stride =
      token_stride_ != 0 ? token_stride_ : std::int64_t{model_.num_kv_heads} * model_.head_dim;
  std::int64_t granule = token_stride;
  const auto layers = static_cast<std::size_t>(model_.num_layers);
  const auto b = static_cast<std::size_t>(batch_);
  common_bases_.resize(2 * layers);
  for (std::size_t plane = 0; plane < 2 * layers; ++plane) {
    const auto* row = reinterpret_cast<std::byte* const*>(bases_.data() + plane * b);
    common_bases_[plane] = *std::min_element(row, row + b);
    if (common_bases_[plane] == nullptr) return;  // a sequence without storage (memory mode)
  }
  for (std::size_t layer = 0; layer < layers; ++layer)
    for (std::size_t s = 0; s < b; ++s) {
      const auto* k = static_cast<std::byte*>(bases_[2 * layer * b + s]);
      const auto* v = static_cast<std::byte*>(bases_[(2 * layer + 1) * b + s]);
      const std::ptrdiff_t dk = k - common_bases_[2 * layer], dv = v - common_bases_[2 * layer + 1];
      if (dk != dv || dk % elem != 0) return;  // K and V not at one offset: no common base
      granule = std::gcd(granule, static_cast<std::int64_t>(dk / elem));
    }
  base_index_.resize(layers * b);
  for (std::size_t layer = 0; layer < layers; ++layer)
    for (std::size_t s = 0; s < b; ++s) {
      const std::int64_t index =
          (static_cast<std::byte*>(bases_[2 * layer * b + s]) - common_bases_[2 * layer]) / elem / granule;
      if (index > std::numeric_limits<std::int32_t>::max() / 2) {  // the kernels add a sequence's pages to it
        base_index_.clear();
        return;
      }
      base_index_[layer * b + s] = static_cast<std::int32_t>(index);
    }
  base_granule_ = granule;
}

KvView BatchViews::view(int layer) const {
  KvView v;
  v.layout = layout_;
  v.dtype = model_.kv_dtype;
  v.num_kv_heads = model_.num_kv_heads;
  v.head_dim = model_.head_dim;
  v.token_stride =
      token_stride_ != 0 ? token_stride_ : static_cast<std::int64_t>(model_.num_kv_heads) * model_.head_dim;
  v.head_stride = model_.head_dim;
  if (layout_ == KvLayout::contiguous) {
    void* const* bases = device_arrays_ ? reinterpret_cast<void* const*>(device_arrays_) : bases_.data();
    v.k_seq = bases + (2 * static_cast<std::size_t>(layer)) * batch_;
    v.v_seq = bases + (2 * static_cast<std::size_t>(layer) + 1) * batch_;
    if (base_granule_ > 0) {
      v.k_base = common_bases_[2 * static_cast<std::size_t>(layer)];
      v.v_base = common_bases_[2 * static_cast<std::size_t>(layer) + 1];
      v.base_granule = base_granule_;
      const std::int32_t* index = device_arrays_
                                      ? reinterpret_cast<const std::int32_t*>(device_arrays_ + base_index_offset_)
                                      : base_index_.data();
      v.seq_base_index = index + static_cast<std::size_t>(layer) * batch_;
      v.host_seq_base_index = base_index_.data() + static_cast<std::size_t>(layer) * batch_;
    }
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
