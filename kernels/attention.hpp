#pragma once
// Attention over a KV view: decode (one query per sequence) and prefill (many queries, causal,
// appended after a cached prefix) are the same entry point; AttentionParams::q_indptr tells them
// apart. The implementation is chosen by device; dtype, head dim and layout are dispatched in
// kernels/dispatch.hpp.
#include <cstdint>
#include <string_view>

#include "alloc/core/device.hpp"
#include "kernels/attention_params.hpp"
#include "kernels/kv_view.hpp"
#include "kernels/simt/block_copy_kernel.hpp"
#include "kernels/thread_pool.hpp"

namespace kvlab {

/// Checks that params and view agree (heads, head dim, GQA ratio, pointers); throws InvalidArgument.
void validate_attention(const AttentionParams& p, const KvView& kv);

/// Checks that every sequence holds at least its own query tokens (reads q_indptr and seq_lens, so
/// host memory only); throws InvalidArgument.
void validate_host_lengths(const AttentionParams& p);

/// Host implementation: parallel over (sequence, KV head) on `pool`, vectorised over head_dim,
/// online softmax in fp32, K/V converted from their storage dtype tile by tile.
void host_attention(const AttentionParams& p, const KvView& kv, ThreadPool& pool = default_thread_pool());
/// The same, requesting rows `prefetch_lead_heads` KV heads ahead (at least 1; the overload above
/// uses host_prefetch_lead_heads()). The results are the same for every distance.
void host_attention(const AttentionParams& p, const KvView& kv, ThreadPool& pool, int prefetch_lead_heads);

/// How many KV heads ahead of its computation the host kernel requests K and V rows into L2 on a
/// CPU of this vendor (cpuid's vendor string, e.g. "GenuineIntel"): a prefetch distance, which
/// changes the kernel's speed and never its results. Measured in one process (docs/kernels.md,
/// "How far ahead, by CPU"): on two Intel Xeons one head beat two (by 3 %) and three (by 6-10 %);
/// on a Zen 4 EPYC three beat one by 13-20 %. Vendors not measured get three.
[[nodiscard]] int host_prefetch_lead_heads(std::string_view cpu_vendor);
/// The same for the CPU this process runs on.
[[nodiscard]] int host_prefetch_lead_heads();

/// Which attention kernels run on a GPU: kvlab's own CUDA kernel (the one the SIMT emulator also
/// runs) or FlashInfer's (kernels/flashinfer/, where this binary was built with it: its ragged,
/// non-paged kernel over contiguous views where it can address them, its paged kernel otherwise;
/// flashinfer_paged: the paged kernel for every view, contiguous ones cut into logical pages);
/// automatic means FlashInfer's on a GPU where built, kvlab's otherwise.
enum class GpuKernel { automatic, kvlab, flashinfer, flashinfer_paged };

/// FlashInfer calls so far in this process, by kernel ({0, 0} where it is not built).
struct FlashInferCalls {
  std::int64_t ragged = 0, paged = 0;
};
[[nodiscard]] FlashInferCalls flashinfer_calls();

/// "auto" / "kvlab" / "flashinfer" / "flashinfer-paged".
[[nodiscard]] const char* to_string(GpuKernel k) noexcept;
/// True when FlashInfer's kernels are compiled into this binary (nvcc and scripts/fetch_flashinfer.sh).
[[nodiscard]] bool flashinfer_built() noexcept;
/// The kernel `k` means on `device` (never automatic).
[[nodiscard]] GpuKernel resolve(GpuKernel k, Device device) noexcept;

/// Runs attention on `device`: the host kernels on host memory (Device::host), the CUDA kernels
/// (`gpu`: FlashInfer's or kvlab's split-KV kernel, its partitions sized to the GPU) on device memory
/// (Device::cuda), or kvlab's CUDA kernels under the host SIMT emulator on the emulated device's
/// memory (Device::emulated; `gpu` flashinfer is refused there). Asynchronous on a GPU.
void attention(Device device, const AttentionParams& p, const KvView& kv, GpuKernel gpu = GpuKernel::automatic);

/// The batched block copy kernel (copy-on-write) on `device` (cuda: launched and synchronised;
/// emulated: under the SIMT emulator); every pointer in `c` is the device's. Host backends copy
/// with memmove instead: InvalidArgument for Device::host.
void block_copy(Device device, const simt::BlockCopyParams& c);

}  // namespace kvlab
