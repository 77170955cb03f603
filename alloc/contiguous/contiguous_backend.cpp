#include "alloc/contiguous/contiguous_backend.hpp"

#include <algorithm>
#include <bit>
#include <string>

#include "alloc/contiguous/buddy_arena.hpp"
#include "alloc/transfer/copy.hpp"
#include "alloc/contiguous/first_fit_arena.hpp"
#include "alloc/core/error.hpp"

namespace kvlab {

std::string_view to_string(ReservationPolicy p) noexcept {
  switch (p) {
    case ReservationPolicy::max:
      return "max";
    case ReservationPolicy::pow2:
      return "pow2";
    case ReservationPolicy::oracle:
      return "oracle";
  }
  return "?";
}

ReservationPolicy parse_reservation_policy(std::string_view name) {
  if (name == "max") return ReservationPolicy::max;
  if (name == "pow2") return ReservationPolicy::pow2;
  if (name == "oracle") return ReservationPolicy::oracle;
  KVLAB_THROW(InvalidArgument, "unknown reservation policy '" + std::string(name) + "' (expected max, pow2 or oracle)");
}

namespace {
std::unique_ptr<ReservationArena> make_arena(const ContiguousConfig& c) {
  if (c.arena == ArenaKind::first_fit) return std::make_unique<FirstFitArena>(c.capacity_bytes, kDefaultAlignment);
  // One buddy unit per token, so a reservation of 2^k tokens is exactly one order-k block.
  return std::make_unique<BuddyArena>(c.capacity_bytes, c.model.kv_bytes_per_token());
}
}  // namespace

ContiguousBackend::ContiguousBackend(ContiguousConfig config)
    : TableBackend(config.model, config.max_seq_len), config_(std::move(config)), arena_(make_arena(config_)) {
  config_.max_seq_len = max_seq_len();
  KVLAB_EXPECTS(arena_->capacity() >= reservation_bytes(1), "KV capacity " + std::to_string(config_.capacity_bytes) +
                                                                " bytes is below one token (" +
                                                                std::to_string(reservation_bytes(1)) + " bytes)");
  if (config_.memory != nullptr) {
    region_ = static_cast<std::byte*>(config_.memory->allocate(arena_->capacity()));
  }
}

ContiguousBackend::~ContiguousBackend() {
  try {
    if (config_.memory != nullptr) config_.memory->deallocate(region_, arena_->capacity());
  } catch (...) {  // a device error at teardown cannot be reported; the resource's statistics show it
  }
}

std::string ContiguousBackend::do_name() const {
  return "contiguous-" + std::string(to_string(config_.policy)) + (config_.arena == ArenaKind::buddy ? "-buddy" : "");
}

Device ContiguousBackend::do_device() const noexcept {
  return config_.memory ? config_.memory->device() : Device::host;
}

std::int64_t ContiguousBackend::reservation_tokens(const SequenceSpec& spec) const {
  const std::int64_t final_tokens = std::max<std::int64_t>(spec.final_tokens, 1);
  switch (config_.policy) {
    case ReservationPolicy::max:
      return config_.max_seq_len;
    case ReservationPolicy::pow2: {
      // The prompt is known at admission; only the output is over-reserved, to a power of two.
      const std::int64_t prompt = std::clamp<std::int64_t>(spec.prompt_tokens, 0, final_tokens);
      const auto output = static_cast<std::uint64_t>(final_tokens - prompt);
      const std::int64_t reserved = prompt + (output == 0 ? 0 : static_cast<std::int64_t>(std::bit_ceil(output)));
      return std::min<std::int64_t>(reserved, config_.max_seq_len);
    }
    case ReservationPolicy::oracle:
      return final_tokens;
  }
  return config_.max_seq_len;
}

bool ContiguousBackend::do_can_admit(const SequenceSpec& spec, std::int64_t) const {
  return arena_->can_allocate(reservation_bytes(reservation_tokens(spec)));
}

void ContiguousBackend::do_admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens) {
  const std::int64_t tokens = reservation_tokens(spec);
  const auto offset = arena_->allocate(reservation_bytes(tokens));
  if (!offset) {
    KVLAB_THROW(OutOfMemory, "no hole of " + std::to_string(reservation_bytes(tokens)) +
                                 " bytes for a reservation of " + std::to_string(tokens) + " tokens (" +
                                 std::to_string(arena_->free_bytes()) + " bytes free, largest hole " +
                                 std::to_string(arena_->largest_hole()) + ")");
  }
  ContiguousSequence s;
  s.length = initial_tokens;
  s.final_tokens = spec.final_tokens;
  s.offset = *offset;
  s.capacity_tokens = tokens;
  seqs_.insert(id, s);
}

