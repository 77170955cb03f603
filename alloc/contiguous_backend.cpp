#include "alloc/contiguous_backend.hpp"

#include <algorithm>
#include <bit>
#include <string>

#include "alloc/copy.hpp"
#include "alloc/error.hpp"

namespace kvlab {

std::string_view to_string(ReservationPolicy p) noexcept {
  switch (p) {
    case ReservationPolicy::max: return "max";
    case ReservationPolicy::pow2: return "pow2";
    case ReservationPolicy::oracle: return "oracle";
  }
  return "?";
}

ReservationPolicy parse_reservation_policy(std::string_view name) {
  if (name == "max") return ReservationPolicy::max;
  if (name == "pow2") return ReservationPolicy::pow2;
  if (name == "oracle") return ReservationPolicy::oracle;
  KVLAB_THROW(InvalidArgument,
              "unknown reservation policy '" + std::string(name) + "' (expected max, pow2 or oracle)");
}

ContiguousBackend::ContiguousBackend(ContiguousConfig config)
    : config_(std::move(config)), arena_(config_.capacity_bytes, kDefaultAlignment) {
  config_.model.validate();
  if (config_.max_seq_len == 0) config_.max_seq_len = config_.model.max_context;
  KVLAB_EXPECTS(config_.max_seq_len > 0, "max_seq_len must be positive");
  KVLAB_EXPECTS(arena_.capacity() >= reservation_bytes(1),
                "KV capacity " + std::to_string(config_.capacity_bytes) + " bytes is below one token (" +
                    std::to_string(reservation_bytes(1)) + " bytes)");
  if (config_.memory != nullptr) {
    region_ = static_cast<std::byte*>(config_.memory->allocate(arena_.capacity()));
  }
}

ContiguousBackend::~ContiguousBackend() {
  if (config_.memory != nullptr) {
    config_.memory->deallocate(region_, arena_.capacity());
  }
}

std::string ContiguousBackend::name() const { return "contiguous-" + std::string(to_string(config_.policy)); }

Device ContiguousBackend::device() const noexcept {
  return config_.memory ? config_.memory->device() : Device::host;
}

std::int64_t ContiguousBackend::reservation_tokens(const SequenceSpec& spec) const {
  const std::int64_t final_tokens = std::max<std::int64_t>(spec.final_tokens, 1);
  switch (config_.policy) {
    case ReservationPolicy::max: return config_.max_seq_len;
    case ReservationPolicy::pow2:
      return std::min<std::int64_t>(static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(final_tokens))),
                                    config_.max_seq_len);
    case ReservationPolicy::oracle: return final_tokens;
  }
  return config_.max_seq_len;
}

void ContiguousBackend::check_spec(const SequenceSpec& spec, std::int64_t initial_tokens) const {
  KVLAB_EXPECTS(initial_tokens >= 0, "initial tokens must not be negative");
  KVLAB_EXPECTS(spec.final_tokens >= initial_tokens, "final tokens must be at least the initial tokens");
  KVLAB_EXPECTS(spec.final_tokens <= config_.max_seq_len,
                "sequence of " + std::to_string(spec.final_tokens) + " tokens exceeds max_seq_len " +
                    std::to_string(config_.max_seq_len));
}

const ContiguousBackend::Sequence& ContiguousBackend::at(SeqId id) const {
  const auto it = seqs_.find(id);
  KVLAB_EXPECTS(it != seqs_.end(), "unknown sequence " + std::to_string(id));
  return it->second;
}

bool ContiguousBackend::can_admit(const SequenceSpec& spec, std::int64_t initial_tokens) const {
  check_spec(spec, initial_tokens);
  return arena_.can_allocate(reservation_bytes(reservation_tokens(spec)));
}

void ContiguousBackend::admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens) {
  check_spec(spec, initial_tokens);
  KVLAB_EXPECTS(!contains(id), "sequence " + std::to_string(id) + " already exists");
  const std::int64_t tokens = reservation_tokens(spec);
  const auto offset = arena_.allocate(reservation_bytes(tokens));
  if (!offset) {
    KVLAB_THROW(OutOfMemory, "no hole of " + std::to_string(reservation_bytes(tokens)) +
                                 " bytes for a reservation of " + std::to_string(tokens) + " tokens (" +
                                 std::to_string(arena_.free_bytes()) + " bytes free, largest hole " +
                                 std::to_string(arena_.largest_hole()) + ")");
  }
  seqs_.emplace(id, Sequence{*offset, tokens, initial_tokens, spec.final_tokens});
}

bool ContiguousBackend::can_grow(SeqId id, std::int64_t n) const {
  KVLAB_EXPECTS(n >= 0, "growth must not be negative");
  const Sequence& s = at(id);
  return s.length + n <= s.capacity_tokens;
}

