#include "kernels/attention.hpp"

#include "alloc/core/error.hpp"
#include "kernels/dispatch.hpp"
#include "kernels/simt/emulated_attention.hpp"
#if KVLAB_HAS_CUDA
#include "alloc/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_attention.hpp"
#endif
#if KVLAB_HAS_FLASHINFER
#include "kernels/flashinfer/flashinfer_attention.hpp"
#endif

namespace kvlab {

void validate_attention(const AttentionParams& p, const KvView& kv) {
  KVLAB_EXPECTS(p.batch >= 0, "batch must not be negative");
  KVLAB_EXPECTS(p.num_kv_heads > 0 && p.num_q_heads > 0, "head counts must be positive");
  KVLAB_EXPECTS(p.num_q_heads % p.num_kv_heads == 0, "query heads must be a multiple of KV heads");
  KVLAB_EXPECTS(p.num_kv_heads == kv.num_kv_heads, "params and view disagree on KV heads");
  KVLAB_EXPECTS(p.head_dim == kv.head_dim, "params and view disagree on head dim");
  KVLAB_EXPECTS(supported_head_dim(p.head_dim), "unsupported head dim " + std::to_string(p.head_dim));
  if (p.batch == 0) return;
  KVLAB_EXPECTS(p.q && p.out && p.seq_lens, "q, out and seq_lens must be set");
  if (kv.layout == KvLayout::paged) {
    KVLAB_EXPECTS(kv.block_size >= 1, "paged view needs block_size >= 1");
    KVLAB_EXPECTS(kv.k_pool && kv.v_pool && kv.block_table, "paged view needs pools and a block table");
  } else {
    KVLAB_EXPECTS(kv.k_seq && kv.v_seq, "contiguous view needs per-sequence bases");
  }
}

void validate_host_lengths(const AttentionParams& p) {
  for (int s = 0; s < p.batch; ++s) {
    const int q_len = p.q_end(s) - p.q_begin(s);
    KVLAB_EXPECTS(q_len >= 0 && q_len <= p.seq_lens[s],
                  "sequence " + std::to_string(s) + " has " + std::to_string(q_len) + " queries but only " +
                      std::to_string(p.seq_lens[s]) + " cached tokens (its own queries included)");
  }
}

const char* to_string(GpuKernel k) noexcept {
  switch (k) {
    case GpuKernel::automatic:
      return "auto";
    case GpuKernel::kvlab:
      return "kvlab";
    case GpuKernel::flashinfer:
      return "flashinfer";
    case GpuKernel::flashinfer_paged:
      return "flashinfer-paged";
  }
  return "?";
}

bool flashinfer_built() noexcept { return KVLAB_HAS_FLASHINFER != 0; }

#if !KVLAB_HAS_FLASHINFER
FlashInferCalls flashinfer_calls() { return {}; }
#endif

GpuKernel resolve(GpuKernel k, Device device) noexcept {
  if (k != GpuKernel::automatic) return k;
  return device == Device::cuda && flashinfer_built() ? GpuKernel::flashinfer : GpuKernel::kvlab;
}

void attention(Device device, const AttentionParams& p, const KvView& kv, GpuKernel requested) {
  const GpuKernel gpu = resolve(requested, device);
  const bool flashinfer = gpu == GpuKernel::flashinfer || gpu == GpuKernel::flashinfer_paged;
  if (flashinfer && device != Device::cuda)
    KVLAB_THROW(InvalidArgument,
                "FlashInfer's kernels run on a GPU only (device " + std::string(to_string(device)) + ")");
  switch (device) {
    case Device::host:
      return host_attention(p, kv);
    // The CUDA kernels' source under the host SIMT emulator, split-KV as on a GPU.
    case Device::emulated:
      return emulated_attention(p, kv, /*num_partitions=*/2);
    case Device::cuda:
#if KVLAB_HAS_CUDA
      if (flashinfer) {
#if KVLAB_HAS_FLASHINFER
        return flashinfer_attention(
            p, kv, nullptr, gpu == GpuKernel::flashinfer_paged ? FlashInferPath::paged : FlashInferPath::automatic);
#else
        KVLAB_THROW(InvalidArgument,
                    "FlashInfer's kernels are not built into this binary (scripts/fetch_flashinfer.sh, "
                    "then rebuild with nvcc); run --kernels kvlab");
#endif
      }
      return cuda_attention(p, kv, /*num_partitions=*/0);  // sized to the GPU's SMs
#else
      KVLAB_THROW(InvalidArgument, "CUDA attention is not built into this binary (configured without nvcc)");
#endif
  }
}

void block_copy(Device device, const simt::BlockCopyParams& c) {
  switch (device) {
    case Device::emulated:
      return emulated_block_copy(c);
    case Device::cuda:
#if KVLAB_HAS_CUDA
      cuda_block_copy(c);
      KVLAB_CUDA_TRY(cudaDeviceSynchronize());
      return;
#else
      KVLAB_THROW(InvalidArgument, "the CUDA block copy is not built into this binary (configured without nvcc)");
#endif
    case Device::host:
      break;
  }
  KVLAB_THROW(InvalidArgument, "block_copy runs on a device (cuda or emulated); host backends copy with memmove");
}

}  // namespace kvlab