bool ContiguousBackend::do_can_grow(SeqId id, std::int64_t n) const {
  const ContiguousSequence& s = at(id);
  return s.length + n <= s.capacity_tokens;
}

void ContiguousBackend::do_grow(SeqId id, std::int64_t n) {
  ContiguousSequence& s = at(id);
  if (s.length + n > s.capacity_tokens) {
    // A contiguous reservation cannot be extended in place; that is the point of the design.
    KVLAB_THROW(OutOfMemory, "sequence " + std::to_string(id) + " would grow to " + std::to_string(s.length + n) +
                                 " tokens past its reservation of " + std::to_string(s.capacity_tokens));
  }
  s.length += n;
}

// A reservation is [layer][token][K|V][head][dim]: a layer's K and V rows of one token side by
// side, so V sits one row after K in every sequence and the whole batch has one K base and one V
// base (what FlashInfer's kernels address; BatchViews finds them). Tokens are 2 rows apart.
std::byte* ContiguousBackend::layer_base(const ContiguousSequence& s, int layer, int kv) const noexcept {
  const std::size_t token = model().kv_bytes_per_token_per_layer();
  return region_ + s.offset + static_cast<std::size_t>(layer) * s.capacity_tokens * token + kv * (token / 2);
}

void ContiguousBackend::do_fork(SeqId parent, SeqId child) {
  const ContiguousSequence p = at(parent);
  const auto offset = arena_->allocate(reservation_bytes(p.capacity_tokens));
  if (!offset) {
    KVLAB_THROW(OutOfMemory, "no hole of " + std::to_string(reservation_bytes(p.capacity_tokens)) +
                                 " bytes to fork sequence " + std::to_string(parent));
  }
  ContiguousSequence c = p;
  c.offset = *offset;
  c.cached_tokens = 0;
  if (region_ != nullptr) {
    // Contiguous reservations cannot share: the child gets its own copy of every written token.
    const std::size_t bytes = static_cast<std::size_t>(p.length) * model().kv_bytes_per_token_per_layer();
    try {  // a layer's K and V rows of the written tokens are one stretch
      for (int layer = 0; layer < model().num_layers; ++layer)
        copy_bytes(device(), layer_base(c, layer, 0), layer_base(p, layer, 0), bytes);
    } catch (...) {  // a failed copy leaves no child behind
      arena_->deallocate(*offset);
      throw;
    }
  }
  seqs_.insert(child, c);
}

void ContiguousBackend::do_release(SeqId id) {
  arena_->deallocate(at(id).offset);
  seqs_.erase(id);
}

PreparedBatch ContiguousBackend::do_prepare_batch(std::span<const SeqId> seqs) {
  const int batch = static_cast<int>(seqs.size());
  batch_views_.begin_contiguous(batch, 2 * std::int64_t{model().num_kv_heads} * model().head_dim);
  for (int b = 0; b < batch; ++b) {
    const ContiguousSequence& s = at(seqs[b]);
    batch_views_.set_length(b, s.length);
    if (region_ == nullptr) continue;
    for (int layer = 0; layer < model().num_layers; ++layer)
      batch_views_.set_bases(b, layer, layer_base(s, layer, 0), layer_base(s, layer, 1));
  }
  return batch_views_.finish(device(), config_.memory);
}

MemoryBreakdown ContiguousBackend::do_breakdown(const SequenceSpec* blocked) const {
  MemoryBreakdown b;
  b.capacity = arena_->capacity();
  for (const auto& [id, s] : seqs_) {
    const std::int64_t eventually = std::clamp(std::max(s.final_tokens, s.length), s.length, s.capacity_tokens);
    b.token_states += reservation_bytes(s.length);
    b.reserved += reservation_bytes(eventually - s.length);
    // Over-reservation by the policy is internal fragmentation; what the arena adds to the
    // reservation (a buddy's power-of-two rounding, an alignment) is the allocator's, external.
    b.internal_fragmentation += reservation_bytes(s.capacity_tokens) - reservation_bytes(eventually);
    b.external_fragmentation += arena_->block_size(s.offset) - reservation_bytes(s.capacity_tokens);
  }
  if (blocked != nullptr)
    b.external_fragmentation +=
        arena_->free_bytes_in_holes_smaller_than(reservation_bytes(reservation_tokens(*blocked)));
  return b;
}

}  // namespace kvlab
