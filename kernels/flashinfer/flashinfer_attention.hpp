#pragma once
// FlashInfer's attention kernels (flashinfer-python 0.7.2.post1, Apache-2.0; headers fetched by
// scripts/fetch_flashinfer.sh, never committed) behind kvlab's one kernel interface: the same
// AttentionParams and KvView as the host, kvlab CUDA and emulated kernels (kernels/attention.hpp).
//
// Design note
//
// Rationale. Researchers compare allocators under the kernels serving systems run; vLLM and
// SGLang run FlashInfer, and vAttention's claim is that unmodified kernels run on virtually
// contiguous KV. So every view goes to FlashInfer's batch prefill kernel (the tensor-core path
// vLLM and SGLang also use for decode): one kernel family for decode and prefill, the GQA group a
// runtime value, and only fp16/bf16 x head dim 128 (every model preset) instantiated.
//
// Approach.
//  * paged-B: FlashInfer's paged_kv_t over the backend's own pool and block size (page = block),
//    strides as runtime fields; the block table becomes FlashInfer's CSR page list (indptr,
//    indices, last_page_len) in a small kernel on the stream.
//  * contiguous and vmm: each sequence's rows are a run at a constant token stride. FlashInfer
//    addresses K and V through two base pointers, so a contiguous view reaches it in its
//    common-base form (KvView::k_base/v_base/base_granule/seq_base_index, found by BatchViews):
//    sequence s starts seq_base_index[s] granules after k_base and as many after v_base.
//    - Ragged (non-paged) kernel, as vAttention runs unmodified kernels: each sequence is a
//      request whose rows start kv_indptr tokens after the base. FlashInfer's kv_indptr is a
//      packed prefix sum, so the sequences go in address order with a query-less request over
//      each gap between them; queries and outputs are permuted to that order and back.
//    - Paged kernel over logical pages where the ragged one cannot address the view (rows off
//      the token grid, or offsets past its 32-bit token x stride products, about 8 GiB of fp16
//      per base): the rows cut into pages of kContiguousPageTokens consecutive tokens.
//    No byte moves; the kernels read the backend's own rows.
//  * Queries and outputs are fp32 in kvlab's interface; they are converted to and from the KV
//    dtype on the stream around the kernel (a [tokens x heads x 128] copy, small beside the KV).
//  * FlashInfer plans on the host from host copies of the lengths (AttentionParams::host_*; read
//    back when absent). A plan is kept while the lengths stay the same, so the layers of one
//    step share it.
//
// Limitations. fp16 and bf16 KV only, head dim 128; no sliding window, soft cap or ALiBi (no
// preset needs them); the workspace (FlashInfer's default 128 MiB + 8 MiB) is the process's,
// outside every backend's accounting; one stream at a time.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/attention.hpp"
#include "kernels/attention_params.hpp"
#include "kernels/kv_view.hpp"

namespace kvlab {

/// Tokens per logical page when a contiguous view is handed to FlashInfer's paged kernel.
inline constexpr int kContiguousPageTokens = 16;

/// Which of FlashInfer's kernels reads a contiguous view: automatic takes the ragged (non-paged)
/// kernel where it can address the view and the paged kernel over logical pages otherwise.
enum class FlashInferPath { automatic, ragged, paged };

/// Runs attention with FlashInfer's kernels on device memory, asynchronously on `stream`.
/// InvalidArgument (naming the value) for a dtype, head dim or view FlashInfer is not built for,
/// and for `path` ragged where the ragged kernel cannot address the view.
void flashinfer_attention(const AttentionParams& p, const KvView& kv, cudaStream_t stream = nullptr,
                          FlashInferPath path = FlashInferPath::automatic);

/// Frees FlashInfer's workspace and staging buffers (they are allocated on first use).
void flashinfer_release_workspace();

}  // namespace kvlab
