#include "serving/clock/cost_model.hpp"

#include <algorithm>

namespace kvlab {

StepTime step_time(const ModelGeometry& model, const DeviceModel& d, const StepWork& w) {
  StepTime t;
  // Tensor parallelism: each of the N GPUs does 1/N of the weights' and the KV's work at once.
  const double gpus = std::max(d.tensor_parallel, 1.0);
  const double tokens = static_cast<double>(w.prefill_tokens + w.decode_tokens);
  if (tokens > 0) {
    const double weights = static_cast<double>(model.weight_bytes()) / gpus;
    const double linear_flops = 2.0 * static_cast<double>(model.num_parameters) * tokens / gpus;
    t.linear = std::max(weights / (d.memory_bandwidth * d.linear_bandwidth_efficiency),
                        linear_flops / (d.peak_flops * d.linear_flops_efficiency)) +
               model.num_layers * d.linear_layer_overhead_s;
    if (gpus > 1) {  // two ring all-reduces of the step's hidden states per layer
      const double hidden_bytes =
          tokens * model.num_q_heads * model.head_dim * static_cast<double>(size_of(model.kv_dtype));
      t.linear += 2.0 * model.num_layers *
                  (d.allreduce_latency_s + 2.0 * (gpus - 1) / gpus * hidden_bytes / d.interconnect_bandwidth);
    }

    const double kv_bytes =
        (static_cast<double>(w.kv_tokens_read) + tokens) * static_cast<double>(model.kv_bytes_per_token()) / gpus;
    const double view = w.view.layout == KvLayout::paged && w.view.block_tokens > 0
                            ? d.paged_attention_factor.at(w.view.block_tokens)
                            : 1.0;
    const double attention_flops =
        4.0 * model.num_layers * model.num_q_heads * model.head_dim * static_cast<double>(w.attention_pairs) / gpus;
    t.attention = std::max(kv_bytes * view / (d.memory_bandwidth * d.attention_bandwidth_efficiency),
                           attention_flops / (d.peak_flops * d.attention_flops_efficiency)) +
                  model.num_layers * d.attention_layer_overhead_s;

    t.cpu = d.step_overhead_s + static_cast<double>(w.sequences) * d.sequence_overhead_s +
            static_cast<double>(w.block_table_entries) * d.block_table_entry_s;
  }
  const StepCosts& op = w.ops;
  if (op.maps > 0 || op.unmaps > 0) {
    const auto page = static_cast<std::int64_t>(std::max<std::size_t>(w.view.page_bytes, 1));
    t.mapping = static_cast<double>(op.maps) * d.map_s.at(page) + static_cast<double>(op.unmaps) * d.unmap_s.at(page);
  }
  // Each GPU moves its own heads' share, over its own PCIe link, at once.
  t.transfer = static_cast<double>(op.host_transfers) * d.host_transfer_latency_s +
               op.host_transfer_bytes / gpus / d.host_bandwidth;
  t.copy = static_cast<double>(op.device_copies) * d.device_copy_latency_s +
           2.0 * op.device_copy_bytes / gpus / d.memory_bandwidth;
  return t;
}

double step_seconds(const ModelGeometry& model, const DeviceModel& device, const StepWork& work) {
  return step_time(model, device, work).total();
}

}  // namespace kvlab
