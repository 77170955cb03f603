#include "alloc/backend/kv_backend.hpp"

#include <fmt/format.h>

#include <exception>

#include "alloc/core/error.hpp"

namespace kvlab {

KvBackend::KvBackend(const ModelGeometry& model, std::int64_t max_seq_len) : model_(model), max_seq_len_(max_seq_len) {
  model_.validate();
  if (max_seq_len_ == 0) max_seq_len_ = model_.max_context;
  KVLAB_EXPECTS(max_seq_len_ > 0, "max_seq_len must be positive");
}

// ---- the one set of preconditions ---------------------------------------------------------------

void KvBackend::check_spec(const SequenceSpec& spec, std::int64_t initial_tokens) const {
  KVLAB_EXPECTS(initial_tokens >= 0, "initial tokens must not be negative");
  KVLAB_EXPECTS(spec.prompt_tokens >= 0, "prompt tokens must not be negative");
  KVLAB_EXPECTS(spec.final_tokens >= initial_tokens, "final tokens must be at least the initial tokens");
  KVLAB_EXPECTS(spec.final_tokens <= max_seq_len_,
                fmt::format("sequence of {} tokens exceeds max_seq_len {}", spec.final_tokens, max_seq_len_));
  KVLAB_EXPECTS(
      spec.prompt_token_ids.empty() || static_cast<std::int64_t>(spec.prompt_token_ids.size()) >= spec.prompt_tokens,
      fmt::format("{} prompt token ids for a prompt of {} tokens", spec.prompt_token_ids.size(), spec.prompt_tokens));
}

void KvBackend::require_known(SeqId id) const {
  KVLAB_EXPECTS(do_contains(id), fmt::format("unknown sequence {}", id));
}

void KvBackend::require_resident(SeqId id) const {
  require_known(id);
  KVLAB_EXPECTS(!do_is_swapped(id), fmt::format("sequence {} is swapped out", id));
}

void KvBackend::require_absent(SeqId id) const {
  KVLAB_EXPECTS(!do_contains(id), fmt::format("sequence {} already exists", id));
}

void KvBackend::require_swap() const {
  KVLAB_EXPECTS(do_supports_swap(), fmt::format("backend {} cannot swap", do_name()));
}

// ---- sequences -----------------------------------------------------------------------------------

bool KvBackend::can_admit(const SequenceSpec& spec, std::int64_t initial_tokens) const {
  check_spec(spec, initial_tokens);
  return do_can_admit(spec, initial_tokens);
}

void KvBackend::admit(SeqId id, const SequenceSpec& spec, std::int64_t initial_tokens) {
  check_spec(spec, initial_tokens);
  require_absent(id);
  prepared_ = false;
  do_admit(id, spec, initial_tokens);
}

bool KvBackend::can_grow(SeqId id, std::int64_t n) const {
  KVLAB_EXPECTS(n >= 0, "growth must not be negative");
  require_resident(id);
  return do_can_grow(id, n);
}

void KvBackend::grow(SeqId id, std::int64_t n) {
  KVLAB_EXPECTS(n >= 0, "growth must not be negative");
  require_resident(id);
  prepared_ = false;
  do_grow(id, n);
}

bool KvBackend::try_grow(SeqId id, std::int64_t n) {
  KVLAB_EXPECTS(n >= 0, "growth must not be negative");
  require_resident(id);
  // As grow: a throw leaves the batch unprepared (conservative). A refusal changed nothing, so a
  // batch prepared before it stays viewable, as after can_grow.
  const bool was_prepared = prepared_;
  prepared_ = false;
  if (do_try_grow(id, n)) return true;
  prepared_ = was_prepared;
  return false;
}

bool KvBackend::do_try_grow(SeqId id, std::int64_t n) {
  if (!do_can_grow(id, n)) return false;
  do_grow(id, n);
  return true;
}

void KvBackend::fork(SeqId parent, SeqId child) {
  require_resident(parent);
  require_absent(child);
  prepared_ = false;
  do_fork(parent, child);
}

void KvBackend::release(SeqId id) {
  require_known(id);
  prepared_ = false;
  do_release(id);
}

void KvBackend::swap_out(SeqId id) {
  require_swap();
  require_known(id);
  KVLAB_EXPECTS(!do_is_swapped(id), fmt::format("sequence {} is already swapped out", id));
  prepared_ = false;
  do_swap_out(id);
}

bool KvBackend::can_swap_in(SeqId id) const {
  require_swap();
  require_known(id);
  KVLAB_EXPECTS(do_is_swapped(id), fmt::format("sequence {} is not swapped out", id));
  return do_can_swap_in(id);
}

void KvBackend::swap_in(SeqId id) {
  require_swap();
  require_known(id);
  KVLAB_EXPECTS(do_is_swapped(id), fmt::format("sequence {} is not swapped out", id));
  prepared_ = false;
  do_swap_in(id);
}

bool KvBackend::is_swapped(SeqId id) const {
  require_known(id);
  return do_is_swapped(id);
}

std::int64_t KvBackend::length(SeqId id) const {
  require_known(id);
  return do_length(id);
}

// ---- prefix caching ------------------------------------------------------------------------------

std::int64_t KvBackend::cached_prefix_tokens(const SequenceSpec& spec) const {
  check_spec(spec, spec.prompt_tokens);
  return do_cached_prefix_tokens(spec);
}

std::int64_t KvBackend::cached_tokens(SeqId id) const {
  require_known(id);
  return do_cached_tokens(id);
}

// ---- accounting ----------------------------------------------------------------------------------

MemoryBreakdown KvBackend::breakdown(const SequenceSpec* blocked) const {
  if (blocked != nullptr) check_spec(*blocked, 0);  // the waiting admission: a spec like any other
  return do_breakdown(blocked);
}

// ---- kernels -------------------------------------------------------------------------------------

PreparedBatch KvBackend::prepare_batch(std::span<const SeqId> seqs) {
  for (const SeqId id : seqs) require_resident(id);
  prepared_ = false;  // a failed preparation leaves no batch to view
  const PreparedBatch batch = do_prepare_batch(seqs);
  prepared_ = true;
  return batch;
}

KvView KvBackend::layer_view(int layer) const {
  KVLAB_EXPECTS(do_has_storage(), "accounting-only backend has no KV to view");
  KVLAB_EXPECTS(layer >= 0 && layer < model_.num_layers, "layer out of range");
  KVLAB_EXPECTS(prepared_,
                "no prepared batch to view (prepare_batch after the last admit, grow, fork, release or swap)");
  return do_layer_view(layer);
}

// ---- step hooks ----------------------------------------------------------------------------------

void KvBackend::begin_step() {
  // The step's costs count from here, so what begin_step itself waits for (vmm: background mapping
  // that did not finish in time) is the step's: it lies on the critical path.
  costs_at_step_begin_ = do_total_costs();
  do_begin_step();
}

void KvBackend::prefetch(std::span<const SeqId> next_ids, std::int64_t growth) {
  KVLAB_EXPECTS(growth >= 0, "prefetch: growth must not be negative");
  for (const SeqId id : next_ids) require_resident(id);
  do_prefetch(next_ids, growth);
}

StepCosts KvBackend::step_costs() const {
  StepCosts c = do_total_costs();
  c -= costs_at_step_begin_;
  return c;
}

}  // namespace kvlab
