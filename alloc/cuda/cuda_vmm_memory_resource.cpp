// Compiled in every build; the body exists only where the CUDA toolkit headers were found.
#if KVLAB_HAS_CUDA_HEADERS
#include "alloc/cuda/cuda_vmm_memory_resource.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

namespace kvlab {

namespace {
void* host_ptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }  // NOLINT
}  // namespace

CudaVmmMemoryResource::CudaVmmMemoryResource(const CudaDriverApi& api, Device reported, int ordinal)
    : api_(api), reported_(reported), ctx_(api, ordinal) {}

CudaVmmMemoryResource::~CudaVmmMemoryResource() {
  std::lock_guard lock(mutex_);
  retry_pending();
  // Whatever is still live or pending leaked from its owner or the driver refused it: the driver
  // (the double's leak report) shows it; freeing it here would hide the owner's bug. ctx_ releases
  // the primary context after this body.
}

std::string CudaVmmMemoryResource::do_name() const {
  return std::string(to_string(reported_)) + "-vmm:" + std::to_string(ctx_.device());
}

std::size_t CudaVmmMemoryResource::live_allocations() const {
  std::lock_guard lock(mutex_);
  return live_.size();
}

std::size_t CudaVmmMemoryResource::pending_frees() const {
  std::lock_guard lock(mutex_);
  return pending_.size();
}

void CudaVmmMemoryResource::flush_pending() noexcept {
  std::lock_guard lock(mutex_);
  retry_pending();
}

void* CudaVmmMemoryResource::do_allocate(std::size_t bytes, std::size_t alignment) {
  std::lock_guard lock(mutex_);
  retry_pending();
  const std::size_t granularity = ctx_.granularity();
  const std::size_t size = (bytes + granularity - 1) / granularity * granularity;
  CUdeviceptr base = 0;
  KVLAB_CU_TRY(api_, cuMemAddressReserve(&base, size, std::max(alignment, granularity), 0, 0));
  CUmemGenericAllocationHandle handle = 0;
  int done = 0;  // 1: created, 2: mapped
  try {
    const CUmemAllocationProp p = ctx_.pinned_prop();
    KVLAB_CU_TRY(api_, cuMemCreate(&handle, size, &p, 0));
    done = 1;
    KVLAB_CU_TRY(api_, cuMemMap(base, size, 0, handle, 0));
    done = 2;
    const CUmemAccessDesc desc = ctx_.read_write_access();
    KVLAB_CU_TRY(api_, cuMemSetAccess(base, size, &desc, 1));
  } catch (...) {
    // Undo in reverse; a failing undo parks the block for a later retry instead of leaking it.
    Block b{size, handle, done >= 2, done < 1};
    if (!free_block(base, b)) pending_.emplace_back(base, b);
    throw;
  }
  live_[base] = Block{size, handle, true, false};
  return host_ptr(base);
}

bool CudaVmmMemoryResource::free_block(CUdeviceptr base, Block& b) noexcept {
  const auto step = [&b](const char* call, CUresult r) {
    if (r == CUDA_SUCCESS) return true;
    b.refused_by = call;
    b.refused_with = r;
    return false;
  };
  if (b.mapped) {
    // A kernel of this context may still read the memory: wait for it before unmapping.
    if (!step("cuCtxSetCurrent + cuCtxSynchronize", ctx_.synchronize())) return false;
    if (!step("cuMemUnmap", api_.cuMemUnmap(base, b.size))) return false;
    b.mapped = false;
  }
  if (!b.released) {
    if (!step("cuMemRelease", api_.cuMemRelease(b.handle))) return false;
    b.released = true;
  }
  return step("cuMemAddressFree", api_.cuMemAddressFree(base, b.size));
}

std::string CudaVmmMemoryResource::refusals() const {
  std::lock_guard lock(mutex_);
  std::map<std::pair<std::string, int>, std::size_t> counts;  // (call, result) -> deallocations
  for (const auto& [base, b] : pending_)
    ++counts[{b.refused_by != nullptr ? b.refused_by : "?", static_cast<int>(b.refused_with)}];
  std::string out;
  for (const auto& [key, n] : counts) {
    const char* name = cu_result_name(static_cast<CUresult>(key.second));
    out += (out.empty() ? "" : "; ") + key.first + ": " + (name != nullptr ? name : "CUresult") + " (" +
           std::to_string(key.second) + ") x" + std::to_string(n);
  }
  return out;
}

void CudaVmmMemoryResource::retry_pending() noexcept {
  std::erase_if(pending_, [&](auto& entry) { return free_block(entry.first, entry.second); });
}

void CudaVmmMemoryResource::do_deallocate(void* p, std::size_t, std::size_t) noexcept {
  std::lock_guard lock(mutex_);
  retry_pending();
  const auto it = live_.find(static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)));
  if (it == live_.end()) return;  // not ours: nothing to give back (the owner's bug shows as its leak)
  Block b = it->second;
  const CUdeviceptr base = it->first;
  live_.erase(it);
  try {
    if (!free_block(base, b)) pending_.emplace_back(base, b);
  } catch (...) {  // emplace_back's allocation: the driver's leak report shows the block
  }
}

}  // namespace kvlab

#endif  // KVLAB_HAS_CUDA_HEADERS
