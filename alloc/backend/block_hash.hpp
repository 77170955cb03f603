#pragma once
// The 64-bit hash that keys prefix-cache blocks: the paged backend's hash mode and the vmm
// backend's page sharing chain it block to block (alloc/backend/chained_prefix_index.hpp); the paged
// radix tree keys its edges and roots with it.
#include <cstdint>
#include <span>

namespace kvlab {

/// xxHash's XXH3 (64 bits) of the token ids, seeded with the parent key, folded first with the
/// extra keys (salt) where there are any. Only finds candidates: every user verifies a hit token by
/// token.
[[nodiscard]] std::uint64_t hash_block(std::uint64_t parent, std::span<const std::int32_t> tokens,
                                       std::span<const std::int64_t> extra = {}) noexcept;

}  // namespace kvlab
