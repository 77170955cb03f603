#pragma once
// A layer's KV rows read and written from the CPU whatever the device: the per-batch metadata
// (sequence bases, or block tables) copied to the host, the bytes moved by copy_bytes (memmove on
// the host and the emulated device, cudaMemcpy on a GPU). Shared by the integrity checker
// (kv_integrity.hpp) and the execute-mode fill (kv_fill.hpp).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "alloc/core/device.hpp"
#include "alloc/core/kv_view.hpp"
#include "alloc/transfer/copy.hpp"

namespace kvlab {

/// A layer's view with its per-batch metadata (sequence bases, or block tables) copied to the
/// host, so the CPU computes every token's address whatever the device; the K and V bytes stay
/// where they are and move through copy_bytes (memmove on the host and the emulated device,
/// cudaMemcpy on a GPU): one code path, which the emulated device exercises in CI.
struct HostMetadata {
  std::vector<void*> k_seq, v_seq;
  std::vector<std::int32_t> table;
  KvView view;

  HostMetadata(const KvView& v, int batch, Device device) : view(v) {
    const auto n = static_cast<std::size_t>(batch);
    if (v.layout == KvLayout::contiguous) {
      k_seq.resize(n);
      v_seq.resize(n);
      copy_bytes(device, k_seq.data(), v.k_seq, n * sizeof(void*));
      copy_bytes(device, v_seq.data(), v.v_seq, n * sizeof(void*));
      view.k_seq = k_seq.data();
      view.v_seq = v_seq.data();
    } else {
      table.resize(n * static_cast<std::size_t>(v.block_table_stride));
      copy_bytes(device, table.data(), v.block_table, table.size() * sizeof(std::int32_t));
      view.block_table = table.data();
    }
  }
};

/// One token's K (kv 0) or V (kv 1) row of every head, between the device and `row` (heads x
/// head_dim elements, head-major): one copy when the heads are adjacent, else one per head.
template <class View, class T>
void move_row(Device device, const View& view, int s, std::int64_t t, int kv, int heads, int dim, T* row, bool load) {
  const auto at = [&](int h) { return kv == 0 ? view.k(s, t, h) : view.v(s, t, h); };
  const bool adjacent = heads == 1 || at(1) == at(0) + dim;
  for (int h = 0; h < heads; h += adjacent ? heads : 1) {
    const std::size_t bytes = static_cast<std::size_t>(adjacent ? heads : 1) * dim * sizeof(T);
    if (load)
      copy_bytes(device, row + static_cast<std::size_t>(h) * dim, at(h), bytes);
    else
      copy_bytes(device, at(h), row + static_cast<std::size_t>(h) * dim, bytes);
  }
}

}  // namespace kvlab
