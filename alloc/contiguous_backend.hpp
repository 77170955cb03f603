#pragma once
// The Orca-style contiguous backend: each sequence gets one contiguous reservation, sized up
// front by a policy, placed by a first-fit arena in one fixed KV region.
//   max     max_seq_len tokens for everyone (what a static-batching server must do)
//   pow2    the next power of two of the sequence's final length (an optimistic bucketing scheme)
//   oracle  exactly the final length (the best any reservation scheme can do)
// These are the three Orca variants of the vLLM paper's Figure 2.
//
// A reservation of R tokens is laid out [layer][K|V][R][kv_heads][head_dim], so one layer's K of
// one sequence is contiguous and the kernels see it through ContiguousKv.
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "alloc/device_staging.hpp"
#include "alloc/first_fit_arena.hpp"
#include "alloc/kv_backend.hpp"
#include "alloc/memory_resource.hpp"

namespace kvlab {

enum class ReservationPolicy { max, pow2, oracle };
[[nodiscard]] std::string_view to_string(ReservationPolicy p) noexcept;
/// Parses max, pow2 or oracle; throws InvalidArgument naming the bad value otherwise.
[[nodiscard]] ReservationPolicy parse_reservation_policy(std::string_view name);

struct ContiguousConfig {
  ModelGeometry model;
  std::size_t capacity_bytes = 0;  ///< KV region size
  std::int64_t max_seq_len = 0;    ///< 0: the model's max context
  ReservationPolicy policy = ReservationPolicy::max;
  /// Where the KV region comes from. nullptr: accounting only (no K/V bytes exist).
  MemoryResource* memory = nullptr;
};

class ContiguousBackend final : public KvBackend {
 public:
  explicit ContiguousBackend(ContiguousConfig config);
  ~ContiguousBackend() override;

  [[nodiscard]] std::string name() const override;
  [[nodiscard]] const ModelGeometry& model() const noexcept override { return config_.model; }
  [[nodiscard]] Device device() const noexcept override;
  [[nodiscard]] bool has_storage() const noexcept override { return region_ != nullptr; }
  [[nodiscard]] std::int64_t max_seq_len() const noexcept override { return config_.max_seq_len; }

  [[nodiscard]] bool can_admit(const SequenceSpec& spec, std::int64_t initial_tokens) const override;
  void admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens) override;
  [[nodiscard]] bool can_grow(SeqId id, std::int64_t n) const override;
  void grow(SeqId id, std::int64_t n) override;
  void fork(SeqId parent, SeqId child) override;
  void release(SeqId id) override;

  [[nodiscard]] bool contains(SeqId id) const override { return seqs_.count(id) != 0; }
  [[nodiscard]] std::int64_t length(SeqId id) const override;
  [[nodiscard]] std::size_t num_sequences() const noexcept override { return seqs_.size(); }

  PreparedBatch prepare_batch(std::span<const SeqId> seqs) override;
  [[nodiscard]] KvView layer_view(int layer) const override;
  [[nodiscard]] MemoryBreakdown breakdown(const SequenceSpec* blocked = nullptr) const override;

  /// Tokens the policy reserves for a sequence with this spec.
  [[nodiscard]] std::int64_t reservation_tokens(const SequenceSpec& spec) const;
  [[nodiscard]] const FirstFitArena& arena() const noexcept { return arena_; }

 private:
  struct Sequence {
    std::size_t offset;
    std::int64_t capacity_tokens;  // R
    std::int64_t length;
    std::int64_t final_tokens;
  };
  const Sequence& at(SeqId id) const;
  void check_spec(const SequenceSpec& spec, std::int64_t initial_tokens) const;
  [[nodiscard]] std::size_t reservation_bytes(std::int64_t tokens) const noexcept {
    return static_cast<std::size_t>(tokens) * config_.model.kv_bytes_per_token();
  }
  [[nodiscard]] std::byte* layer_base(const Sequence& s, int layer, int kv) const noexcept;

  ContiguousConfig config_;
  FirstFitArena arena_;
  std::byte* region_ = nullptr;
  std::unordered_map<SeqId, Sequence> seqs_;

  // Prepared batch: per (layer, K|V) a row of `batch_` base pointers, and the lengths.
  int batch_ = 0;
  std::vector<void*> bases_;
  std::vector<std::int32_t> lens_;
  DeviceStaging staging_;  // device copies of bases_ and lens_ (cuda only)
};

}  // namespace kvlab
