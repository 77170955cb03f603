#include "kernels/simt/emulated_attention.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "alloc/core/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/dispatch.hpp"
#include "kernels/simt/attention_kernel.hpp"
#include "kernels/simt/emulator.hpp"

namespace kvlab {

void emulated_attention(const AttentionParams& p, const KvView& kv, int num_partitions,
                        const EmulatedLaunchOptions& options) {
  validate_attention(p, kv);
  KVLAB_EXPECTS(num_partitions >= 1 && num_partitions <= 65535, "num_partitions must be in 1..65535");
  KVLAB_EXPECTS(options.block_threads >= 1 && options.block_threads <= 1024, "block_threads must be in 1..1024");
  if (p.batch == 0) return;
  int max_q = 0;
  for (int s = 0; s < p.batch; ++s) max_q = std::max(max_q, p.q_end(s) - p.q_begin(s));
  const std::int64_t total_q = p.q_end(p.batch - 1);
  const simt::LaunchOptions launch_options{options.shuffle_seed, options.load_stats};

  visit_kv_view(kv, [&](auto view, auto dim) {
    using View = decltype(view);
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(view.k(0, 0, 0))>>;
    constexpr int D = decltype(dim)::value;
    using Tr = simt::AttentionTraits<T, D>;
    const int rows = max_q * p.group();
    const int row_blocks = std::max(1, (rows + Tr::kRows - 1) / Tr::kRows);
    KVLAB_EXPECTS(static_cast<std::int64_t>(p.num_kv_heads) * row_blocks <= 65535, "too many query rows for grid.y");

    std::vector<float> part_out, part_ml;
    simt::AttentionKernelArgs<View> args{p, view, num_partitions, row_blocks, nullptr, nullptr};
    if (num_partitions > 1) {
      const std::size_t slots = static_cast<std::size_t>(total_q) * p.num_q_heads * num_partitions;
      part_out.assign(slots * D, NAN);  // poisoned: a partial the merge reads but nobody wrote shows
      part_ml.assign(slots * 2, NAN);
      args.part_out = part_out.data();
      args.part_ml = part_ml.data();
    }
    const simt::Dim3 grid{static_cast<unsigned>(p.batch), static_cast<unsigned>(p.num_kv_heads * row_blocks),
                          static_cast<unsigned>(num_partitions)};
    simt::launch(
        grid, {options.block_threads, 1, 1}, Tr::shared_bytes(),
        [&](simt::EmulatedExec& ex) { simt::attention_partial_kernel<T, D>(ex, args); }, launch_options);
    if (num_partitions > 1) {
      const simt::AttentionMergeArgs merge{p, num_partitions, part_out.data(), part_ml.data()};
      simt::launch(
          {static_cast<unsigned>(p.batch), static_cast<unsigned>(p.num_q_heads), 1}, {options.block_threads, 1, 1}, 0,
          [&](simt::EmulatedExec& ex) { simt::attention_merge_kernel<D>(ex, merge); }, launch_options);
    }
  });
}

void emulated_block_copy(const simt::BlockCopyParams& c, const EmulatedLaunchOptions& options) {
  KVLAB_EXPECTS(c.num_pairs >= 0 && c.block_bytes >= 0, "num_pairs and block_bytes must not be negative");
  if (c.num_pairs == 0 || c.block_bytes == 0) return;
  KVLAB_EXPECTS(c.src_pool && c.dst_pool && c.src_blocks && c.dst_blocks, "pools and block lists must be set");
  KVLAB_EXPECTS(options.block_threads >= 1 && options.block_threads <= 1024, "block_threads must be in 1..1024");
  const simt::Dim3 grid{static_cast<unsigned>(std::min<std::int64_t>(c.num_pairs, 1024)), 1, 1};
  const simt::Dim3 block{options.block_threads, 1, 1};
  const simt::LaunchOptions launch_options{options.shuffle_seed, options.load_stats};
  switch (simt::block_copy_word_bytes(c)) {
    case 16:
      return simt::launch(
          grid, block, 0, [&](simt::EmulatedExec& ex) { simt::block_copy_kernel<simt::Copy16>(ex, c); },
          launch_options);
    case 8:
      return simt::launch(
          grid, block, 0, [&](simt::EmulatedExec& ex) { simt::block_copy_kernel<simt::Copy8>(ex, c); }, launch_options);
    case 4:
      return simt::launch(
          grid, block, 0, [&](simt::EmulatedExec& ex) { simt::block_copy_kernel<std::uint32_t>(ex, c); },
          launch_options);
    default:
      return simt::launch(
          grid, block, 0, [&](simt::EmulatedExec& ex) { simt::block_copy_kernel<unsigned char>(ex, c); },
          launch_options);
  }
}

}  // namespace kvlab
