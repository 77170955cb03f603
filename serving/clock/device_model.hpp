#pragma once
// A device model: the constants of the modelled clock for one device, read from a text file that
// names the source of every constant (a datasheet, a paper, a published profile, a measurement).
//
// Rationale: a clock is only as credible as its constants, and a constant is only as credible as
// its source. Keeping them in one reviewable text file per device (serving/devices/NAME.txt,
// compiled into the binary as the presets) lets a researcher see, cite and replace each one, and
// `kvlab calibrate` writes the same format from measurements of the present machine.
//
// Format (version 1): one `key = value  # source` per line; '#' starts the source comment, which
// is required on every value line; blank lines and comment-only lines are ignored. Tables are keys
// with a numeric suffix: `paged_attention_factor.16`, `map_s.2097152`. Unknown keys, duplicate
// keys, missing keys, non-numeric or out-of-range values are errors naming FILE:LINE and the key.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvlab {

/// A function of one size (a block size in tokens, a page size in bytes) given at a few points:
/// linear interpolation in log2(size) between them, clamped to the end values outside.
struct SizeTable {
  std::map<std::int64_t, double> points;
  [[nodiscard]] double at(std::int64_t size) const;
  [[nodiscard]] bool empty() const noexcept { return points.empty(); }
};

struct DeviceModel {
  std::string name;
  std::string description;  ///< one line: what device, and where the file came from
  std::string origin;       ///< "preset NAME" or the file it was read from

  // Memory and compute (datasheet or measured).
  double memory_bandwidth = 0;  ///< bytes/s of device memory
  double peak_flops = 0;        ///< dense fp16/bf16 FLOP/s

  // Linear layers (GEMMs and the per-layer elementwise work), a roofline with efficiencies and a
  // per-layer floor fitted to measured per-operator profiles: for T tokens in the step,
  // max(weight_bytes / (bw * linear_bandwidth_efficiency), 2 * params * T / (peak * linear_flops_efficiency))
  // + num_layers * linear_layer_overhead_s.
  double linear_bandwidth_efficiency = 1;
  double linear_flops_efficiency = 1;
  double linear_layer_overhead_s = 0;

  // Attention: KV bytes at attention_bandwidth_efficiency of memory bandwidth through the
  // contiguous view (contiguous and vmm backends), times paged_attention_factor(B) through the
  // paged view at block size B; attention FLOPs at attention_flops_efficiency of peak; plus
  // num_layers * attention_layer_overhead_s (a kernel's floor: launch, and a grid too small to
  // fill the GPU at small sizes). attention_layer_overhead_s may be left out of a file (0), so
  // files written before it existed still read.
  double attention_bandwidth_efficiency = 1;
  double attention_flops_efficiency = 1;
  double attention_layer_overhead_s = 0;
  SizeTable paged_attention_factor;  ///< by block size in tokens; 1 means as fast as contiguous

  // CPU work each step (scheduling, input and block-table preparation), not overlapped with the
  // device: step_overhead_s + sequences * sequence_overhead_s + block-table entries * block_table_entry_s.
  double step_overhead_s = 0;
  double sequence_overhead_s = 0;
  double block_table_entry_s = 0;

  // Mapping physical memory (vmm) on the critical path, per page, by page size in bytes.
  SizeTable map_s;
  SizeTable unmap_s;

  // Tensor parallelism (Megatron-LM style, as vLLM runs it): the model is split over
  // `tensor_parallel` of these GPUs, each holding 1/N of the weights and of every block's KV heads,
  // working in parallel; each layer ends its attention and its MLP with an all-reduce of the step's
  // hidden states over the interconnect (ring: 2 (N-1)/N of the bytes at interconnect_bandwidth per
  // direction, plus allreduce_latency_s). The all-reduces are priced inside `linear`. Optional
  // keys: a file without them is one GPU (tensor_parallel 1), and a file that sets
  // tensor_parallel above 1 must give interconnect_bandwidth.
  double tensor_parallel = 1;
  double interconnect_bandwidth = 0;  ///< bytes/s per GPU and direction (NVLink); 0: not given
  double allreduce_latency_s = 0;

  // Copies: between host and device memory (swap, host cache tier) each contiguous transfer costs
  // host_transfer_latency_s plus its bytes at host_bandwidth; device-to-device copies
  // (copy-on-write) cost device_copy_latency_s per launch plus reading and writing their bytes.
  double host_bandwidth = 0;
  double host_transfer_latency_s = 0;
  double device_copy_latency_s = 0;

  /// The source comment of each key as the file gave it ("memory_bandwidth" -> "NVIDIA A100 datasheet").
  std::map<std::string, std::string> sources;
};

/// Parses the text of a device model file; `origin` names it in errors ("FILE:LINE: ...").
/// Throws InvalidArgument on any defect.
[[nodiscard]] DeviceModel parse_device_model(std::string_view text, const std::string& origin);
/// Reads and parses a file. Throws InvalidArgument (unreadable or malformed).
[[nodiscard]] DeviceModel read_device_model(const std::filesystem::path& file);
/// The file text for `m`: every key, with m.sources[key] as its comment (or "unspecified").
[[nodiscard]] std::string format_device_model(const DeviceModel& m);

/// The models shipped with kvlab (serving/devices/*.txt, compiled in): a100-40gb, a100-80gb,
/// h100-sxm, h200, host. Throws InvalidArgument listing them on an unknown name.
[[nodiscard]] DeviceModel device_model_preset(std::string_view name);
[[nodiscard]] std::vector<std::string> device_model_names();
/// A preset name, or a path to a device model file (anything with a '/' or ending in ".txt").
[[nodiscard]] DeviceModel resolve_device_model(std::string_view name_or_file);

/// "memory_bandwidth: NVIDIA A100 datasheet; linear_*: ..." — the sources, grouped, for READMEs.
[[nodiscard]] std::string describe_sources(const DeviceModel& m);

}  // namespace kvlab