void ContiguousBackend::grow(SeqId id, std::int64_t n) {
  if (!can_grow(id, n)) {
    // A contiguous reservation cannot be extended in place; that is the point of the design.
    const Sequence& s = at(id);
    KVLAB_THROW(OutOfMemory, "sequence " + std::to_string(id) + " would grow to " +
                                 std::to_string(s.length + n) + " tokens past its reservation of " +
                                 std::to_string(s.capacity_tokens));
  }
  seqs_.at(id).length += n;
}

std::byte* ContiguousBackend::layer_base(const Sequence& s, int layer, int kv) const noexcept {
  const std::size_t plane = static_cast<std::size_t>(s.capacity_tokens) * config_.model.kv_bytes_per_token_per_layer() / 2;
  return region_ + s.offset + (2 * static_cast<std::size_t>(layer) + kv) * plane;
}

void ContiguousBackend::fork(SeqId parent, SeqId child) {
  KVLAB_EXPECTS(!contains(child), "sequence " + std::to_string(child) + " already exists");
  const Sequence p = at(parent);
  const auto offset = arena_.allocate(reservation_bytes(p.capacity_tokens));
  if (!offset) {
    KVLAB_THROW(OutOfMemory, "no hole of " + std::to_string(reservation_bytes(p.capacity_tokens)) +
                                 " bytes to fork sequence " + std::to_string(parent));
  }
  const Sequence c{*offset, p.capacity_tokens, p.length, p.final_tokens};
  if (region_ != nullptr) {
    // Contiguous reservations cannot share: the child gets its own copy of every written token.
    const std::size_t bytes = static_cast<std::size_t>(p.length) * config_.model.kv_bytes_per_token_per_layer() / 2;
    try {
      for (int layer = 0; layer < config_.model.num_layers; ++layer)
        for (int kv = 0; kv < 2; ++kv) copy_bytes(device(), layer_base(c, layer, kv), layer_base(p, layer, kv), bytes);
    } catch (...) {  // a failed copy leaves no child behind
      arena_.deallocate(*offset);
      throw;
    }
  }
  seqs_.emplace(child, c);
}

void ContiguousBackend::release(SeqId id) {
  const Sequence s = at(id);
  arena_.deallocate(s.offset);
  seqs_.erase(id);
}

std::int64_t ContiguousBackend::length(SeqId id) const { return at(id).length; }

PreparedBatch ContiguousBackend::prepare_batch(std::span<const SeqId> seqs) {
  batch_ = static_cast<int>(seqs.size());
  const int layers = config_.model.num_layers;
  bases_.assign(static_cast<std::size_t>(layers) * 2 * batch_, nullptr);
  lens_.resize(static_cast<std::size_t>(batch_));
  for (int b = 0; b < batch_; ++b) {
    const Sequence& s = at(seqs[b]);
    lens_[b] = static_cast<std::int32_t>(s.length);
    if (region_ == nullptr) continue;
    for (int layer = 0; layer < layers; ++layer)
      for (int kv = 0; kv < 2; ++kv) bases_[(2 * layer + kv) * batch_ + b] = layer_base(s, layer, kv);
  }
  if (device() == Device::host) return {batch_, lens_.data()};
  // Device backends read the arrays from device memory: one upload per prepared batch.
  std::byte* dst = staging_.upload(*config_.memory, std::as_bytes(std::span(bases_)), std::as_bytes(std::span(lens_)));
  return {batch_, reinterpret_cast<const std::int32_t*>(dst + bases_.size() * sizeof(void*))};
}

KvView ContiguousBackend::layer_view(int layer) const {
  KVLAB_EXPECTS(has_storage(), "accounting-only backend has no KV to view");
  KVLAB_EXPECTS(layer >= 0 && layer < config_.model.num_layers, "layer out of range");
  void* const* bases = device() == Device::host ? bases_.data() : static_cast<void* const*>(staging_.data());
  KvView v;
  v.layout = KvLayout::contiguous;
  v.dtype = config_.model.kv_dtype;
  v.num_kv_heads = config_.model.num_kv_heads;
  v.head_dim = config_.model.head_dim;
  v.token_stride = static_cast<std::int64_t>(config_.model.num_kv_heads) * config_.model.head_dim;
  v.head_stride = config_.model.head_dim;
  v.k_seq = bases + (2 * layer) * batch_;
  v.v_seq = bases + (2 * layer + 1) * batch_;
  return v;
}

MemoryBreakdown ContiguousBackend::breakdown(const SequenceSpec* blocked) const {
  MemoryBreakdown b;
  b.capacity = arena_.capacity();
  for (const auto& [id, s] : seqs_) {
    const std::int64_t eventually = std::clamp(std::max(s.final_tokens, s.length), s.length, s.capacity_tokens);
    b.token_states += reservation_bytes(s.length);
    b.reserved += reservation_bytes(eventually - s.length);
    b.internal_fragmentation += arena_.block_size(s.offset) - reservation_bytes(eventually);
  }
  if (blocked != nullptr)
    b.external_fragmentation = arena_.free_bytes_in_holes_smaller_than(reservation_bytes(reservation_tokens(*blocked)));
  return b;
}

}  // namespace kvlab
