#pragma once
// The modelled clock: a step's time as the sum of per-operation costs, each from the device model
// (serving/clock/device_model.hpp, one text file per device naming every constant's source).
//
// Rationale: backends differ in what a step costs — the paged view's per-block work in the
// attention kernel and its block tables, vmm's mapping on the critical path, swap's many small
// PCIe transfers, copy-on-write copies — so a clock with only a roofline cannot compare them.
// Approach: the replayer counts what a step did (StepWork, filled from the schedule and from the
// backend's StepCosts and ViewShape); step_time prices each operation; the parts are reported so a
// figure can show which one moved. Limitations: operations do not overlap one another (vLLM v0
// runs them one after another); tensor parallelism divides the weights' and the KV's work over the
// device's GPUs and adds two all-reduces per layer (DeviceModel::tensor_parallel), with no overlap
// of communication and compute; pipeline parallelism is not modelled.
#include <cstddef>
#include <cstdint>

#include "alloc/backend/kv_backend.hpp"
#include "alloc/core/kv_view.hpp"
#include "alloc/core/model_geometry.hpp"
#include "serving/clock/device_model.hpp"

namespace kvlab {

/// What one step did, as the clock prices it.
struct StepWork {
  std::int64_t prefill_tokens = 0;       ///< new prompt tokens computed this step (recompute included)
  std::int64_t decode_tokens = 0;        ///< sequences decoding one token
  std::int64_t kv_tokens_read = 0;       ///< cache tokens attended to (summed over the step's sequences)
  std::int64_t attention_pairs = 0;      ///< query-token x key-token products
  std::int64_t sequences = 0;            ///< sequences in the step (CPU work per sequence)
  std::int64_t block_table_entries = 0;  ///< paged: blocks in the step's block tables
  /// The view the attention kernels read (paged at block_tokens, or contiguous) and vmm's page size.
  ViewShape view{};
  /// The backend's operations on the critical path: maps/unmaps, host transfers, device copies
  /// (mapping_s, a measurement, is not priced).
  StepCosts ops{};
};

/// A step's modelled seconds, by operation.
struct StepTime {
  double linear = 0;     ///< weights: GEMMs and per-layer elementwise work
  double attention = 0;  ///< KV reads/writes and attention FLOPs, through the backend's view
  double cpu = 0;        ///< scheduling, input and block-table preparation
  double mapping = 0;    ///< vmm map/unmap on the critical path
  double transfer = 0;   ///< host<->device copies (swap, host tier)
  double copy = 0;       ///< device copies (copy-on-write)
  [[nodiscard]] double total() const noexcept { return linear + attention + cpu + mapping + transfer + copy; }
  StepTime& operator+=(const StepTime& o) noexcept {
    linear += o.linear;
    attention += o.attention;
    cpu += o.cpu;
    mapping += o.mapping;
    transfer += o.transfer;
    copy += o.copy;
    return *this;
  }
};

/// Modelled time of one step of `model` on `device`. A step with no tokens costs only the copies
/// and mappings it did (a swap-in with nothing to run still moves bytes).
[[nodiscard]] StepTime step_time(const ModelGeometry& model, const DeviceModel& device, const StepWork& work);
/// step_time(...).total().
[[nodiscard]] double step_seconds(const ModelGeometry& model, const DeviceModel& device, const StepWork& work);

}  // namespace kvlab
