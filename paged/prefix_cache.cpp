#include "paged/prefix_cache.hpp"

#include <string>

#include "alloc/core/error.hpp"
#include "paged/hash_prefix_cache.hpp"
#include "paged/radix_cache.hpp"

namespace kvlab {

namespace {
/// `none`: never hits, enters nothing, holds nothing.
class NoPrefixCache final : public PrefixCache {
 public:
  PrefixHit match(std::span<const std::int32_t>, std::span<const std::int64_t>, std::int64_t) const override {
    return {};
  }
  std::int32_t acquire_hit(const PrefixHit&, std::span<const std::int64_t>) override { return -1; }
  std::int64_t enter_blocks(std::span<const std::int32_t>, std::span<const std::int64_t>, std::span<const BlockId>,
                            std::int64_t, std::int64_t, std::int32_t&) override {
    return 0;
  }
  void share_hold(std::int32_t) override {}
  void release_hold(std::int32_t) override {}
  void forget_block(BlockId) override {}
  std::int64_t evictable_blocks() const override { return 0; }
  std::int64_t evict(std::int64_t) override { return 0; }
  std::int64_t cached_free_blocks() const override { return 0; }
  std::int64_t evictions() const override { return 0; }
};
}  // namespace

PrefixCacheMode parse_prefix_cache_mode(std::string_view name) {
  if (name == "none") return PrefixCacheMode::none;
  if (name == "hash") return PrefixCacheMode::hash;
  if (name == "radix") return PrefixCacheMode::radix;
  KVLAB_THROW(InvalidArgument, "unknown prefix cache mode '" + std::string(name) + "' (known: none, hash, radix)");
}

std::string_view to_string(PrefixCacheMode mode) noexcept {
  switch (mode) {
    case PrefixCacheMode::hash:
      return "hash";
    case PrefixCacheMode::radix:
      return "radix";
    default:
      return "none";
  }
}

std::unique_ptr<PrefixCache> make_prefix_cache(PrefixCacheMode mode, BlockPool& pool, std::int32_t block_size,
                                               std::int32_t host_blocks) {
  KVLAB_EXPECTS(host_blocks >= 0, "host tier blocks must not be negative");
  KVLAB_EXPECTS(host_blocks == 0 || mode == PrefixCacheMode::hash, "a host tier needs the hash prefix cache");
  switch (mode) {
    case PrefixCacheMode::none:
      return std::make_unique<NoPrefixCache>();
    case PrefixCacheMode::hash:
      return std::make_unique<HashPrefixCache>(pool, block_size, host_blocks);
    case PrefixCacheMode::radix:
      return std::make_unique<RadixCache>(block_size, pool);
  }
  KVLAB_THROW(InvalidArgument, "unknown prefix cache mode");
}

}  // namespace kvlab
