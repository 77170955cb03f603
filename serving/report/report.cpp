#include "serving/report/report.hpp"

#include <algorithm>

#include <iomanip>
#include <sstream>

#include "alloc/core/error.hpp"
#include "serving/support/atomic_file.hpp"
#include "serving/support/shell.hpp"
#include "serving/report/record_columns.hpp"
#include "serving/report/summary_json.hpp"

namespace kvlab {

void print_summary_table(std::ostream& os, const std::vector<ReplaySummary>& rows) {
  const auto pct = [](double f) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(1) << 100.0 * f << "%";
    return s.str();
  };
  os << std::left << std::setw(20) << "backend" << std::right << std::setw(13) << "token_states" << std::setw(10)
     << "reserved" << std::setw(10) << "internal" << std::setw(10) << "external" << std::setw(8) << "free"
     << std::setw(11) << "mean_batch" << std::setw(10) << "preempt" << std::setw(10) << "rejected" << std::setw(12)
     << "tokens/s" << std::setw(12) << "TTFT_ms" << std::setw(12) << "p99TTFT_ms" << std::setw(10) << "TPOT_ms"
     << std::setw(10) << "ITL_ms"
     << "\n";
  for (const ReplaySummary& r : rows) {
    const double tps = r.makespan_s > 0 ? static_cast<double>(r.generated_tokens) / r.makespan_s : 0;
    os << std::left << std::setw(20) << r.backend << std::right << std::setw(13) << pct(r.mean_fractions.token_states)
       << std::setw(10) << pct(r.mean_fractions.reserved) << std::setw(10)
       << pct(r.mean_fractions.internal_fragmentation) << std::setw(10) << pct(r.mean_fractions.external_fragmentation)
       << std::setw(8) << pct(r.mean_fractions.free) << std::setw(11) << std::fixed << std::setprecision(2)
       << r.mean_batch << std::setw(10) << r.preemptions << std::setw(10) << r.rejected << std::setw(12)
       << std::setprecision(0) << tps << std::setprecision(1) << std::setw(12) << r.ttft.mean_ms << std::setw(12)
       << r.ttft.p99_ms << std::setw(10) << r.tpot.mean_ms << std::setw(10) << r.itl.mean_ms << "\n";
  }
  const bool measured = !rows.empty() && rows.front().clock == "measured";
  os << "fractions are time-weighted shares of the KV capacity (vLLM Fig. 2 categories); latencies are means over "
        "finished requests in ms (summary.json's serving has median/p90/p99); "
     << (measured ? "times are measured (the attention kernels over the real KV memory).\n"
                  : "times are modelled per operation from the device model (docs/clock.md).\n");
}

void write_replay_files(const std::filesystem::path& dir, const RunInfo& info, const ReplayResult& result) {
  const ReplaySummary& s = result.summary;
  const std::filesystem::path out = dir / s.backend;
  std::filesystem::create_directories(out);
  {
    std::ostringstream f;
    write_csv_rows<StepRecord>(f, result.steps, step_columns());
    write_file_atomically(out / "steps.csv", f.view());
  }
  {
    std::ostringstream f;
    write_csv_rows<RequestRecord>(f, result.requests, request_columns());
    write_file_atomically(out / "requests.csv", f.view());
  }
  // The summary last: a directory with a summary.json holds the run's complete files.
  write_summary_json(out / "summary.json", info, s);
}

