// libFuzzer target: the command line of `kvlab replay` and `kvlab compare`. The input's first
// byte picks the command; the rest, split at newlines, is the argument list (at most 64 words).
// kvlab::cli::parse_run_command must either accept it or throw what the front door reports as one
// line with exit status 2 (UsageError, InvalidArgument, a Boost.Program_options error) or 1 (a
// kvlab::Error: a --config file that cannot be read). Anything else escaping (std::out_of_range
// from a number conversion, std::bad_alloc, std::length_error), a crash, a hang, a leak or an
// allocation past the fuzzer's limit is a finding. What parses must hold the documented bounds
// (docs/bad-inputs.md, group numbers), checked here independently of the parser, and must turn
// into a replay configuration and backend options without throwing.
#include <boost/program_options/errors.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "alloc/core/error.hpp"
#include "experiments/cli/messages.hpp"
#include "experiments/cli/run_options.hpp"

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "options_fuzz: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

/// The bounds every accepted run satisfies (the parser's checks, restated).
void check_bounds(const kvlab::cli::RunOptions& o, const std::vector<std::string>& backends) {
  if (backends.empty()) fail("no backend named, accepted");
  if (o.requests < 0 || o.requests > 10'000'000) fail("--requests out of bounds accepted");
  if (!(o.capacity_gib > 0 && o.capacity_gib <= 1e6)) fail("--capacity-gib out of bounds accepted");
  if (o.max_seq_len < 0 || o.max_seq_len > (std::int64_t{1} << 24)) fail("--max-seq-len out of bounds accepted");
  if (o.max_running < 1 || o.max_batched < 1) fail("--max-running/--max-batched-tokens below 1 accepted");
  if (o.samples < 1 || o.samples > o.max_running) fail("--samples out of bounds accepted");
  if (!(o.rate == 0 || (o.rate >= 1e-6 && o.rate <= 1e9))) fail("--rate out of bounds accepted");
  if (!(o.time_scale >= 1e-6 && o.time_scale <= 1e6)) fail("--time-scale out of bounds accepted");
  if (!(o.burstiness > 0 && o.burstiness <= 1000)) fail("--burstiness out of bounds accepted");
  if (!(o.beam_reselect >= 0 && o.beam_reselect <= 1)) fail("--beam-reselect out of bounds accepted");
  if (!(o.max_memory_gib >= 0) || !std::isfinite(o.max_memory_gib)) fail("--max-memory-gib out of bounds accepted");
  if (o.dump_plans < 0 || o.dump_plans > o.kMaxDumpedPlans || (o.dump_plans_given && o.dump_plans < 1))
    fail("--dump-plans out of bounds accepted");
  if (o.limit < 0 || o.turns < 1 || o.prefix_groups < 0 || o.shared_prefix < 0 || o.execute_layers < 0)
    fail("a negative count accepted");
  for (const double p : o.percentiles)
    if (!(p > 0 && p <= 100)) fail("a percentile outside (0, 100] accepted");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const char* command = (data[0] & 1) ? "compare" : "replay";
  std::vector<std::string> args(1);
  for (std::size_t i = 1; i < size; ++i) {
    if (data[i] != '\n') {
      args.back() += static_cast<char>(data[i]);
    } else {
      if (args.size() == 64) break;
      args.emplace_back();
    }
  }
  if (args.size() == 1 && args.front().empty()) args.clear();
  try {
    const kvlab::cli::RunCommand run = kvlab::cli::parse_run_command(command, args);
    if (run.help) {
      if (run.help_text.find("--capacity-gib") == std::string::npos) fail("--help without the options' table");
      return 0;
    }
    check_bounds(run.options, run.backends);
    (void)run.options.replay_config();
    (void)run.options.backend_options(nullptr);
  } catch (const kvlab::cli::UsageError& e) {
    if (std::string(e.what()).empty()) fail("a usage error without a message");
  } catch (const boost::program_options::error_with_option_name& e) {
    if (kvlab::cli::option_error_message(e).empty()) fail("an option error without a message");
  } catch (const boost::program_options::error& e) {
    if (std::string(e.what()).empty()) fail("an option error without a message");
  } catch (const kvlab::Error& e) {  // InvalidArgument (exit 2) or a file that cannot be read (exit 1)
    if (kvlab::cli::user_message(e).empty()) fail("an error without a message");
  }
  return 0;
}
