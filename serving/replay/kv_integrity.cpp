#include "serving/replay/kv_integrity.hpp"

#include <vector>

#include "alloc/core/error.hpp"
#include "alloc/faults/fault_injection.hpp"
#include "kernels/dispatch.hpp"
#include "serving/replay/kv_rows.hpp"

namespace kvlab {

namespace {
std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

KvIntegrity::KvIntegrity(KvBackend& backend) : b_(backend) {
  KVLAB_EXPECTS(backend.has_storage(), "KV integrity checks need a backend with KV storage");
}

float KvIntegrity::pattern(std::uint64_t tag, int layer, int kv, int head, int d) noexcept {
  const std::uint64_t m = mix(tag ^ (static_cast<std::uint64_t>(layer) << 40) ^ (static_cast<std::uint64_t>(kv) << 39) ^
                              (static_cast<std::uint64_t>(head) << 24));
  const auto byte = static_cast<int>(((m >> ((d % 8) * 8)) + static_cast<std::uint64_t>(d / 8)) & 0xff);
  return static_cast<float>(byte - 128);  // an integer in [-128, 127]: exact in every KV dtype
}

std::uint64_t KvIntegrity::chain(std::uint64_t previous, std::int64_t token_id) noexcept {
  return mix(previous * 0x100000001b3ull ^ static_cast<std::uint64_t>(token_id));
}

std::uint64_t KvIntegrity::positional(std::uint64_t owner, std::int64_t position) noexcept {
  // Mix the owner first so every bit of it counts (a shift would drop high bits and let distinct
  // owners collide), then the position.
  return mix(mix(owner ^ 0xabcdef1234567ull) + static_cast<std::uint64_t>(position));
}

std::vector<std::uint64_t>& KvIntegrity::tags_of(SeqId id, std::int64_t upto) {
  auto& v = tags_[id];
  if (static_cast<std::int64_t>(v.size()) < upto) v.resize(static_cast<std::size_t>(upto), 0);
  return v;
}

void KvIntegrity::expect(SeqId id, std::int64_t from, std::span<const std::uint64_t> tags) {
  auto& v = tags_of(id, from + static_cast<std::int64_t>(tags.size()));
  std::copy(tags.begin(), tags.end(), v.begin() + from);
}

void KvIntegrity::write(SeqId id, std::int64_t from, std::span<const std::uint64_t> tags) {
  if (tags.empty()) return;
  expect(id, from, tags);
  const ModelGeometry& m = b_.model();
  const ScopedFaultPause observer;  // the checker's staging (a device's per-batch arrays) never fails
  b_.prepare_batch({&id, 1});
  const Device device = b_.device();
  for (int layer = 0; layer < m.num_layers; ++layer) {
    const HostMetadata host(b_.layer_view(layer), 1, device);
    visit_kv_view(host.view, [&](auto typed, auto) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(typed.k(0, 0, 0))>>;
      std::vector<T> row(static_cast<std::size_t>(m.num_kv_heads) * m.head_dim);
      for (std::size_t i = 0; i < tags.size(); ++i) {
        const std::int64_t t = from + static_cast<std::int64_t>(i);
        for (int kv = 0; kv < 2; ++kv) {
          for (int h = 0; h < m.num_kv_heads; ++h)
            for (int d = 0; d < m.head_dim; ++d)
              row[static_cast<std::size_t>(h) * m.head_dim + d] = from_float<T>(pattern(tags[i], layer, kv, h, d));
          move_row(device, typed, 0, t, kv, m.num_kv_heads, m.head_dim, row.data(), false);
        }
      }
    });
  }
}

void KvIntegrity::fork(SeqId parent, SeqId child) {
  const auto it = tags_.find(parent);
  if (it != tags_.end()) tags_[child] = it->second;
}

void KvIntegrity::forget(SeqId id) { tags_.erase(id); }

std::int64_t KvIntegrity::verify(std::span<const SeqId> ids) {
  if (ids.empty()) return 0;
  const ModelGeometry& m = b_.model();
  const ScopedFaultPause observer;
  const PreparedBatch batch = b_.prepare_batch(ids);
  const Device device = b_.device();
  std::vector<std::int32_t> lens(static_cast<std::size_t>(batch.batch));
  copy_bytes(device, lens.data(), batch.seq_lens, lens.size() * sizeof(std::int32_t));
  std::int64_t bad = 0;
  for (int layer = 0; layer < m.num_layers; ++layer) {
    const HostMetadata host(b_.layer_view(layer), batch.batch, device);
    visit_kv_view(host.view, [&](auto typed, auto) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(typed.k(0, 0, 0))>>;
      std::vector<T> row(static_cast<std::size_t>(m.num_kv_heads) * m.head_dim);
      for (int s = 0; s < batch.batch; ++s) {
        const auto it = tags_.find(ids[static_cast<std::size_t>(s)]);
        if (it == tags_.end()) continue;
        const std::int64_t n =
            std::min<std::int64_t>(static_cast<std::int64_t>(it->second.size()), lens[static_cast<std::size_t>(s)]);
        if (layer == 0) tokens_checked_ += n;
        for (std::int64_t t = 0; t < n; ++t)
          for (int kv = 0; kv < 2; ++kv) {
            move_row(device, typed, s, t, kv, m.num_kv_heads, m.head_dim, row.data(), true);
            for (int h = 0; h < m.num_kv_heads; ++h)
              for (int d = 0; d < m.head_dim; ++d)
                bad += to_float(row[static_cast<std::size_t>(h) * m.head_dim + d]) !=
                       pattern(it->second[static_cast<std::size_t>(t)], layer, kv, h, d);
          }
      }
    });
  }
  mismatches_ += bad;
  return bad;
}

}  // namespace kvlab
