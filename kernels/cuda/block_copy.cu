// The batched block-copy kernel of kernels/simt/block_copy_kernel.hpp instantiated with CudaExec.
#include <algorithm>

#include "alloc/cuda/cuda_check.hpp"
#include "alloc/core/error.hpp"
#include "kernels/cuda/cuda_attention.hpp"
#include "kernels/simt/block_copy_kernel.hpp"

namespace kvlab {
namespace {

template <class Word>
__global__ void block_copy(simt::BlockCopyParams c) {
  simt::CudaExec ex;
  simt::block_copy_kernel<Word>(ex, c);
}

template <class Word>
void launch(const simt::BlockCopyParams& c, cudaStream_t stream, unsigned threads) {
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(c.num_pairs, 65535));
  block_copy<Word><<<blocks, threads, 0, stream>>>(c);
}

}  // namespace

void cuda_block_copy(const simt::BlockCopyParams& c, cudaStream_t stream, unsigned block_threads) {
  KVLAB_EXPECTS(c.num_pairs >= 0 && c.block_bytes >= 0, "num_pairs and block_bytes must not be negative");
  KVLAB_EXPECTS(block_threads >= 32 && block_threads <= 1024, "block_threads must be in 32..1024");
  if (c.num_pairs == 0 || c.block_bytes == 0) return;
  KVLAB_EXPECTS(c.src_pool && c.dst_pool && c.src_blocks && c.dst_blocks, "pools and block lists must be set");
  switch (simt::block_copy_word_bytes(c)) {
    case 16:
      launch<simt::Copy16>(c, stream, block_threads);
      break;
    case 8:
      launch<simt::Copy8>(c, stream, block_threads);
      break;
    case 4:
      launch<std::uint32_t>(c, stream, block_threads);
      break;
    default:
      launch<unsigned char>(c, stream, block_threads);
      break;
  }
  KVLAB_CUDA_TRY(cudaGetLastError());
}

}  // namespace kvlab
