#include "serving/traces/token_ids.hpp"

#include <algorithm>
#include <unordered_map>

namespace kvlab {

namespace {
/// Key of the first `k` hash ids of a request (k mixed in: lists of different lengths never meet).
std::uint64_t prefix_key(const std::vector<std::int64_t>& h, std::size_t k) {
  std::uint64_t key = 0xcbf29ce484222325ULL ^ k;
  for (std::size_t i = 0; i < k; ++i) key = (key ^ static_cast<std::uint64_t>(h[i])) * 0x100000001b3ULL;
  return key;
}

/// Hash blocks a request's prompt fills completely.
std::int64_t full_blocks(const Request& r) { return r.prompt_tokens / r.prefix_hash_block; }

bool has_hashes(const Request& r) { return !r.prefix_hashes.empty() && r.prefix_hash_block > 0; }
}  // namespace

TraceTokenIds::TraceTokenIds(const std::vector<Request>& workload) : w_(&workload), next_(workload.size(), -1) {
  // Earlier requests by the key of all their full blocks; each waits for its first continuer.
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> open;
  for (std::size_t c = 0; c < workload.size(); ++c) {
    const Request& rc = workload[c];
    if (!has_hashes(rc)) continue;
    const auto& h = rc.prefix_hashes;
    std::int64_t parent = -1;
    for (std::size_t k = 2; k <= h.size(); ++k) {  // the deepest match wins
      const auto it = open.find(prefix_key(h, k));
      if (it == open.end()) continue;
      std::int64_t found = -1, count = 0;
      for (const std::size_t r : it->second) {
        const Request& rr = workload[r];
        if (next_[r] >= 0 || rr.prefix_hash_block != rc.prefix_hash_block ||
            rr.prompt_tokens + rr.output_tokens > rc.prompt_tokens ||
            !std::equal(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(k), rr.prefix_hashes.begin()))
          continue;
        found = static_cast<std::int64_t>(r);
        ++count;
      }
      if (count > 0) parent = count == 1 ? found : -1;  // ambiguous at this depth: no continuation
    }
    if (parent >= 0) {
      next_[static_cast<std::size_t>(parent)] = static_cast<std::int64_t>(c);
      ++continued_;
    }
    const std::int64_t k = full_blocks(rc);
    if (k >= 2 && k <= static_cast<std::int64_t>(h.size()))
      open[prefix_key(h, static_cast<std::size_t>(k))].push_back(c);
  }
}

std::int32_t TraceTokenIds::derived_id(const Request& r, std::int64_t t) const {
  // Block b's tokens are hash * B + offset: equal hash at block b, equal ids up to its end.
  const auto block = static_cast<std::size_t>(t / r.prefix_hash_block);
  // Unsigned arithmetic: real 64-bit hashes times the block size wrap (signed overflow is UB).
  const std::uint64_t h = block < r.prefix_hashes.size() ? static_cast<std::uint64_t>(r.prefix_hashes[block])
                                                         : ~static_cast<std::uint64_t>(block);  // -1 - block
  const auto b = static_cast<std::uint64_t>(r.prefix_hash_block);
  return static_cast<std::int32_t>((h * b + static_cast<std::uint64_t>(t) % b) & 0x7fffffff);
}

std::vector<std::int32_t> TraceTokenIds::ids(std::size_t i, std::int64_t n) const {
  const Request& r = (*w_)[i];
  if (!r.prompt_token_ids.empty()) {
    const auto keep = std::min(r.prompt_token_ids.size(), static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
    return {r.prompt_token_ids.begin(), r.prompt_token_ids.begin() + static_cast<std::ptrdiff_t>(keep)};
  }
  std::vector<std::int32_t> out;
  if (!has_hashes(r)) return out;
  out.reserve(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
  for (std::int64_t t = 0; t < n; ++t) {
    // From its last full block on, a continued request's tokens are its continuer's (whose own
    // tail may be its continuer's in turn).
    std::size_t x = i;
    while (next_[x] >= 0 && t >= full_blocks((*w_)[x]) * (*w_)[x].prefix_hash_block &&
           t < (*w_)[x].prompt_tokens + (*w_)[x].output_tokens)
      x = static_cast<std::size_t>(next_[x]);
    if (x == i && t >= r.prompt_tokens) break;  // an answer nobody continues: unknown
    out.push_back(derived_id((*w_)[x], t));
  }
  return out;
}

}  // namespace kvlab
