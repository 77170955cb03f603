// The attention kernels of kernels/simt/attention_kernel.hpp instantiated for the GPU with
// CudaExec: dtype x head dim x layout, all from the one dispatch site (kernels/dispatch.hpp).
#include <algorithm>
#include <map>
#include <mutex>
#include <utility>
#include <string>
#include <type_traits>
#include <vector>

#include "alloc/cuda/cuda_check.hpp"
#include "alloc/core/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/cuda/cuda_attention.hpp"
#include "kernels/dispatch.hpp"
#include "kernels/simt/attention_kernel.hpp"
#include "kernels/split_kv.hpp"

namespace kvlab {
namespace {

constexpr int kMergeThreads = 128;

template <class T, int D, class View>
__global__ void __launch_bounds__(256) attention_partial(simt::AttentionKernelArgs<View> args) {
  simt::CudaExec ex;
  simt::attention_partial_kernel<T, D>(ex, args);
}

template <int D>
__global__ void __launch_bounds__(kMergeThreads) attention_merge(simt::AttentionMergeArgs args) {
  simt::CudaExec ex;
  simt::attention_merge_kernel<D>(ex, args);
}

}  // namespace

std::size_t cuda_attention_workspace_bytes(std::int64_t total_q, int num_q_heads, int head_dim, int num_partitions) {
  KVLAB_EXPECTS(num_partitions >= 1,
                "num_partitions must be resolved (cuda_attention_partitions) before sizing a workspace");
  if (num_partitions == 1) return 0;
  const std::size_t slots = static_cast<std::size_t>(total_q) * num_q_heads * num_partitions;
  return slots * (static_cast<std::size_t>(head_dim) + 2) * sizeof(float);
}

namespace {
/// The largest query count of a sequence when the host knows it without a copy; -1 otherwise.
int known_max_query_len(const AttentionParams& p, const CudaAttentionOptions& o) {
  if (!p.q_indptr) return 1;
  if (o.max_q_len >= 0) return o.max_q_len;
  if (p.host_q_indptr) {
    int m = 0;
    for (int s = 0; s < p.batch; ++s) m = std::max(m, p.host_q_indptr[s + 1] - p.host_q_indptr[s]);
    return m;
  }
  return -1;
}

/// SMs x resident blocks of one kernel instance on the current device, asked once per (device,
/// instance, block size): the driver queries cost microseconds, and this runs before every launch.
template <class T, int D, class View>
std::int64_t wave_slots(unsigned block_threads, int& sms) {
  static std::mutex mutex;
  static std::map<std::pair<int, unsigned>, std::pair<int, int>> cache;  // -> (SMs, blocks per SM)
  int device = 0;
  KVLAB_CUDA_TRY(cudaGetDevice(&device));
  std::lock_guard lock(mutex);
  auto [it, fresh] = cache.try_emplace({device, block_threads});
  if (fresh) {
    try {
      KVLAB_CUDA_TRY(cudaDeviceGetAttribute(&it->second.first, cudaDevAttrMultiProcessorCount, device));
      KVLAB_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&it->second.second, attention_partial<T, D, View>,
                                                                   static_cast<int>(block_threads),
                                                                   simt::AttentionTraits<T, D>::shared_bytes()));
    } catch (...) {
      cache.erase(it);
      throw;
    }
  }
  sms = it->second.first;
  return it->second.second;
}

/// Partitions for a launch whose longest query count is max_q (-1: unknown).
int choose_partitions(const AttentionParams& p, const KvView& kv, const CudaAttentionOptions& o, int max_q) {
  KVLAB_EXPECTS(o.num_partitions >= 0 && o.num_partitions <= 65535, "num_partitions must be in 0..65535");
  if (o.num_partitions > 0) return o.num_partitions;
  if (p.batch == 0 || max_q != 1) return 1;  // prefill (or unknown): its query rows fill the grid
  int sms = 0;
  SplitKvPolicy policy;
  visit_kv_view(kv, [&](auto view, auto dim) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(view.k(0, 0, 0))>>;
    policy.blocks_per_sm = static_cast<int>(wave_slots<T, decltype(dim)::value, decltype(view)>(o.block_threads, sms));
  });
  std::int64_t max_len = -1;
  if (p.host_seq_lens) {
    max_len = 0;
    for (int s = 0; s < p.batch; ++s) max_len = std::max<std::int64_t>(max_len, p.host_seq_lens[s]);
  }
  const int rows_per_block = simt::attention_rows_per_block(p.head_dim);
  const int row_blocks = (p.group() + rows_per_block - 1) / rows_per_block;
  return split_kv_partitions(static_cast<std::int64_t>(p.batch) * p.num_kv_heads * row_blocks, sms, max_len, policy);
}
}  // namespace

