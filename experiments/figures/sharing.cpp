// vLLM (SOSP'23) Fig. 15: memory that sharing KV blocks saves in parallel sampling and beam search.
#include "experiments/figures/figure_kit.hpp"
#include "experiments/figures/figure_list.hpp"

namespace kvlab::fig {

namespace {
/// Bytes sharing saved / bytes the sequences would hold unshared, weighted by step time.
double memory_saving(const ReplayResult& r) {
  double saved = 0, total = 0;
  for (const StepRecord& s : r.steps) {
    saved += s.duration_s * static_cast<double>(s.shared_savings_bytes);
    total += s.duration_s * static_cast<double>(s.shared_savings_bytes + s.allocated_bytes);
  }
  return total > 0 ? saved / total : 0;
}

void sharing(const FigureContext& ctx) {
  const double paper_parallel[] = {6.09, 8.53, 9.79}, paper_beam[] = {37.56, 53.13, 55.16};
  const auto w = alpaca_like(ctx.full ? 10.0 : 20.0, ctx.full ? 2000 : 200);
  Table t{{"decoding", "outputs", "memory_saving_pct", "paper_memory_saving_pct", "relative_error_pct", "mean_batch"}};
  const int outs[] = {2, 4, 6};
  for (int beam = 0; beam < 2; ++beam)
    for (int i = 0; i < 3; ++i) {
      ReplayConfig c = a100_40gb();
      c.samples_per_request = outs[i];
      c.beam_reselect_probability = beam ? 0.5 : 0.0;
      const ReplayResult r = run(ctx, "paged-16", opt13b_12gb(), w, c, StepRecords::keep);
      const double paper = beam ? paper_beam[i] : paper_parallel[i];
      t.add({beam ? "beam search" : "parallel sampling", std::to_string(outs[i]), pct(memory_saving(r)), fixed(paper),
             relative_error_pct(100 * memory_saving(r), paper), fixed(r.summary.mean_batch)});
    }
  publish(ctx,
          {"sharing", "vLLM (SOSP'23) Figure 15: memory saved by sharing KV blocks",
           "OPT-13B, 12 GB of KV, vLLM v0 scheduling (prompt steps and decode steps apart), paged backend (block 16), "
           "Alpaca-like lengths (lognormal, means ~19 / ~58 "
           "tokens); parallel sampling forks the prompt into n sequences; beam search is modelled as beams that, "
           "after every step, each continue from another beam with probability 0.5 (a seeded stand-in for top-k "
           "beam selection)",
           modelled_a100(),
           "Memory saving = bytes that sharing saves / bytes the sequences would hold unshared, weighted by step "
           "time. Parallel sampling shares only the prompt, so its saving is small on Alpaca's short prompts; "
           "beam search also shares generated tokens, so it saves much more. The beam model is a stand-in: its "
           "reselection rate sets how much beams share. `relative_error_pct` = (ours - paper) / paper.",
           clock_sources(a100_40gb().device)},
          t);
}
}  // namespace

Figure sharing_figure() {
  return {"sharing", "vLLM Fig. 15: memory saved by parallel sampling and beam search", sharing};
}

}  // namespace kvlab::fig
