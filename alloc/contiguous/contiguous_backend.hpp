#pragma once
// The Orca-style contiguous backend: each sequence gets one contiguous reservation, sized up
// front by a policy, placed by an arena in one fixed KV region.
//   max     max_seq_len tokens for everyone (what a static-batching server must do)
//   pow2    the prompt plus the next power of two of the output length (the output over-reserved
//           by less than 2x: an output of 25 tokens reserves 32)
//   oracle  exactly the final length (the best any reservation scheme can do)
// These are the three Orca variants of the vLLM paper (sec. 6.1, Figures 2 and 13).
// The arena is address-ordered first fit (`contiguous-POLICY`) or, as the vLLM paper implemented
// its Orca baselines, a binary buddy allocator (`contiguous-POLICY-buddy`), which rounds every
// reservation up to a power of two of tokens; that rounding is counted as external fragmentation.
//
// A reservation of R tokens is laid out [layer][K|V][R][kv_heads][head_dim], so one layer's K of
// one sequence is contiguous and the kernels see it through ContiguousKv.
#include <string_view>

#include <memory>

#include "alloc/contiguous/reservation_arena.hpp"
#include "alloc/memory/memory_resource.hpp"
#include "alloc/backend/table_backend.hpp"

namespace kvlab {

enum class ReservationPolicy { max, pow2, oracle };
[[nodiscard]] std::string_view to_string(ReservationPolicy p) noexcept;
/// Parses max, pow2 or oracle; throws InvalidArgument naming the bad value otherwise.
[[nodiscard]] ReservationPolicy parse_reservation_policy(std::string_view name);

/// How reservations are placed in the KV region (alloc/contiguous/reservation_arena.hpp).
enum class ArenaKind { first_fit, buddy };

/// A sequence's reservation: `capacity_tokens` tokens at `offset` in the KV region.
struct ContiguousSequence : SequenceState {
  std::size_t offset = 0;
  std::int64_t capacity_tokens = 0;
};

struct ContiguousConfig {
  ModelGeometry model;
  std::size_t capacity_bytes = 0;  ///< KV region size
  std::int64_t max_seq_len = 0;    ///< 0: the model's max context
  ReservationPolicy policy = ReservationPolicy::max;
  ArenaKind arena = ArenaKind::first_fit;
  /// Where the KV region comes from. nullptr: accounting only (no K/V bytes exist).
  MemoryResource* memory = nullptr;
};

class ContiguousBackend final : public TableBackend<ContiguousSequence> {
 public:
  explicit ContiguousBackend(ContiguousConfig config);
  ~ContiguousBackend() override;

  /// Tokens the policy reserves for a sequence with this spec.
  [[nodiscard]] std::int64_t reservation_tokens(const SequenceSpec& spec) const;
  [[nodiscard]] const ReservationArena& arena() const noexcept { return *arena_; }

 private:
  [[nodiscard]] std::string do_name() const override;
  [[nodiscard]] Device do_device() const noexcept override;
  [[nodiscard]] bool do_has_storage() const noexcept override { return region_ != nullptr; }
  [[nodiscard]] bool do_can_admit(const SequenceSpec& spec, std::int64_t initial_tokens) const override;
  void do_admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens) override;
  [[nodiscard]] bool do_can_grow(SeqId id, std::int64_t n) const override;
  void do_grow(SeqId id, std::int64_t n) override;
  void do_fork(SeqId parent, SeqId child) override;
  void do_release(SeqId id) override;
  PreparedBatch do_prepare_batch(std::span<const SeqId> seqs) override;
  [[nodiscard]] MemoryBreakdown do_breakdown(const SequenceSpec* blocked) const override;

  [[nodiscard]] std::size_t reservation_bytes(std::int64_t tokens) const noexcept {
    return static_cast<std::size_t>(tokens) * model().kv_bytes_per_token();
  }
  [[nodiscard]] std::byte* layer_base(const ContiguousSequence& s, int layer, int kv) const noexcept;

  ContiguousConfig config_;
  std::unique_ptr<ReservationArena> arena_;
  std::byte* region_ = nullptr;
};

}  // namespace kvlab