int cuda_attention_partitions(const AttentionParams& p, const KvView& kv, const CudaAttentionOptions& o) {
  KVLAB_EXPECTS(o.block_threads >= 32 && o.block_threads <= 256 && o.block_threads % 32 == 0,
                "block_threads must be a multiple of 32 in 32..256");
  return choose_partitions(p, kv, o, known_max_query_len(p, o));
}

void cuda_attention(const AttentionParams& p, const KvView& kv, const CudaAttentionOptions& o, cudaStream_t stream) {
  validate_attention(p, kv);
  KVLAB_EXPECTS(o.block_threads >= 32 && o.block_threads <= 256 && o.block_threads % 32 == 0,
                "block_threads must be a multiple of 32 in 32..256");
  KVLAB_EXPECTS(o.num_partitions >= 0 && o.num_partitions <= 65535, "num_partitions must be in 0..65535");
  if (p.batch == 0) return;

  int max_q = 1;
  std::int64_t total_q = p.batch;
  if (p.q_indptr) {
    if (o.max_q_len >= 0 && o.total_q >= 0) {
      max_q = o.max_q_len;
      total_q = o.total_q;
    } else {
      std::vector<std::int32_t> indptr(static_cast<std::size_t>(p.batch) + 1);
      KVLAB_CUDA_TRY(cudaMemcpyAsync(indptr.data(), p.q_indptr, indptr.size() * sizeof(std::int32_t),
                                     cudaMemcpyDeviceToHost, stream));
      KVLAB_CUDA_TRY(cudaStreamSynchronize(stream));
      max_q = 0;
      for (int s = 0; s < p.batch; ++s) max_q = std::max(max_q, indptr[s + 1] - indptr[s]);
      total_q = indptr[p.batch];
    }
  }
  const int P = choose_partitions(p, kv, o, max_q);

  visit_kv_view(kv, [&](auto view, auto dim) {
    using View = decltype(view);
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(view.k(0, 0, 0))>>;
    constexpr int D = decltype(dim)::value;
    using Tr = simt::AttentionTraits<T, D>;
    static_assert(Tr::shared_bytes() <= 48 * 1024, "attention tile exceeds the default dynamic shared memory");
    const int rows = max_q * p.group();
    const int row_blocks = std::max(1, (rows + Tr::kRows - 1) / Tr::kRows);
    KVLAB_EXPECTS(static_cast<std::int64_t>(p.num_kv_heads) * row_blocks <= 65535, "too many query rows for grid.y");

    simt::AttentionKernelArgs<View> args{p, view, P, row_blocks, nullptr, nullptr};
    void* owned = nullptr;
    if (P > 1) {
      const std::size_t need = cuda_attention_workspace_bytes(total_q, p.num_q_heads, D, P);
      void* ws = o.workspace;
      if (!ws) {
        KVLAB_CUDA_TRY(cudaMallocAsync(&owned, need, stream));
        ws = owned;
      } else {
        KVLAB_EXPECTS(o.workspace_bytes >= need, "workspace too small: need " + std::to_string(need) + " bytes");
      }
      args.part_out = static_cast<float*>(ws);
      args.part_ml = args.part_out + static_cast<std::size_t>(total_q) * p.num_q_heads * P * D;
    }
    const dim3 grid(static_cast<unsigned>(p.batch), static_cast<unsigned>(p.num_kv_heads * row_blocks),
                    static_cast<unsigned>(P));
    attention_partial<T, D, View><<<grid, o.block_threads, Tr::shared_bytes(), stream>>>(args);
    cudaError_t launched = cudaGetLastError();
    if (launched == cudaSuccess && P > 1) {
      const simt::AttentionMergeArgs merge{p, P, args.part_out, args.part_ml};
      attention_merge<D>
          <<<dim3(static_cast<unsigned>(p.batch), static_cast<unsigned>(p.num_q_heads)), kMergeThreads, 0, stream>>>(
              merge);
      launched = cudaGetLastError();
    }
    if (owned) KVLAB_CUDA_TRY(cudaFreeAsync(owned, stream));
    KVLAB_CUDA_TRY(launched);
  });
}

}  // namespace kvlab
