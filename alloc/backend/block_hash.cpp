#include "alloc/backend/block_hash.hpp"

// xxHash used header-only: no shared library to carry to a bare GPU machine (docs/dependencies.md).
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvlab {

namespace {
/// Keeps a block's extra keys apart from its parent key: a block with extra keys never shares a
/// seed with one without.
constexpr std::uint64_t kExtraKeysTag = 0x9e3779b97f4a7c15ULL;
}  // namespace

std::uint64_t hash_block(std::uint64_t parent, std::span<const std::int32_t> tokens,
                         std::span<const std::int64_t> extra) noexcept {
  // The chain: the parent key seeds the block's hash, folded first with the extra keys (salt)
  // where there are any; the token ids are hashed as they lie in memory.
  std::uint64_t seed = parent;
  if (!extra.empty()) seed = XXH3_64bits_withSeed(extra.data(), extra.size_bytes(), parent ^ kExtraKeysTag);
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), seed);
}

}  // namespace kvlab
