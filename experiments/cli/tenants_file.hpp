#pragma once
// The tenants file of `kvlab replay|compare --tenants FILE` (docs/elastic.md, "Tenants"): one
// tenant per line, its name first, then KEY=VALUE fields; '#' starts a comment.
//
//   # name  fields
//   chat    model=llama-3-8b requests=200 rate=4 burstiness=3 prompt-len=uniform:200:1200 seed=1
//   code    model=llama-3-8b trace=AzureLLMInferenceTrace_code.csv limit=500 offset=600 limit-gib=20 shrink=1200:4
//
// Workload keys are kvlab replay's options of the same name (model, trace, trace-format, limit,
// time-scale, requests, rate, burstiness, prompt-len, output-len, seed, prefix-groups,
// shared-prefix, turns, lengths-from), checked as the command line checks them. Tenant keys:
// offset=S (its arrivals start S seconds later), share=F (static split and fair share: its fraction of the
// capacity), limit-gib=G (elastic: the most it may hold), shrink=T:G (elastic: its limit becomes G
// GiB at T seconds; repeatable, in time order), priority=N (elastic: while a tenant of higher
// priority waits for memory, this one admits no new request; whole numbers, default 0).
#include <filesystem>
#include <string>
#include <vector>

namespace kvlab {

struct TenantLine {
  std::string where;              ///< "FILE:LINE", for messages
  std::string name;               ///< a folder name: letters, digits, '.', '_', '-'
  std::vector<std::string> args;  ///< the workload keys as replay options: {"--model", "llama-3-8b", ...}
  double offset_s = 0;
  double share = 0;
  double limit_gib = 0;
  int priority = 0;
  std::vector<std::pair<double, double>> shrinks;  ///< (at seconds, GiB)
};

/// Reads FILE. Throws InvalidArgument "FILE:LINE: ..." naming the field for anything malformed: an
/// unknown or repeated key, a bad number, a name given twice; and for a file with no tenant.
[[nodiscard]] std::vector<TenantLine> read_tenants_file(const std::filesystem::path& file);

}  // namespace kvlab
