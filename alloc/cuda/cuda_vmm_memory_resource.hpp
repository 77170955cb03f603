#pragma once
// Device memory from the CUDA driver's virtual-memory API (cuMemAddressReserve + cuMemCreate +
// cuMemMap + cuMemSetAccess), through a `const CudaDriverApi&`: the real driver (cuda_driver(),
// `--device cuda`) or the contract-checking double (alloc/cuda/emulated/, `--device emulated`). One
// code path for both, so what runs on the double is what would run on a GPU.
#if !KVLAB_HAS_CUDA_HEADERS
#error \
    "alloc/cuda/cuda_vmm_memory_resource.hpp needs the CUDA toolkit headers; guard the include with KVLAB_HAS_CUDA_HEADERS"
#endif

#include <map>
#include <mutex>
#include <vector>

#include "alloc/cuda/cuda_driver.hpp"
#include "alloc/cuda/cuda_primary_context.hpp"
#include "alloc/memory/memory_resource.hpp"

namespace kvlab {

// Design note
//
// Rationale. Contiguous and paged pools, per-batch arrays and the kernels' queries and outputs must
// live where the CUDA kernels read them. cudaMalloc would do on a GPU but has no double; the VMM
// calls have one that enforces their contract, so every allocation goes through them: the
// emulated device then exercises the very calls a GPU run makes.
//
// Approach. allocate(n): round n up to the granularity, reserve that much address space, create
// one physical allocation, map it and grant read-write access to the device; each step undoes the
// ones before it when it fails (OutOfMemory for CUDA_ERROR_OUT_OF_MEMORY, CudaError otherwise), so
// a failed allocate leaves nothing. deallocate(p): synchronise the context (a kernel may still
// read the memory), unmap, release, free the reservation. deallocate cannot throw: a step that
// fails keeps the allocation on a list retried by the next allocate, deallocate and the destructor,
// so an injected fault leaks nothing once the driver answers again.
//
// Limitations. Every allocation costs at least one granule (2 MiB on current GPUs) and three driver
// calls: meant for few, large buffers (KV pools, grown-as-needed staging arrays), not a general
// allocator. One device.
class CudaVmmMemoryResource final : public MemoryResource {
 public:
  /// Initialises the driver and retains device `ordinal`'s primary context (throws CudaError when
  /// that fails). `reported` is what device() says: Device::cuda for the real driver,
  /// Device::emulated for the double.
  CudaVmmMemoryResource(const CudaDriverApi& api, Device reported, int ordinal = 0);
  ~CudaVmmMemoryResource() override;

  [[nodiscard]] std::size_t granularity() const noexcept { return ctx_.granularity(); }
  /// Allocations not yet given back, and deallocations still waiting for the driver.
  [[nodiscard]] std::size_t live_allocations() const;
  [[nodiscard]] std::size_t pending_frees() const;
  /// Retries the deallocations a driver failure deferred (allocate and deallocate do it too).
  void flush_pending() noexcept;
  /// Why the deferred deallocations are still waiting: each refusing call with its CUresult and
  /// how many deallocations it stopped, e.g. "cuCtxSynchronize: CUDA_ERROR_CONTEXT_IS_DESTROYED
  /// (709) x19"; empty when none waits.
  [[nodiscard]] std::string refusals() const;

 private:
  struct Block {
    std::size_t size = 0;
    CUmemGenericAllocationHandle handle = 0;
    bool mapped = true;  // false once unmapped (the release or free failed after it)
    bool released = false;
    const char* refused_by = nullptr;  // the last call that failed on it, and its result
    CUresult refused_with = CUDA_SUCCESS;
  };

  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept override;
  [[nodiscard]] Device do_device() const noexcept override { return reported_; }
  [[nodiscard]] std::string do_name() const override;

  /// Tries to finish a deallocation; false when a driver call failed (the block says how far it got).
  bool free_block(CUdeviceptr base, Block& b) noexcept;
  void retry_pending() noexcept;  // needs mutex_

  const CudaDriverApi& api_;
  Device reported_;
  CudaPrimaryContext ctx_;
  mutable std::mutex mutex_;
  std::map<CUdeviceptr, Block> live_;
  std::vector<std::pair<CUdeviceptr, Block>> pending_;
};

}  // namespace kvlab
