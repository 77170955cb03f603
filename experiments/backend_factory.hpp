#pragma once
// Backends by name, the one place the command line, sweeps and tests turn a name into a backend.
// An unknown name fails loudly, listing the known forms.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "alloc/kv_backend.hpp"
#include "alloc/memory_resource.hpp"

namespace kvlab {

struct BackendOptions {
  ModelGeometry model;
  std::size_t capacity_bytes = 0;
  std::int64_t max_seq_len = 0;      ///< 0: the model's max context
  MemoryResource* memory = nullptr;  ///< nullptr: accounting only
};

/// Known forms: contiguous-max, contiguous-pow2, contiguous-oracle, paged-B (B = block size in
/// tokens, 1..1024), vmm-P[-mega] (P = page size, a multiple of 4 KiB written with k or m: vmm-4k,
/// vmm-64k, vmm-256k, vmm-2m; -mega selects the layer-interleaved layout; deferred reclamation on).
[[nodiscard]] std::unique_ptr<KvBackend> make_backend(std::string_view name, const BackendOptions& options);
[[nodiscard]] std::vector<std::string> backend_forms();
/// What `kvlab compare` runs by default: every contiguous policy, paged and vmm at a few sizes.
[[nodiscard]] std::string default_compare_backends();

}  // namespace kvlab
