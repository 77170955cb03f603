#pragma once
// KV integrity checking: a deterministic pattern per (token tag, layer, K|V, head, element) is
// written into every KV slot a replay computes, and every live sequence is read back and compared
// after every step, so copy-on-write, swap out and in, vmm reclaim and remap and prefix-cache hits
// are all proven to have moved the right bytes (`kvlab replay --verify-kv`).
//
// A token's tag names what its KV would be in a real model: a prompt token's tag chains the token
// ids before it (so a prefix-cache hit must hand over exactly the KV another sequence wrote for the
// same prefix), a generated token's tag is its sequence and position. Forks inherit the parent's
// tags. Patterns are small integers, exact in fp16, bf16 and fp32.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "alloc/backend/kv_backend.hpp"

namespace kvlab {

class KvIntegrity {
 public:
  explicit KvIntegrity(KvBackend& backend);

  /// Tokens [from, from + tags.size()) of `id` now hold KV computed for these tags: write them.
  void write(SeqId id, std::int64_t from, std::span<const std::uint64_t> tags);
  /// Tokens [from, from + tags.size()) of `id` were not computed by it (a prefix-cache hit): record
  /// the tags they must carry; verify() then checks the bytes someone else wrote.
  void expect(SeqId id, std::int64_t from, std::span<const std::uint64_t> tags);
  /// `child` starts as a copy of `parent`.
  void fork(SeqId parent, SeqId child);
  /// `id` was released.
  void forget(SeqId id);
  /// Reads back every recorded token of `ids` (all resident on the device); returns the number of
  /// mismatching elements and adds it to mismatches().
  std::int64_t verify(std::span<const SeqId> ids);

  [[nodiscard]] std::int64_t mismatches() const noexcept { return mismatches_; }
  [[nodiscard]] std::int64_t tokens_checked() const noexcept { return tokens_checked_; }

  /// The pattern element for a tag (exposed for tests).
  [[nodiscard]] static float pattern(std::uint64_t tag, int layer, int kv, int head, int d) noexcept;
  /// Tag of prompt token t given the previous token's tag (the chain) and the token's id.
  [[nodiscard]] static std::uint64_t chain(std::uint64_t previous, std::int64_t token_id) noexcept;
  /// Tag of a token without ids: its owner and position.
  [[nodiscard]] static std::uint64_t positional(std::uint64_t owner, std::int64_t position) noexcept;

 private:
  std::vector<std::uint64_t>& tags_of(SeqId id, std::int64_t upto);

  KvBackend& b_;
  std::unordered_map<SeqId, std::vector<std::uint64_t>> tags_;
  std::int64_t mismatches_ = 0;
  std::int64_t tokens_checked_ = 0;
};

}  // namespace kvlab
