#include "serving/report/summary_json.hpp"

#include "serving/support/input_file.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "alloc/core/error.hpp"
#include "serving/support/atomic_file.hpp"

namespace kvlab {

namespace {

using Json = nlohmann::ordered_json;

/// `v` rounded to 9 significant digits. A whole result is stored as an integer so that it prints
/// as "2", not "2.0", as it always has.
Json number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  const double rounded = std::strtod(buf, nullptr);
  if (std::isfinite(rounded) && rounded == std::trunc(rounded) && std::fabs(rounded) < 0x1p53 && !std::signbit(rounded))
    return static_cast<std::int64_t>(rounded);
  return rounded;
}

Json fractions(const MemoryFractions& f) {
  return Json{{"token_states_frac", number(f.token_states)},
              {"reserved_frac", number(f.reserved)},
              {"internal_fragmentation_frac", number(f.internal_fragmentation)},
              {"external_fragmentation_frac", number(f.external_fragmentation)},
              {"free_frac", number(f.free)}};
}

/// `name`_samples, _mean_ms, _median_ms, _std_ms and one _pN_ms per percentile asked for
/// (--percentiles): compare.csv's names.
void add_latency(Json& j, const std::string& name, const LatencyStats& l) {
  j[name + "_samples"] = l.count;
  j[name + "_mean_ms"] = number(l.mean_ms), j[name + "_median_ms"] = number(l.median_ms);
  j[name + "_std_ms"] = number(l.std_ms);
  for (const auto& [p, ms] : l.percentiles_ms) j[name + "_" + percentile_name(p) + "_ms"] = number(ms);
}

/// vLLM bench serve's metrics (serving/replay/serving_metrics.hpp): latencies in ms, throughput per
/// second of makespan (request and output-token throughput are the top level's throughput_*),
/// goodput null without --goodput. Names as compare.csv's columns.
Json serving(const ReplaySummary& s) {
  const double span = s.makespan_s;
  const auto or_null = [](double x) { return x < 0 ? Json(nullptr) : number(x); };
  Json j = Json::object();
  add_latency(j, "ttft", s.ttft);
  add_latency(j, "tpot", s.tpot);
  add_latency(j, "itl", s.itl);
  add_latency(j, "e2el", s.e2el);
  j["throughput_total_tokens_per_s"] =
      number(span > 0 ? static_cast<double>(s.generated_tokens + s.prompt_tokens) / span : 0);
  j["goodput_requests_per_s"] = or_null(s.goodput_requests_per_s);
  j["slo_attainment_frac"] = or_null(s.slo_attainment_frac);
  return j;
}

/// The identity of the run: what ran, on what, under which clock.
void add_run(Json& j, const RunInfo& info, const ReplaySummary& s) {
  j["command"] = info.command;
  j["backend"] = s.backend;
  j["model"] = info.model;
  j["workload"] = info.workload;
  j["clock"] = info.clock;
  j["device_model"] = info.device_model;
  j["device"] = info.device;
  j["capacity_bytes"] = s.capacity_bytes;
}

/// What the replay did: counts, throughput, timings, memory.
void add_results(Json& j, const ReplaySummary& s) {
  const double span = s.makespan_s;
  const auto per_s = [&](double x) { return number(span > 0 ? x / span : 0); };
  j["requests"] = s.requests, j["completed"] = s.completed, j["rejected"] = s.rejected;
  j["truncated"] = s.truncated, j["failed"] = s.failed;
  j["steps"] = s.steps, j["preemptions"] = s.preemptions, j["out_of_memory"] = s.out_of_memory;
  j["prompt_tokens"] = s.prompt_tokens, j["generated_tokens"] = s.generated_tokens;
  j["makespan_s"] = number(s.makespan_s);
  j["throughput_tokens_per_s"] = per_s(static_cast<double>(s.generated_tokens));
  j["throughput_requests_per_s"] = per_s(static_cast<double>(s.completed + s.truncated));
  j["mean_batch"] = number(s.mean_batch), j["max_batch"] = s.max_batch;
  j["peak_allocated_bytes"] = s.peak_allocated_bytes;
  j["mean_held_bytes"] = s.mean_held_bytes, j["peak_held_bytes"] = s.peak_held_bytes;
  j["prefix_hit_tokens"] = s.prefix_hit_tokens, j["prefix_lookup_tokens"] = s.prefix_lookup_tokens;
  j["prefix_preempted_hit_tokens"] = s.prefix_preempted_hit_tokens;
  j["prefix_preempted_lookup_tokens"] = s.prefix_preempted_lookup_tokens;
  j["kv_mismatches"] = s.kv_mismatches, j["kv_tokens_checked"] = s.kv_tokens_checked;
  j["kernel_s"] = number(s.kernel_s), j["prepare_s"] = number(s.prepare_s), j["mapping_s"] = number(s.mapping_s);
  j["replay_wall_s"] = number(s.wall_s);
  // null when the device was left clean; else what it still held or refused (the run exited 1).
  j["device_fault"] = s.device_fault.empty() ? Json(nullptr) : Json(s.device_fault);
  // The modelled clock's parts, summed over steps (docs/clock.md): which operation the time went to.
  j["clock_parts"] = {{"linear_s", number(s.clock_parts.linear)},     {"attention_s", number(s.clock_parts.attention)},
                      {"cpu_s", number(s.clock_parts.cpu)},           {"mapping_s", number(s.clock_parts.mapping)},
                      {"transfer_s", number(s.clock_parts.transfer)}, {"copy_s", number(s.clock_parts.copy)}};
  // The paper's latency metric (vLLM Fig. 12); the others are serving's, in ms.
  j["mean_normalized_latency_s"] = number(s.mean_normalized_latency_s);
  j["serving"] = serving(s);
  j["fractions"] = fractions(s.mean_fractions);
  // The backend's own counters (KvBackend::counters()), by the names it gives them.
  Json counters = Json::object();
  for (const auto& [name, value] : s.backend_counters) counters[name] = number(value);
  j["counters"] = counters;
}

/// How the run was made (serving/support/provenance.hpp); options by name, values as given or defaulted.
Json provenance(const Provenance& p) {
  Json options = Json::object();
  for (const auto& [name, value] : p.options) options[name] = value;
  return Json{{"kvlab_version", p.kvlab_version},
              {"git_revision", p.git_revision},
              {"date_utc", p.date_utc},
              {"host", p.host},
              {"device", p.device},
              {"kernels", p.kernels},
              {"options", options}};
}

/// How many keys each line of the file holds, in order.
constexpr int kKeysPerLine[] = {1, 1, 1, 1, 1, 1, 1, 1, 5, 3, 2, 1, 1, 1, 2, 3, 6, 4, 1, 1, 1, 1, 1, 1, 1};

/// A value on one line: nested objects as {"key": value, ...}, the rest as nlohmann prints them
/// (invalid UTF-8 in a string replaced rather than thrown on: the command line is user text).
std::string inline_text(const Json& v) {
  if (!v.is_object()) return v.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out = "{";
  for (const auto& [key, value] : v.items())
    out += fmt::format("{}{}: {}", out.size() > 1 ? ", " : "", inline_text(Json(key)), inline_text(value));
  return out + "}";
}

}  // namespace

