#include "paged/prefix_hash.hpp"

#include <algorithm>

#include "alloc/error.hpp"

namespace kvlab {

namespace {
__extension__ using u128 = unsigned __int128;
constexpr std::uint64_t kS0 = 0xa0761d6478bd642fULL, kS1 = 0xe7037ed1a0b428dbULL, kS2 = 0x8ebc6af09c88c6e3ULL,
                        kS3 = 0x589965cc75374cc3ULL;
/// wyhash's mixing step: the 128-bit product folded to 64 bits.
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) noexcept {
  const u128 r = static_cast<u128>(a) * b;
  return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
}
inline std::uint64_t word(const std::int32_t* p) noexcept {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint64_t>(static_cast<std::uint32_t>(p[1])) << 32);
}
}  // namespace

std::uint64_t hash_block(std::uint64_t parent, std::span<const std::int32_t> tokens,
                         std::span<const std::int64_t> extra) noexcept {
  std::uint64_t h = mix(parent ^ kS0, kS1);
  for (const std::int64_t e : extra) h = mix(static_cast<std::uint64_t>(e) ^ kS1, h ^ kS2);
  const std::int32_t* p = tokens.data();
  std::size_t n = tokens.size();
  for (; n >= 4; n -= 4, p += 4) h = mix(word(p) ^ kS1, word(p + 2) ^ h);  // 16 bytes a round
  std::uint64_t a = 0, b = 0;
  if (n >= 2) {
    a = word(p);
    p += 2;
    n -= 2;
  }
  if (n == 1) b = static_cast<std::uint32_t>(p[0]);
  const std::uint64_t len = (static_cast<std::uint64_t>(tokens.size()) << 8) ^ extra.size();
  return mix(kS1 ^ len, mix(a ^ kS1 ^ kS3, b ^ h ^ kS2));
}

HashPrefixCache::HashPrefixCache(std::int32_t num_blocks, std::int32_t block_size) : block_size_(block_size) {
  const auto n = static_cast<std::size_t>(num_blocks);
  cached_.assign(n, 0);
  key_.assign(n, 0);
  gen_.assign(n, 0);
  parent_.assign(n, -1);
  parent_gen_.assign(n, 0);
  tokens_.assign(n * static_cast<std::size_t>(block_size), 0);
  extra_.resize(n);
}

std::span<const std::int32_t> HashPrefixCache::stored_tokens(BlockId b) const noexcept {
  return {tokens_.data() + static_cast<std::size_t>(b) * static_cast<std::size_t>(block_size_),
          static_cast<std::size_t>(block_size_)};
}

bool HashPrefixCache::verifies(BlockId c, std::span<const std::int32_t> block_tokens, BlockId parent,
                               std::span<const std::int64_t> extra) const {
  const auto i = static_cast<std::size_t>(c);
  if (cached_[i] == 0 || parent_[i] != parent) return false;
  if (parent >= 0) {
    if (parent_gen_[i] != gen_[static_cast<std::size_t>(parent)]) return false;
  } else if (!std::ranges::equal(extra_[i], extra)) {
    return false;
  }
  return std::ranges::equal(stored_tokens(c), block_tokens);
}

std::vector<BlockId> HashPrefixCache::match(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                            std::int64_t max_blocks) const {
  std::vector<BlockId> out;
  std::uint64_t key = 0;
  BlockId parent = -1;
  const auto bs = static_cast<std::size_t>(block_size_);
  for (std::int64_t i = 0; i < max_blocks; ++i) {
    const auto blk = tokens.subspan(static_cast<std::size_t>(i) * bs, bs);
    key = hash_block(key, blk, i == 0 ? extra : std::span<const std::int64_t>{});
    const auto it = table_.find(key);
    if (it == table_.end() || !verifies(it->second, blk, parent, extra)) break;
    parent = it->second;
    out.push_back(parent);
  }
  return out;
}

std::int64_t HashPrefixCache::insert(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                     std::span<const BlockId> blocks, std::int64_t from, std::int64_t to) {
  const auto bs = static_cast<std::size_t>(block_size_);
  BlockId parent = -1;
  std::uint64_t key = 0;
  if (from > 0) {
    parent = blocks[static_cast<std::size_t>(from - 1)];
    KVLAB_ASSERT(is_cached(parent));
    key = key_[static_cast<std::size_t>(parent)];
  }
  std::int64_t entered = 0;
  for (std::int64_t i = from; i < to; ++i) {
    const auto blk = tokens.subspan(static_cast<std::size_t>(i) * bs, bs);
    const BlockId b = blocks[static_cast<std::size_t>(i)];
    const std::span<const std::int64_t> salt = i == 0 ? extra : std::span<const std::int64_t>{};
    key = hash_block(key, blk, salt);
    KVLAB_ASSERT(!is_cached(b));
    if (const auto it = table_.find(key); it != table_.end()) {
      if (verifies(it->second, blk, parent, extra)) break;  // already cached elsewhere: keep ours private
      forget(it->second);  // a stale entry (its parent was evicted) or a true 64-bit collision
    }
    const auto s = static_cast<std::size_t>(b);
    cached_[s] = 1;
    key_[s] = key;
    parent_[s] = parent;
    parent_gen_[s] = parent >= 0 ? gen_[static_cast<std::size_t>(parent)] : 0;
    std::copy(blk.begin(), blk.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(s * bs));
    if (parent < 0) extra_[s].assign(salt.begin(), salt.end());
    table_.emplace(key, b);
    parent = b;
    ++entered;
  }
  return entered;
}

bool HashPrefixCache::forget(BlockId b) {
  const auto s = static_cast<std::size_t>(b);
  if (cached_[s] == 0) return false;
  const auto it = table_.find(key_[s]);
  KVLAB_ASSERT(it != table_.end() && it->second == b);
  table_.erase(it);
  cached_[s] = 0;
  ++gen_[s];
  extra_[s].clear();
  return true;
}

}  // namespace kvlab
