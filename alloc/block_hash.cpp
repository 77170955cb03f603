#include "alloc/block_hash.hpp"

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

}  // namespace kvlab
