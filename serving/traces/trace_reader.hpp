#pragma once
// Readers for public LLM-serving traces (and kvlab's own CSV format), producing the Request type
// the replayer serves. Formats, columns and provenance: docs/traces.md.
//
// Every reader is strict: a malformed input never crashes and never loses rows silently; it
// throws TraceError, whose what() is one line, `FILE:LINE: field 'NAME': problem`
// (or `FILE:LINE: problem` when no single field is at fault).
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "alloc/core/error.hpp"
#include "serving/traces/workload.hpp"

namespace kvlab {

/// A malformed or missing trace. what() == "FILE:LINE: field 'NAME': problem"; LINE is 1-based
/// (0 = the file as a whole, printed as "FILE: ..."); the field part is left out when empty.
class TraceError : public InvalidArgument {
 public:
  TraceError(std::string file, std::int64_t line, std::string field, std::string problem);
  [[nodiscard]] const std::string& file() const { return file_; }
  [[nodiscard]] std::int64_t line() const { return line_; }
  [[nodiscard]] const std::string& field() const { return field_; }
  [[nodiscard]] const std::string& problem() const { return problem_; }

 private:
  std::string file_;
  std::int64_t line_;
  std::string field_;
  std::string problem_;
};

enum class TraceFormat {
  auto_detect,    ///< from the header / first line
  azure,          ///< Azure LLM inference 2023 CSV: TIMESTAMP,ContextTokens,GeneratedTokens
  vidur,          ///< Vidur/Sarathi CSV: [arrived_at,]num_prefill_tokens,num_decode_tokens[,...]
  mooncake,       ///< Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids
  llmservingsim,  ///< LLMServingSim JSONL: input_toks, output_toks, arrival_time_ns[, input_tok_ids]
  kvlab,          ///< kvlab CSV: arrival_s,prompt_tokens,output_tokens[,prefix_hashes_<B>]
};

/// "auto", "azure", "vidur", "mooncake", "llmservingsim", "kvlab"; anything else throws
/// InvalidArgument listing the choices.
[[nodiscard]] TraceFormat parse_trace_format(std::string_view name);
[[nodiscard]] std::string_view to_string(TraceFormat format);

/// Longest prompt or output a trace row may ask for; longer values are a format error.
inline constexpr std::int64_t kMaxTraceTokens = 10'000'000;
/// Block size of Mooncake's hash_ids.
inline constexpr std::int32_t kMooncakeHashBlock = 512;

struct TraceOptions {
  TraceFormat format = TraceFormat::auto_detect;
  /// > 0: drop requests whose sequence would outgrow this many tokens (prompt + output - 1, what
  /// the cache holds at the last step) before max_requests and Poisson arrivals apply, so that a
  /// drawn rate is the offered load of requests that can run (vLLM's benchmarks filter this way).
  std::int64_t max_sequence_tokens = 0;
  /// > 0: drop requests whose prompt is longer than this, with the same effect on arrivals
  /// (vLLM's benchmarks drop ShareGPT prompts over 1024 tokens).
  std::int64_t max_prompt_tokens = 0;
  /// Keep only the first N requests in arrival order; 0 = all. The whole file is still checked.
  std::int64_t max_requests = 0;
  /// Multiplies every arrival time (so every inter-arrival gap): 0.5 = twice the load. > 0.
  double time_scale = 1.0;
  /// Added to every arrival after scaling: the first request of a trace that starts at 0 arrives here. >= 0.
  double start_offset_s = 0.0;
  /// > 0: replace the trace's arrival times by a Poisson process at this rate (requests/s), drawn
  /// from std::mt19937_64(seed) like generate(); the first request arrives at 0. This is how
  /// length-only traces (Vidur files without arrived_at) get arrivals; without it they all
  /// arrive at 0.
  double poisson_rate = 0.0;
  std::uint64_t seed = 0;
  /// Keep LLMServingSim input_tok_ids as Request::prompt_token_ids (they are always parsed and checked).
  bool keep_token_ids = true;
};

/// What was read. Means and the duration describe the returned requests.
struct TraceInfo {
  std::string source;                             ///< the file as named to the reader
  TraceFormat format = TraceFormat::auto_detect;  ///< the format actually read
  std::int64_t rows = 0;                          ///< data rows in the file
  std::int64_t requests = 0;                      ///< requests returned (after max_requests)
  std::int64_t too_long = 0;                      ///< rows dropped by max_sequence_tokens or max_prompt_tokens
  bool has_timestamps = false;                    ///< the file carries arrival times
  bool was_sorted = true;                         ///< rows were already in arrival order (else stable-sorted)
  bool has_prefix_hashes = false;
  bool has_token_ids = false;
  double duration_s = 0;  ///< last minus first returned arrival
  double mean_prompt_tokens = 0;
  double mean_output_tokens = 0;

  /// One line, e.g. "azure trace X: 8819 requests over 3599.9 s, mean prompt 2048.0, output 28.0".
  [[nodiscard]] std::string describe() const;
};

struct Trace {
  std::vector<Request> requests;  ///< sorted by arrival_s (stable); Request::id = 0-based data row
  TraceInfo info;
};

/// Reads a whole trace file. Azure and Mooncake rows must be in time order (their sources are; an
/// out-of-order row is an error naming its line); other formats are stable-sorted by arrival and
/// report it in TraceInfo::was_sorted. Throws TraceError for anything malformed, InvalidArgument
/// for bad options.
[[nodiscard]] Trace read_trace(const std::filesystem::path& file, const TraceOptions& options = {});

/// The same on text already in memory; `source` names it in messages.
[[nodiscard]] Trace parse_trace(std::string_view text, const std::string& source, const TraceOptions& options = {});

/// The format a file starting with `text` is in (by its CSV header or first JSON object);
/// throws TraceError naming `source` when none fits.
[[nodiscard]] TraceFormat detect_trace_format(std::string_view text, const std::string& source);

/// $KVLAB_TRACE_DIR when set and non-empty, else <source tree>/../shared/traces.
[[nodiscard]] std::filesystem::path default_trace_dir();

/// A path (anything with a directory part) is used as is; a plain file name is looked up in
/// trace_dir, then in the working directory. A missing file throws TraceError that mentions
/// scripts/download_traces.sh.
[[nodiscard]] std::filesystem::path resolve_trace(const std::string& name_or_path,
                                                  const std::filesystem::path& trace_dir = default_trace_dir());

/// Writes requests in the kvlab format (docs/traces.md), which parse_trace reads back exactly
/// (arrival times in shortest round-trip form). Adds a prefix_hashes_<B> column when any request
/// has prefix hashes; then all that have them must share one block size.
void write_kvlab_trace(std::ostream& out, const std::vector<Request>& requests);

}  // namespace kvlab
