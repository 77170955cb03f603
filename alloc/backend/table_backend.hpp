#pragma once
// The shared half of every backend: the sequence table, the per-batch arrays and their views. A
// backend derived from TableBackend<State> (State derives from SequenceState) writes only
// placement (admit, grow, fork, release, and which bases or blocks a prepared batch gets) and
// accounting (breakdown); contains/length/num_sequences/cached_tokens/layer_view come from here.
#include "alloc/backend/batch_views.hpp"
#include "alloc/backend/kv_backend.hpp"
#include "alloc/backend/sequence_table.hpp"

namespace kvlab {

template <class State>
class TableBackend : public KvBackend {
 protected:
  TableBackend(const ModelGeometry& model, std::int64_t max_seq_len)
      : KvBackend(model, max_seq_len), batch_views_(this->model()) {}

  [[nodiscard]] const State& at(SeqId id) const { return seqs_.at(id); }
  [[nodiscard]] State& at(SeqId id) { return seqs_.at(id); }

  SequenceTable<State> seqs_;
  BatchViews batch_views_;

 private:
  [[nodiscard]] bool do_contains(SeqId id) const final { return seqs_.contains(id); }
  [[nodiscard]] std::int64_t do_length(SeqId id) const final { return seqs_.at(id).length; }
  [[nodiscard]] std::size_t do_num_sequences() const noexcept final { return seqs_.size(); }
  [[nodiscard]] std::int64_t do_cached_tokens(SeqId id) const final { return seqs_.at(id).cached_tokens; }
  [[nodiscard]] KvView do_layer_view(int layer) const final { return batch_views_.view(layer); }
};

}  // namespace kvlab