std::string compare_csv(const std::string& workload, const std::vector<ReplaySummary>& rows) {
  std::ostringstream f;
  f << std::setprecision(9);
  f << "backend,workload,clock,token_states_frac,reserved_frac,internal_fragmentation_frac,"
       "external_fragmentation_frac,free_frac,mean_batch,max_batch,throughput_tokens_per_s,"
       "throughput_requests_per_s,completed,rejected,truncated,preemptions,out_of_memory,"
       "peak_allocated_bytes,capacity_bytes,mean_shared_savings_bytes,mean_normalized_latency_s,makespan_s,"
       "prefix_hit_tokens,failed,replay_wall_s,replay_tokens_per_s";
  // The serving latencies: mean, median, std and the percentiles asked for (--percentiles), in ms.
  const std::vector<std::pair<double, double>> asked =
      rows.empty() ? std::vector<std::pair<double, double>>{} : rows.front().ttft.percentiles_ms;
  for (const char* name : {"ttft", "tpot", "itl", "e2el"}) {
    f << ',' << name << "_mean_ms," << name << "_median_ms," << name << "_std_ms";
    for (const auto& [p, ms] : asked) f << ',' << name << '_' << percentile_name(p) << "_ms";
  }
  f << ",goodput_requests_per_s,slo_attainment_frac,mean_held_bytes,peak_held_bytes";
  // Then one column per backend counter (summary.json's "counters", by name), in the order the rows
  // first name them; empty where a backend has no such counter.
  std::vector<std::string> counters;
  for (const ReplaySummary& s : rows)
    for (const auto& [name, value] : s.backend_counters)
      if (std::find(counters.begin(), counters.end(), name) == counters.end()) counters.push_back(name);
  for (const std::string& name : counters) f << ',' << csv_field(name);
  f << '\n';
  for (const ReplaySummary& s : rows) {
    const double span = s.makespan_s > 0 ? s.makespan_s : 1;
    f << s.backend << ',' << csv_field(workload) << ',' << s.clock << ',' << s.mean_fractions.token_states << ','
      << s.mean_fractions.reserved << ',' << s.mean_fractions.internal_fragmentation << ','
      << s.mean_fractions.external_fragmentation << ',' << s.mean_fractions.free << ',' << s.mean_batch << ','
      << s.max_batch << ',' << s.generated_tokens / span << ',' << (s.completed + s.truncated) / span << ','
      << s.completed << ',' << s.rejected << ',' << s.truncated << ',' << s.preemptions << ',' << s.out_of_memory << ','
      << s.peak_allocated_bytes << ',' << s.capacity_bytes << ',' << s.mean_shared_savings_bytes << ','
      << s.mean_normalized_latency_s << ',' << s.makespan_s << ',' << s.prefix_hit_tokens << ',' << s.failed << ','
      << s.wall_s << ','
      << (s.wall_s > 0 ? static_cast<double>(s.generated_tokens + s.prefill_tokens_computed) / s.wall_s : 0);
    for (const LatencyStats* l : {&s.ttft, &s.tpot, &s.itl, &s.e2el}) {
      f << ',' << l->mean_ms << ',' << l->median_ms << ',' << l->std_ms;
      for (const auto& [p, ms] : l->percentiles_ms) f << ',' << ms;
    }
    // Empty without --goodput.
    f << ',';
    if (s.goodput_requests_per_s >= 0) f << s.goodput_requests_per_s;
    f << ',';
    if (s.slo_attainment_frac >= 0) f << s.slo_attainment_frac;
    f << ',' << s.mean_held_bytes << ',' << s.peak_held_bytes;
    for (const std::string& name : counters) {
      f << ',';
      for (const auto& [n, value] : s.backend_counters)
        if (n == name) f << value;
    }
    f << '\n';
  }
  return std::move(f).str();
}

void write_compare_csv(const std::filesystem::path& file, const std::string& workload,
                       const std::vector<ReplaySummary>& rows) {
  std::filesystem::create_directories(file.parent_path());
  write_file_atomically(file, compare_csv(workload, rows));
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

PlotOutcome plot_compare(const std::filesystem::path& dir, std::string* error) {
  const PlotOutcome o = run_plot_script({"compare", dir.string()}, /*quiet=*/true, error);
  if (o == PlotOutcome::failed) {
    std::error_code ec;
    std::filesystem::remove(dir / "compare.png", ec);  // whatever a failed script left is no chart
  }
  return o;
}

}  // namespace kvlab
