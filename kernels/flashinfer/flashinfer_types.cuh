#pragma once
// The FlashInfer template arguments kvlab instantiates, shared by the launcher
// (flashinfer_attention.cu) and the instance files (flashinfer_instance.cu.in): one list, so the
// declaration the launcher calls and the definitions the instances emit cannot drift apart.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/mask.cuh>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/pos_enc.cuh>

namespace kvlab::fi {

inline constexpr std::uint32_t kHeadDim = 128;
using IdType = std::int32_t;
template <class T>
using Params = flashinfer::BatchPrefillPagedParams<T, T, T, IdType>;
template <class T>
using RaggedParams = flashinfer::BatchPrefillRaggedParams<T, T, T, IdType>;
using Variant = flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/false,
                                             /*logits_soft_cap=*/false, /*alibi=*/false>;

}  // namespace kvlab::fi

namespace flashinfer {
// Defined in <flashinfer/attention/prefill.cuh>, instantiated in the instance files only (each
// takes minutes of nvcc; the launcher must not instantiate them again).
template <bool SAME_KV_STRIDES, uint32_t CTA_TILE_Q, uint32_t HEAD_DIM_QK, uint32_t HEAD_DIM_VO,
          PosEncodingMode POS_ENCODING_MODE, bool USE_FP16_QK_REDUCTION, MaskMode MASK_MODE, typename AttentionVariant,
          typename Params>
cudaError_t BatchPrefillWithPagedKVCacheDispatched(Params params, typename Params::DTypeO* tmp_v, float* tmp_s,
                                                   bool enable_pdl, cudaStream_t stream);
template <uint32_t CTA_TILE_Q, uint32_t HEAD_DIM_QK, uint32_t HEAD_DIM_VO, PosEncodingMode POS_ENCODING_MODE,
          bool USE_FP16_QK_REDUCTION, MaskMode MASK_MODE, typename AttentionVariant, typename Params>
cudaError_t BatchPrefillWithRaggedKVCacheDispatched(Params params, typename Params::DTypeO* tmp_v, float* tmp_s,
                                                    bool enable_pdl, cudaStream_t stream);
}  // namespace flashinfer

/// The one instantiation per (kernel, dtype, CTA tile): causal, no positional encoding, fp32 QK
/// reduction, K and V at the same strides.
#define KVLAB_FLASHINFER_PREFILL(T, TILE)                                                              \
  flashinfer::BatchPrefillWithPagedKVCacheDispatched<                                                  \
      true, TILE, kvlab::fi::kHeadDim, kvlab::fi::kHeadDim, flashinfer::PosEncodingMode::kNone, false, \
      flashinfer::MaskMode::kCausal, kvlab::fi::Variant, kvlab::fi::Params<T>>
#define KVLAB_FLASHINFER_RAGGED(T, TILE)                                                         \
  flashinfer::BatchPrefillWithRaggedKVCacheDispatched<                                           \
      TILE, kvlab::fi::kHeadDim, kvlab::fi::kHeadDim, flashinfer::PosEncodingMode::kNone, false, \
      flashinfer::MaskMode::kCausal, kvlab::fi::Variant, kvlab::fi::RaggedParams<T>>
