#pragma once
// vLLM's Fig. 2 (memory breakdown) and Fig. 13 (batched requests) plot the same replays: the Orca
// reservation policies and paging on one ShareGPT workload. Internal to experiments/figures/.
#include <string>
#include <vector>

#include "experiments/figures/figures.hpp"
#include "serving/replay/backend_factory.hpp"
#include "serving/replay/replayer.hpp"
#include "serving/traces/workload.hpp"

namespace kvlab::fig {

struct OrcaVsVllm {
  // Orca in a buddy allocator: the paper's own Orca implementation (sec. 6.1).
  std::vector<std::string> backends = {"contiguous-max-buddy", "contiguous-pow2-buddy", "contiguous-oracle-buddy",
                                       "paged-16"};
  std::vector<std::string> labels = {"Orca (Max)", "Orca (Pow2)", "Orca (Oracle)", "vLLM (paged, block 16)"};
  std::vector<ReplaySummary> results;  ///< one per backend, in that order
};

/// The four systems on the ShareGPT workload of kOrcaSetup.
[[nodiscard]] OrcaVsVllm orca_vs_vllm(const FigureContext& ctx);
/// The four systems on workload `w` (OPT-13B, 12 GB, the A100 clock).
[[nodiscard]] OrcaVsVllm orca_vs_vllm(const FigureContext& ctx, const std::vector<Request>& w);
/// The four systems on workload `w` with model and KV space `o` on clock `c`.
[[nodiscard]] OrcaVsVllm orca_vs_vllm(const FigureContext& ctx, const std::vector<Request>& w, const BackendOptions& o,
                                      const ReplayConfig& c);
/// The ShareGPT workload of kOrcaSetup: 2 req/s, 400 requests (3000 with --full), filtered as
/// vLLM's benchmarks sample ShareGPT (prompt at most 1024 tokens, prompt + output at most 2048).
[[nodiscard]] std::vector<Request> orca_sharegpt(const FigureContext& ctx);

inline constexpr const char* kOrcaSetup =
    "OPT-13B, 12 GB of KV cache (A100-40GB), ShareGPT request lengths "
    "(sharegpt_8k_filtered_stats_llama2_tokenizer.csv; "
    "requests longer than OPT's 2048-token context or with prompts over 1024 tokens dropped first, as vLLM's "
    "benchmarks filter ShareGPT), Poisson "
    "arrivals at 2 req/s drawn after the filter (so 2 req/s is the load offered to every system), "
    "FCFS continuous batching as vLLM v0 scheduled it (prompt steps and decode steps apart, at most 256 sequences and "
    "2560 tokens a step, its CPU time per step), recompute preemption; Orca's reservations placed by a binary buddy "
    "allocator, as the paper implemented Orca (sec. 6.1)";

}  // namespace kvlab::fig