std::string summary_json(const RunInfo& info, const ReplaySummary& s) {
  Json j = Json::object();
  add_run(j, info, s);
  add_results(j, s);
  j["provenance"] = provenance(info.provenance);
  KVLAB_ASSERT(std::accumulate(std::begin(kKeysPerLine), std::end(kKeysPerLine), std::size_t{0}) == j.size());
  std::string out = "{\n";
  auto item = j.items().begin();
  for (std::size_t line = 0; line < std::size(kKeysPerLine); ++line) {
    out += "  ";
    for (int k = 0; k < kKeysPerLine[line]; ++k, ++item)
      out += fmt::format("{}{}: {}", k ? ", " : "", inline_text(Json(item.key())), inline_text(item.value()));
    out += line + 1 < std::size(kKeysPerLine) ? ",\n" : "\n";
  }
  return out + "}\n";
}

std::string run_json(const std::string& command, const Provenance& p) {
  const Json j{{"command", command}, {"provenance", provenance(p)}};
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::vector<std::pair<std::string, std::string>> recorded_options(const std::filesystem::path& file) {
  // A run.json is a few KB, a summary.json tens: a device or a FIFO named by --config is refused,
  // not read until memory runs out or forever.
  check_small_input_file(file, "a run.json or summary.json", std::uintmax_t{16} << 20);
  std::ifstream in(file);
  if (!in) throw InvalidArgument(fmt::format("{}: cannot be read", file.string()));
  const Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw InvalidArgument(fmt::format("{}: not JSON", file.string()));
  if (!j.is_object() || !j.contains("provenance") || !j["provenance"].is_object() ||
      !j["provenance"].contains("options") || !j["provenance"]["options"].is_object())
    throw InvalidArgument(
        fmt::format("{}: no provenance.options (a run.json or summary.json of kvlab replay/compare)", file.string()));
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, value] : j["provenance"]["options"].items()) {
    if (!value.is_string())
      throw InvalidArgument(fmt::format("{}: provenance.options.{} is not a string", file.string(), name));
    out.emplace_back(name, value.get<std::string>());
  }
  return out;
}

void write_summary_json(const std::filesystem::path& file, const RunInfo& info, const ReplaySummary& s) {
  write_file_atomically(file, summary_json(info, s));
}

}  // namespace kvlab
